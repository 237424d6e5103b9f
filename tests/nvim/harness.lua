-- Helpers for the scenario scripts of tests/test_neovim.py (run with `nvim -u init.lua -l`).
local T = {}

T.root = vim.fs.normalize(vim.fn.getcwd())
T.notes = {} -- every vim.notify: { msg, level }
local notify = vim.notify
T.stock_notify = notify -- Neovim's own, for a scenario that needs it
vim.notify = function(msg, level, opts)
  table.insert(T.notes, { msg = msg, level = level or vim.log.levels.INFO })
  return notify(msg, level, opts)
end

function T.chat() return require("oi.chat") end
function T.lines(root) return T.chat().lines(root or T.root) end
function T.text(root) return table.concat(T.lines(root), "\n") end

--- Wait until pred() is true; fail with `what` and the chat transcript when it never is.
function T.wait(pred, what, timeout)
  if not vim.wait(timeout or 60000, pred, 20) then
    error(("timed out waiting for %s; chat:\n%s"):format(what, T.text()), 2)
  end
end

function T.wait_text(needle, root, timeout)
  T.wait(function() return T.text(root):find(needle, 1, true) ~= nil end,
    ("%q in the chat"):format(needle), timeout)
end

--- Wait for the turns and runs of `root` to end (after at least one started).
function T.wait_idle(root, timeout)
  root = root or T.root
  T.wait(function() return not T.chat().busy(root) end, "the turn to end", timeout)
end

--- Keys typed by the user (mappings apply).
function T.keys(keys) vim.api.nvim_feedkeys(vim.keycode(keys), "mx", false) end

--- Focus the chat window of `root` with the cursor on its transcript.
function T.focus_chat(root)
  local chat = require("oi.chat")
  chat.open(root or T.root, false)
  vim.api.nvim_set_current_win(vim.fn.bufwinid(chat.buffer(root or T.root)))
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
end

--- Run the scenario; write what it returns (plus the notifications) to $OI_TEST_OUT, stop
--- the servers cleanly, exit non-zero on an error.
function T.run(fn)
  local t0 = vim.uv.hrtime()
  local ok, res = xpcall(fn, debug.traceback)
  io.stderr:write(("scenario took %.2f s\n"):format((vim.uv.hrtime() - t0) / 1e9))
  local out = { ok = ok, notes = T.notes, lines = T.lines() }
  if ok then out.result = res else out.error = res end
  local f = assert(io.open(os.getenv("OI_TEST_OUT"), "w"))
  f:write(vim.json.encode(out))
  f:close()
  t0 = vim.uv.hrtime()
  require("oi.client").stop_all(20000)
  io.stderr:write(("stop took %.2f s\n"):format((vim.uv.hrtime() - t0) / 1e9))
  if not ok then os.exit(1) end
end

return T
