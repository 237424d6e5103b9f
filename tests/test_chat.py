"""`oi-lsp chat` driven as a user drives it: in a real pseudo-terminal (pexpect), against the
real server it starts as its child and the scripted model server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.neovim import Terminal

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "chat"
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]"
                  r"|\x1b[=>78]|\r")
ASK = "Run? [y]es / [n]o / [e]dit / [c] always"
ALWAYS = "/ [a]lways (everything):"


def chat_env(data_dir: Path, model: ModelServer | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OI_", "OPENAI_", "VISUAL", "EDITOR"))}
    env.update(PYTHONPATH=str(ROOT), OI_LSP_DATA_DIR=str(data_dir), TERM="xterm-256color",
               OI_LSP_STANDALONE="1")  # a server of its own, not a daemon shared by tests
    if model is not None:
        env.update(OI_MODEL="openai/scripted", OI_API_BASE=model.url, OI_API_KEY="sk-test-key")
    env.update(extra)
    return env


class Term:
    """`oi-lsp chat` in a pseudo-terminal; what it printed, with escape sequences removed."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.child = pexpect.spawn(sys.executable, ["-m", "oi_lsp", "chat", *args], cwd=str(cwd),
                                   env=env, dimensions=(50, 120), encoding="utf-8",
                                   codec_errors="replace")
        self.raw = ""
        self.pos = 0  # what `until` matched so far

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw)

    def until(self, wanted: str, timeout: float = 60) -> str:
        """Wait until `wanted` appears after the last match; return the text up to it."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            index = text.find(wanted, self.pos)
            if index >= 0:
                seen, self.pos = text[self.pos:index + len(wanted)], index + len(wanted)
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"{wanted!r} did not appear; the terminal shows:\n"
                                     f"{text[-3000:]}")
            try:
                self.raw += self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF as exc:
                raise AssertionError(f"chat exited before {wanted!r}; it showed:\n"
                                     f"{text[-3000:]}") from exc

    def send(self, line: str) -> None:
        self.child.sendline(line)

    def exit_status(self, timeout: float = 60) -> int | None:
        """Wait for the end; the exit status."""
        deadline = time.monotonic() + timeout
        while self.child.isalive() and time.monotonic() < deadline:
            try:
                self.raw += self.child.read_nonblocking(65536, timeout=0.2)
            except (pexpect.TIMEOUT, pexpect.EOF):
                pass
        assert not self.child.isalive(), f"chat did not exit; it shows:\n{self.text[-3000:]}"
        self.child.close()
        return self.child.exitstatus

    def kill(self) -> None:
        if self.child.isalive():
            self.child.kill(9)
        self.child.close(force=True)


@pytest.fixture
def term(model: ModelServer, data_dir: Path, workspace: Path) -> Iterator[type[Term]]:
    """Start chats in the test's workspace; every one is ended after the test."""
    started: list[Term] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Term:
        chat = Term(list(args), workspace, env or chat_env(data_dir, model))
        started.append(chat)
        return chat

    yield start  # type: ignore[misc]
    for chat in started:
        chat.kill()


