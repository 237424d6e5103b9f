"""`oi-lsp chat` answers a program's input (oi/input) at the terminal: a line, and a password
typed without echo."""

from __future__ import annotations

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.test_chat import ASK, Term, term  # noqa: F401 (the fixture)


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
