-- The user commands (plugin/oi.lua defines them, these do the work).
local M = {}

local client = require("oi.client")
local chat = require("oi.chat")

--- Send a chat message (with an optional context) for `root`.
function M.send(root, message, context)
  chat.user(root, message, context)
  client.request(root, "oi/chat", { message = message, context = context })
end

function M.chat(o)
  local root = client.root(0)
  chat.open(root, true)
  client.with_client(root, function() end) -- start the server (and the kernel) early
  if o.args ~= "" then M.send(root, o.args) end
end

local function lines_of(o)
  local first, last = o.line1, o.line2
  if o.range == 0 then first, last = vim.fn.line("."), vim.fn.line(".") end
  return first, last, vim.api.nvim_buf_get_lines(0, first - 1, last, true)
end

function M.run(o)
  local root = client.root(0)
  local first, last, lines = lines_of(o)
  local context = {
    uri = vim.uri_from_bufnr(0),
    language = vim.bo.filetype ~= "" and vim.bo.filetype or nil,
    selection = table.concat(lines, "\n"),
    range = { start = { line = first - 1, character = 0 },
              ["end"] = { line = last - 1, character = #lines[#lines] } },
  }
  local function go(instruction)
    if not instruction or vim.trim(instruction) == "" then return end
    chat.open(root, false)
    M.send(root, instruction, context)
  end
  if o.args ~= "" then go(o.args) else vim.ui.input({ prompt = "oi> " }, go) end
end

function M.exec(o)
  local root = client.root(0)
  local _, _, lines = lines_of(o)
  local language = vim.bo.filetype ~= "" and vim.bo.filetype or "python"
  local code = table.concat(lines, "\n")
  chat.open(root, false)
  chat.gap(root)
  chat.put(root, "## Run")
  chat.put(root, chat.fence(language, code))
  client.request(root, "oi/execute", { language = language, code = code }, function(res)
    if res.status ~= "ok" then
      chat.put(root, ("_(%s%s)_"):format(res.status, res.error and (": " .. res.error) or ""))
    end
  end)
end

function M.stop()
  local root = client.root(0)
  client.request(root, "oi/stop", {}, function(res)
    if not res.stopped then vim.notify("oi: nothing was running") end
  end)
end

function M.reset()
  local root = client.root(0)
  client.request(root, "oi/reset", {}, function()
    chat.clear(root)
    vim.notify("oi: conversation cleared, REPL restarted")
  end)
end

function M.history()
  local root = client.root(0)
  client.request(root, "oi/history", {}, function(res) chat.load_history(root, res.messages) end)
end

function M.autorun(o)
  local root = client.root(0)
  if o.args ~= "on" and o.args ~= "off" then
    return vim.notify("oi: :OIAutoRun on|off", vim.log.levels.ERROR)
  end
  client.request(root, "oi/configure", { autoRun = o.args == "on" }, function()
    vim.notify("oi: auto-run " .. o.args)
  end)
end

function M.model(o)
  local root = client.root(0)
  client.request(root, "oi/configure", { model = o.args }, function(res)
    vim.notify("oi: model " .. tostring(res.settings and res.settings.model or o.args))
  end)
end

return M
