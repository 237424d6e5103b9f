"""MCP servers as code in Neovim (issue 39), as a person sees it in a real terminal (tmux): the
approved Python calls npm's server-filesystem through oi_mcp; its destructive write_file asks
(window/showMessageRequest, the plugin's vim.ui.select, here Neovim's own list), the whole
question shown; Allow lets it write; the chat shows each call's ⚙ line, dimmed (OITool), with
the output. Screens saved to test-artifacts/neovim/mcp-*.txt."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, REPO, Nvim

SERVERS = Path(__file__).parent / "mcp" / "node_modules" / "@modelcontextprotocol"
ARTIFACTS = REPO / "test-artifacts" / "neovim"

pytestmark = [
    pytest.mark.skipif(not HAVE_NVIM, reason="nvim and oi-lsp must be installed"),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)"),
    pytest.mark.skipif(not (SERVERS / "server-filesystem").is_dir(),
                       reason="scripts/setup.d/65-mcp-servers did not install them"),
]
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def squeezed(screen: str) -> str:
    """The chat pane (right of the vsplit) and the command lines below it, without any
    whitespace: a line wrapped anywhere reads as one."""
    rows = [row.split("│", 1)[1] if "│" in row else row for row in screen.splitlines()]
    return re.sub(r"\s+", "", "".join(rows))


def color_before(colored: str, text: str) -> str:
    """The last SGR (its parameters) on the row of `text` before it: the color it is drawn in."""
    row = next(r for r in colored.splitlines() if text in SGR.sub("", r))
    at = row.index(text) if text in row else len(row)
    codes = SGR.findall(row[:at])
    return codes[-1] if codes else ""


def test_a_destructive_mcp_call_is_asked_and_allowed_in_a_terminal(
        nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("first note\n")
    target = workspace / "summary.txt"
    code = (f"from oi_mcp import filesystem\n"
            f"listing = filesystem.list_directory(path={str(workspace)!r})\n"
            f"print(listing['content'])\n"
            f"filesystem.write_file(path={str(target)!r}, content='one file: notes.txt')\n"
            f"print('summary written')\n")
    model.script(ms.tool("python", code), ms.text("The summary is written."))
    servers = {"filesystem": {"command": shutil.which("node") or "node", "args": [
        str(SERVERS / "server-filesystem" / "dist" / "index.js"), str(workspace)]}}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with nvim.terminal(workspace, setup={"settings": model.settings(mcpServers=servers)},
                       size=(110, 34)) as term:
        term.wait("~")
        term.keys("=:set termguicolors", "Enter")  # tmux sets no COLORTERM: Comment has no color
        term.keys("=:OIChat write a summary of the folder", "Enter")
        term.wait("[a]lways")
        term.keys("r")
        # Neovim's own vim.ui.select: the question, its actions, then where to type
        question = term.wait("Type number and <Enter>", last_line=True)
        (ARTIFACTS / "mcp-question.txt").write_text(question)
        assert not target.exists()  # asked before it ran
        term.keys("1", "Enter")
        term.wait("The summary is written.")
        term.wait("tokens)_")  # the turn's usage line: it ended
        time.sleep(0.3)
        after, colored = term.screen(), term.screen(colors=True)
        (ARTIFACTS / "mcp-after.txt").write_text(after)
        term.keys("Escape", "=:qa!", "Enter")

    # The whole question on the screen: the tool, why, its arguments, both actions.
    asked = squeezed(question)
    assert ("oi-lsp:TherunningcodecallstheMCPtoolfilesystem.write_file,whichitsservermarks"
            "destructive,with") in asked, question
    assert '"content":"onefile:notes.txt"}.Allowthiscall?1:Allow2:Deny' in asked, question
    assert "summary.txt" in asked and "?:" not in asked  # Neovim's own handler adds ": "
    # Above it, the chat as it is: what the code printed, then the line of the call asked about
    # (they come another way than the question: the server asks once they settled).
    assert asked.index("[FILE]notes.txt") < asked.index("⚙filesystem.write_file(") < asked.index(
        "oi-lsp:Therunningcode"), question
    # Allowed: the file is written, the chat shows both calls' lines and the output in order.
    assert target.read_text() == "one file: notes.txt"
    shown = squeezed(after)
    listed = shown.index("⚙filesystem.list_directory(path='/tmp/")
    files = shown.index("[FILE]notes.txt", listed)
    written = shown.index("⚙filesystem.write_file(path=", files)
    assert re.match(r"⚙filesystem\.write_file\(path=[^)]*,content='onefile:notes\.txt'\)"
                    r"·\d+\.\d\ds", shown[written:]), after
    assert shown.index("summarywritten", written) < shown.index("Thesummaryiswritten.")
    # The ⚙ lines are drawn dimmed (OITool, linked to Comment), the output around them not.
    assert color_before(colored, "⚙ filesystem.list_directory") != color_before(
        colored, "[FILE] notes.txt")
    # What went back to the model: the lines too.
    result = tool_results(model.requests[1])[0]
    assert "⚙ filesystem.write_file(path=" in result and "summary written" in result
