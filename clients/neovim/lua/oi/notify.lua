-- The server's messages (window/showMessage) through vim.notify, never a "Press ENTER" prompt:
-- Neovim's own vim.notify echoes, and an echo longer than the command line waits for a key
-- (and the chat stops redrawing meanwhile). With it, a long message is echoed in one short
-- line and shown whole in the chat; a notifier plugin (nvim-notify, noice, ...) gets it whole.
-- The server's questions (window/showMessageRequest) go to vim.ui.select.
local M = {}

local LEVELS = { [1] = vim.log.levels.ERROR, [2] = vim.log.levels.WARN,
  [3] = vim.log.levels.INFO, [4] = vim.log.levels.DEBUG }

--- Whether vim.notify is Neovim's own (it echoes), not a plugin's.
function M.stock()
  local info = debug.getinfo(vim.notify, "S")
  return info ~= nil and info.source:find("vim/_editor.lua", 1, true) ~= nil
end

--- `text` cut to one line that fits the command line without a prompt.
function M.one_line(text, width)
  local first = vim.split(text, "\n", { plain = true })[1]
  local more = first ~= text
  width = math.max(20, width - 34) -- room for "… (in :OIChat)" and the ruler
  if vim.fn.strdisplaywidth(first) > width then
    first, more = vim.fn.strcharpart(first, 0, width - 1), true
  end
  return more and (first .. "… (in :OIChat)") or first
end

--- vim.notify "oi: text", in one line with Neovim's own; returns whether it was cut.
function M.tell(text, level)
  local full = "oi: " .. text
  local stock = M.stock()
  local short = stock and M.one_line(full, vim.o.columns) or full
  -- a second echo before a redraw would stack under the first and ask "Press ENTER"
  if stock then pcall(vim.cmd.redraw) end
  vim.notify(short, level, { title = "oi" })
  return short ~= full
end

--- window/showMessage of the oi server of `root`: errors go to the chat (oi.chat.server_error),
--- the rest to vim.notify, and to the chat when cut.
function M.server_message(root, params)
  local level = LEVELS[params.type] or vim.log.levels.INFO
  local text = (tostring(params.message or ""):gsub("^oi%-lsp: ", ""))
  if level == vim.log.levels.ERROR then return require("oi.chat").server_error(root, text) end
  if M.tell(text, level) then require("oi.chat").note(root, text) end
end

--- window/showMessageRequest: the server asks (trust a folder's settings, allow a destructive
--- MCP tool call, restart a REPL). vim.ui.select with the whole message as its prompt (Neovim's
--- own handler adds ": " after its "?"); the action chosen, or vim.NIL. The handler runs in
--- the request's coroutine: an asynchronous vim.ui.select (dressing, telescope) is waited for.
function M.ask(err, params, ctx)
  local co, main = coroutine.running()
  if err or not co or main then
    return vim.lsp.handlers["window/showMessageRequest"](err, params, ctx)
  end
  local opts = { kind = "lsp_message", prompt = tostring(params.message or "") .. " ",
    format_item = function(action) return (tostring(action.title):gsub("\r?\n", " ")) end }
  -- Neovim's own vim.ui.select (inputlist()) stops redrawing until it is answered: the chat
  -- shows what came before the question (the server asks once the run's output settled).
  pcall(vim.cmd.redraw)
  vim.ui.select(params.actions or {}, opts, function(choice)
    -- resumed later: a stock vim.ui.select answers before the yield below
    vim.schedule(function() coroutine.resume(co, choice or vim.NIL) end)
  end)
  return coroutine.yield()
end

return M
