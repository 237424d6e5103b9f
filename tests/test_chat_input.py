"""`oi-lsp chat` answers a program's input (oi/input) at the terminal: a line, and a password
typed without echo."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from tests import modelserver as ms
from tests.conftest import tool_results, trust_folder
from tests.modelserver import ModelServer
from tests.test_chat import ASK, Term, term  # noqa: F401 (the fixture)

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "chat"


def test_program_input_typed_in_the_terminal(term: type[Term],  # noqa: F811
                                             model: ModelServer) -> None:
    model.script(ms.tool("python", "import getpass\nname = input('name? ')\n"
                                   "pw = getpass.getpass('Password: ')\n"
                                   "print('hello', name, len(pw))"),
                 ms.text("Greeted."))
    chat = term("greet me")
    chat.until(ASK)
    chat.send("y")
    chat.until("name? ")
    chat.send("Ada")
    chat.until("Password: ")
    chat.send("pw-secret")
    chat.until("hello Ada 9")
    chat.until("Greeted.")
    assert "pw-secret" not in chat.text
    assert "hello Ada 9" in tool_results(model.requests[1])[0]


def test_attached_image_reaches_the_model(term: type[Term],  # noqa: F811
                                          model: ModelServer, tmp_path: Path,
                                          workspace: Path, data_dir: Path) -> None:
    # Open Interpreter's profile key for a model that takes images: the setting vision.
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("llm:\n  supports_vision: true\n")
    trust_folder(workspace, data_dir)
    first, second = tmp_path / "first.png", tmp_path / "second.png"
    Image.new("RGB", (30, 20)).save(first)
    Image.new("RGB", (40, 10)).save(second)
    model.script(ms.text("One image."), ms.text("Another."))
    chat = term("what is this?", "--attach", str(first))
    chat.until("One image.")
    chat.until("> ")
    chat.send(f"%attach {tmp_path / 'missing.png'}")
    chat.until("Not attached")
    chat.send(f"%attach {second}")
    chat.until("attached second.png")
    chat.send("and this?")
    chat.until("Another.")
    sizes = [[p["image_url"]["url"][:22] for p in m["content"] if p.get("type") == "image_url"]
             for body in model.requests for m in body["messages"][-1:]]
    assert sizes == [["data:image/png;base64,"], ["data:image/png;base64,"]]


def test_program_input_ended_with_ctrl_d(term: type[Term],  # noqa: F811
                                         model: ModelServer) -> None:
    """Ctrl-D at a program's prompt is end of input: the program's EOFError, shown at the
    user's own line (none of ipykernel's frames), and the chat goes on."""
    model.script(ms.tool("python", "def ask():\n    return input('name? ')\nask()"),
                 ms.text("No name, then."))
    chat = term("ask my name")
    chat.until(ASK)
    chat.send("y")
    chat.until("name? ")
    chat.child.sendcontrol("d")
    shown = chat.until("No name, then.")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "chat-input-ended-with-ctrl-d.txt").write_text(chat.text)
    assert "----> 2     return input('name? ')" in shown and "EOFError" in shown
    assert "ipykernel" not in shown
    assert "EOFError" in tool_results(model.requests[1])[0]