def run_chat(args: list[str], cwd: Path, env: dict[str, str],
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`oi-lsp chat` without a terminal: stdin is /dev/null, output is captured."""
    return subprocess.run([sys.executable, "-m", "oi_lsp", "chat", *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


def test_streamed_markdown_answer(term: type[Term], model: ModelServer) -> None:
    model.script(ms.text("# Plan\n\nHere is a **bold** start.\n\n- first item\n- second item\n",
                         pieces=8, delay=0.05))
    chat = term()
    chat.until("> ")
    chat.send("hello there")
    chat.until("second item")
    chat.until("> ")
    text = chat.text
    # Rendered, not raw markdown: list bullets drawn, the heading's '#' gone.
    assert "• first item" in text and "• second item" in text
    assert "# Plan" not in text and "Plan" in text
    assert model.requests[0]["messages"][-1] == {"role": "user", "content": "hello there"}
    chat.child.sendeof()
    assert chat.exit_status() == 0


def test_yes_runs_and_output_streams(term: type[Term], model: ModelServer) -> None:
    model.script(ms.tool("python", "print('out-' + str(6 * 7))", say="Computing."),
                 ms.text("The answer is ready."))
    chat = term("compute it")
    chat.until("print('out-' + str(6 * 7))")  # the proposal, highlighted
    chat.until(ASK)
    chat.send("y")
    chat.until("out-42")
    chat.until("The answer is ready.")
    assert tool_results(model.requests[1]) == ["out-42"]


def test_no_skips(term: type[Term], model: ModelServer, workspace: Path) -> None:
    marker = workspace / "ran.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('x')"),
                 ms.text("Fine, I did not write it."))
    chat = term("write the file")
    chat.until(ASK)
    chat.send("n")
    chat.until("Fine, I did not write it.")
    assert not marker.exists()
    assert "declined" in tool_results(model.requests[1])[0]


def test_edit_in_editor_runs_edited_code(term: type[Term], model: ModelServer, data_dir: Path,
                                          tmp_path: Path) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nprintf \"print('edited-' + 'by-editor')\\n\" > \"$1\"\n")
    editor.chmod(0o755)
    model.script(ms.tool("python", "print('original-' + 'code')"), ms.text("Noted the edit."))
    chat = term("print something", env=chat_env(data_dir, model, EDITOR=str(editor)))
    chat.until(ASK)
    chat.send("e")
    chat.until("edited-by-editor")  # the edited code is shown, then its output
    chat.until("Noted the edit.")
    assert "original-code" not in chat.text
    told = tool_results(model.requests[1])[0]
    assert "edited" in told and "edited-by-editor" in told


def test_edit_without_editor_reads_the_code_inline(term: type[Term],
                                                   model: ModelServer) -> None:
    model.script(ms.tool("python", "print('original-' + 'code')"), ms.text("Ran yours."))
    chat = term("print something")
    chat.until(ASK)
    chat.send("e")
    chat.until("... ")
    chat.send("print('typed-' + 'inline')")
    chat.until("... ")
    chat.send(".")
    chat.until("typed-inline")
    chat.until("Ran yours.")
    assert "typed-inline" in tool_results(model.requests[1])[0]


def test_always_for_this_command(term: type[Term], model: ModelServer,
                                 workspace: Path) -> None:
    model.script(ms.tool("shell", "echo one-2"), ms.tool("shell", "echo two"),
                 ms.tool("shell", "ls -d ."), ms.text("All done."))
    chat = term("echo things")
    chat.until("[c] always `echo` " + ALWAYS)
    chat.send("c")
    chat.until("From now on `echo` commands run without asking in this folder")
    chat.until("one-2")
    seen = chat.until("[c] always `ls` " + ALWAYS)  # echo two ran by itself; ls asks
    assert "running (auto-run)" in seen and "two" in seen
    chat.send("n")
    chat.until("All done.")
    assert "autoRunRules" in (workspace / ".oi" / "profile.yaml").read_text()
    assert tool_results(model.requests[3])[:2] == ["one-2", "two"]


def test_ctrl_c_stops_the_run_and_a_second_exits(term: type[Term], model: ModelServer) -> None:
    model.script(ms.tool("shell", 'echo "zz-$((40 + 2))"; sleep 30'))
    chat = term("wait a while")
    chat.until(ASK)
    chat.send("y")
    chat.until("zz-42")
    chat.child.sendintr()
    chat.until("[stopped]")
    chat.until("> ")
    # The REPL and the conversation go on; the model learns the run was stopped.
    model.script(ms.text("Stopped, as you asked."))
    chat.send("ok?")
    chat.until("Stopped, as you asked.")
    assert "stopped" in tool_results(model.requests[-1])[0]
    chat.until("> ")
    chat.child.sendintr()  # at the idle prompt: leave
    assert chat.exit_status() == 0


def test_second_session_continues_the_history(term: type[Term], model: ModelServer) -> None:
    model.script(ms.text("Remember the word zebra."))
    first = term("first message")
    first.until("Remember the word zebra.")
    first.until("> ")
    first.child.sendeof()
    assert first.exit_status() == 0

    model.script(ms.text("You told me zebra."))
    second = term()
    second.until("Continuing this folder's conversation")
    second.until("first message")
    second.until("Remember the word zebra.")
    second.until("> ")
    second.send("what was the word?")
    second.until("You told me zebra.")
    sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] != "system"]
    assert sent == ["first message", "Remember the word zebra.", "what was the word?"]


def test_one_shot_without_y_fails_clearly(model: ModelServer, data_dir: Path,
                                          workspace: Path) -> None:
    marker = workspace / "ran.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('x')"))
    done = run_chat(["write the file"], workspace, chat_env(data_dir, model))
    assert done.returncode == 3, done.stderr
    assert "Pass -y (--auto-run)" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr  # InvalidStateError, seen under load
    assert "open(" in done.stdout  # the proposal was shown
    assert not marker.exists()
    assert len(model.requests) == 1  # the turn ended there; the model was not asked again


def test_one_shot_with_y_runs(model: ModelServer, data_dir: Path, workspace: Path) -> None:
    marker = workspace / "ran.txt"
    model.script(ms.tool("python", f"open({str(marker)!r}, 'w').write('x'); "
                                   "print('wrote-' + 'it')"),
                 ms.text("Done writing."))
    done = run_chat(["-y", "write the file"], workspace, chat_env(data_dir, model))
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "x"
    assert "wrote-it" in done.stdout and "Done writing." in done.stdout


def test_one_shot_y_never_auto_runs_high_risk(model: ModelServer, data_dir: Path,
                                              workspace: Path) -> None:
    doomed = workspace / "doomed"
    doomed.mkdir()
    model.script(ms.tool("shell", f"rm -rf {doomed}"))
    done = run_chat(["-y", "clean up"], workspace, chat_env(data_dir, model))
    assert done.returncode == 3, done.stderr
    assert "high risk" in done.stdout  # shown next to the code
    assert "even with -y" in done.stderr and "rm -rf" in done.stderr
    assert doomed.is_dir()


def test_exec_runs_in_the_workspace_repl(data_dir: Path, workspace: Path) -> None:
    env = chat_env(data_dir, None)  # no model needed
    done = run_chat(["--exec", "python", "import os; print(40 + 2, os.getcwd())"], workspace,
                    env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", str(workspace)]
    failed = run_chat(["--exec", "python", "1 / 0"], workspace, env)
    assert failed.returncode == 1
    assert "ZeroDivisionError" in failed.stdout + failed.stderr


def test_no_model_says_what_to_set(term: type[Term], data_dir: Path, workspace: Path) -> None:
    done = run_chat(["hello"], workspace, chat_env(data_dir, None))
    assert done.returncode == 2
    for needed in ("No model is configured", "OPENAI_API_KEY", "OI_MODEL=ollama_chat/llama3.1",
                   "OI_API_BASE=http://localhost:11434"):
        assert needed in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    chat = term(env=chat_env(data_dir, None))  # in a terminal too: no prompt that goes nowhere
    chat.until("OPENAI_API_KEY")
    assert chat.exit_status() == 2


def test_profile_chooses_the_model(model: ModelServer, data_dir: Path, workspace: Path,
                                   tmp_path: Path) -> None:
    config = tmp_path / "config"
    (config / "profiles").mkdir(parents=True)
    (config / "profiles" / "scripted.yaml").write_text(
        f"llm:\n  model: openai/scripted\n  api_base: {model.url}\n  api_key: sk-test-key\n")
    env = chat_env(data_dir, None, OI_LSP_CONFIG_DIR=str(config))  # no model but the profile's
    model.script(ms.text("Hello from the profile."))
    done = run_chat(["--profile", "scripted", "hi"], workspace, env)
    assert done.returncode == 0, done.stderr
    assert "Hello from the profile." in done.stdout
    missing = run_chat(["--profile", "nope", "hi"], workspace, env)
    assert missing.returncode == 2
    assert "no profile 'nope'" in missing.stderr
    assert "Traceback" not in missing.stdout + missing.stderr


def test_magic_command_is_answered_by_the_server(term: type[Term], model: ModelServer) -> None:
    chat = term()
    chat.until("> ")
    chat.send("%help")
    chat.until("remove your last message")  # the server's help text, streamed back
    chat.until("> ")
    assert model.requests == []  # % commands never reach the model


def test_reasoning_streams_dim_and_folds_into_one_line(term: type[Term],
                                                       model: ModelServer) -> None:
    thought = "The user greets me.\nI should greet back, briefly.\nNo code is needed here."
    model.script(ms.error(529, headers={"retry-after": "0"}),
                 ms.text("Hello to you too.", reasoning=thought, pieces=6, delay=0.05,
                         usage={"prompt": 1200, "cached": 1000, "completion": 56,
                                "reasoning": 40}))
    chat = term()
    chat.until("> ")
    chat.send("hello")
    chat.until("retrying in 0 s (retry 1 of 3)")
    chat.until("thinking…")  # the streaming view, its last lines
    chat.until("Hello to you too.")
    chat.until("> ")
    # Folded: one dim line that says it was thought and how it began, then the answer.
    assert re.search(r"▸ thought(?: for \d+ s)?, 14 words: The user greets me\. I should",
                     chat.text)
    assert chat.text.index("▸ thought") < chat.text.rindex("Hello to you too.")
    # The provider's counts under the turn: cached and reasoning tokens apart.
    assert "1,256 tokens (1,200 in, 1,000 cached; 56 out, 40 reasoning)" in chat.text
    # The reasoning was not sent back to the model as text, nor shown as the answer.
    chat.send("again")
    chat.until("> ")
    sent = json.dumps(model.requests[-1]["messages"])
    assert "greet back" not in sent and "Hello to you too." in sent
    chat.child.sendeof()
    assert chat.exit_status() == 0


def test_one_shot_prints_the_reasoning_summary_and_the_answer(model: ModelServer,
                                                               data_dir: Path,
                                                               workspace: Path) -> None:
    model.script(ms.text("It is 4.", reasoning="2 + 2 is 4."))
    done = run_chat(["what is 2+2"], workspace, chat_env(data_dir, model))
    assert done.returncode == 0, done.stderr
    assert "▸ thought, 5 words: 2 + 2 is 4." in done.stdout
    assert done.stdout.index("▸ thought") < done.stdout.index("It is 4.")
    assert "<think>" not in done.stdout and "thinking…" not in done.stdout


@contextlib.contextmanager
def in_tmux(env: dict[str, str], cwd: Path, size: tuple[int, int],
            *args: str) -> Iterator[Terminal]:
    """`oi-lsp chat ARGS` in a real terminal (a tmux session of that size), ended after."""
    name = f"oi-chat-{os.getpid()}-{time.monotonic_ns()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(size[0]), "-y",
                    str(size[1]), "-c", str(cwd),
                    *[a for k, v in env.items() if k.startswith("OI_") or k in ("PYTHONPATH",)
                      for a in ("-e", f"{k}={v}")],
                    f"{shlex.join([sys.executable, '-m', 'oi_lsp', 'chat', *args])}; sleep 60"],
                   check=True, env=env)
    try:
        yield Terminal(name)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False, capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_ctrl_c_while_an_answer_streams_prints_it_once(model: ModelServer, data_dir: Path,
                                                       workspace: Path) -> None:
    """In a real terminal (tmux): the tty's `^C` echo pushed the answer being redrawn in place
    a line down, and its first line showed twice above `stopping…`."""
    sentence = "This is a long streamed answer that goes on and on, word after word. "
    model.script(ms.text(sentence * 8, pieces=80, delay=0.1))
    with in_tmux(chat_env(data_dir, model), workspace, (100, 30)) as screen:
        # Typed before the prompt shows, the terminal echoes the line above it, as a shell's.
        screen.wait(">", last_line=True)
        screen.keys("=tell me a story", "Enter")
        screen.wait("word after word. This is")  # the answer streams, redrawn in place
        screen.keys("C-c")
        shown = screen.wait("[stopped]")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "ctrl-c-while-streaming.txt").write_text(shown, encoding="utf-8")
    lines = shown.splitlines()
    answer = lines[lines.index("> tell me a story") + 1:lines.index(
        "stopping… (Ctrl-C again quits)")]
    assert answer and answer[0].startswith("This is a long streamed answer")
    assert len(answer) == len(set(answer)), shown  # no line twice
    assert "^C" not in shown


MCP_SERVERS = ROOT / "tests" / "mcp" / "node_modules" / "@modelcontextprotocol"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
@pytest.mark.skipif(not (MCP_SERVERS / "server-filesystem").is_dir(),
                    reason="scripts/setup.d/65-mcp-servers did not install them")
def test_a_destructive_mcp_call_is_asked_at_the_prompt_and_denied(
        model: ModelServer, data_dir: Path, workspace: Path, tmp_path: Path) -> None:
    """MCP servers as code (issue 39), in a real terminal: the approved code lists the folder
    (npm's server-filesystem, from a profile's mcpServers), prints it, then calls write_file,
    which its server marks destructive: the server's question (window/showMessageRequest) is
    asked at the prompt once the output printed before it shows, never into it; 2 (Deny)
    makes the call raise CallDenied, its ⚙ line completed. The screens are saved to
    test-artifacts/chat/mcp-question.txt."""
    (workspace / "notes.txt").write_text("first note\n")
    target = workspace / "summary.txt"
    config = tmp_path / "config"
    (config / "profiles").mkdir(parents=True)
    server = MCP_SERVERS / "server-filesystem" / "dist" / "index.js"
    (config / "profiles" / "mcp.yaml").write_text(json.dumps({"mcpServers": {
        "filesystem": {"command": shutil.which("node") or "node",
                       "args": [str(server), str(workspace)]}}}))
    model.script(ms.tool("python", (
        f"from oi_mcp import filesystem\n"
        f"print(filesystem.list_directory(path={str(workspace)!r})['content'])\n"
        f"filesystem.write_file(path={str(target)!r}, content='the summary')\n"
        f"print('summary' + ' written')\n")), ms.text("You did not let me write it."))
    env = chat_env(data_dir, model, OI_LSP_CONFIG_DIR=str(config))
    with in_tmux(env, workspace, (120, 40), "--profile", "mcp") as screen:
        screen.wait(">", last_line=True)
        screen.keys("=write the summary", "Enter")
        screen.wait(ASK, last_line=True)
        screen.keys("=y", "Enter")
        screen.wait("[1] Allow  [2] Deny:", last_line=True)
        time.sleep(0.5)  # nothing more comes while it asks
        shown, asked = screen.screen(), screen.screen(joined=True)
        screen.keys("=2", "Enter")
        screen.wait("You did not let me write it.")
        screen.wait(">", last_line=True)
        shown_after, after = screen.screen(), screen.screen(joined=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "mcp-question.txt").write_text(
        f"--- the question\n{shown.rstrip()}\n--- after 2 (Deny)\n{shown_after}",
        encoding="utf-8")
    lines = [line for line in asked.splitlines() if line]
    # The output printed before the call, then the call's line, then the whole question;
    # the prompt line holds nothing else.
    assert lines[-1] == "[1] Allow  [2] Deny:", asked
    assert lines[-2].startswith("oi-lsp: The running code calls the MCP tool "
                                "filesystem.write_file, which its server marks destructive, "
                                "with {") and lines[-2].endswith(
        '"content": "the summary"}. Allow this call?'), asked
    assert lines[-3].startswith("⚙ filesystem.write_file(path="), asked
    assert lines[-4] == "[FILE] notes.txt" and lines[-5].startswith(
        "⚙ filesystem.list_directory(path="), asked
    # Denied: the call's line completed below the answer, the exception, nothing written.
    lines = after.splitlines()
    answered = lines.index("[1] Allow  [2] Deny: 2")
    assert re.fullmatch(r"⚙ filesystem\.write_file\(path=.*, content='the summary'\) · "
                        r"CallDenied after \d+\.\d\d s", lines[answered + 1]), after
    assert "CallDenied: the user did not allow filesystem.write_file" in lines[answered:]
    assert "summary written" not in lines and not target.exists()
    assert "CallDenied: the user did not allow" in tool_results(model.requests[1])[0]


def test_a_continued_conversation_opens_with_its_last_page_counted_against_all() -> None:
    """The chat asks for the last page only (oi/history's limit); what it says was left out
    counts the whole conversation (its `total`)."""
    import io

    from rich.console import Console

    from oi_lsp.tui.render import Renderer
    out = io.StringIO()
    ui = Renderer(Console(file=out, width=80), Console(file=io.StringIO()))
    page = [{"role": "user" if i % 2 else "assistant", "type": "message", "content": f"m{i}"}
            for i in range(60, 100)]
    ui.history(page, total=100)
    text = out.getvalue()
    assert "(94 earlier messages not shown)" in text
    assert "m94" in text and "m99" in text and "m93" not in text

