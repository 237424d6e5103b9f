-- The user commands (plugin/oi.lua defines them, these do the work).
local M = {}

local client = require("oi.client")
local chat = require("oi.chat")

local attached = {} -- root -> attachments for its next message (:OIAttach)
local image_types = { png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg",
  gif = "image/gif", webp = "image/webp" }

--- Send a chat message (with an optional context, and what :OIAttach attached) for `root`.
---@param root string
---@param message string
---@param context table? {uri?, language?, selection?, range?}
function M.send(root, message, context)
  chat.user(root, message, context)
  local attachments = attached[root]
  attached[root] = nil
  client.request(root, "oi/chat", { message = message, context = context,
    attachments = attachments })
end

--- :OIAttach {image}: an image file goes with the next message of this workspace.
---@param o vim.api.keyset.create_user_command.command_args
function M.attach(o)
  local path = vim.fn.fnamemodify(vim.fn.expand(o.args), ":p")
  local mime = image_types[(vim.fn.fnamemodify(path, ":e")):lower()]
  if not mime then
    return vim.notify("oi: only images can be attached (png, jpeg, gif, webp): " .. o.args,
      vim.log.levels.ERROR)
  end
  if vim.fn.filereadable(path) == 0 then
    return vim.notify("oi: cannot read " .. path, vim.log.levels.ERROR)
  end
  local root = client.root(0)
  attached[root] = attached[root] or {}
  table.insert(attached[root], { uri = vim.uri_from_fname(path), mimeType = mime })
  vim.notify(("oi: attached %s (sent with the next message)"):format(vim.fs.basename(path)))
end

---@param o vim.api.keyset.create_user_command.command_args
function M.chat(o)
  local root = client.root(0)
  chat.open(root, true)
  client.with_client(root, function() end) -- start the server (and its kernel) now
  if o.args ~= "" then M.send(root, o.args) end
end

--- The text a command acts on: the visual selection when the range is the last one (charwise
--- when it was), else the range's lines, else the current line. Returns text and an LSP range.
local function selection(o)
  local first, last = o.line1, o.line2
  if o.range == 0 then first, last = vim.fn.line("."), vim.fn.line(".") end
  local vs, ve = vim.fn.getpos("'<"), vim.fn.getpos("'>")
  if o.range == 2 and vim.fn.visualmode() == "v" and vs[2] == first and ve[2] == last then
    local text = vim.fn.getregion(vs, ve, { type = "v" })
    local end_line = vim.api.nvim_buf_get_lines(0, last - 1, last, true)[1]
    local end_col = math.min(ve[3], #end_line) -- '> past the end of the line ($)
    return table.concat(text, "\n"), { start = { line = first - 1, character = vs[3] - 1 },
      ["end"] = { line = last - 1, character = end_col } }
  end
  local lines = vim.api.nvim_buf_get_lines(0, first - 1, last, true)
  return table.concat(lines, "\n"), { start = { line = first - 1, character = 0 },
    ["end"] = { line = last - 1, character = #lines[#lines] } }
end

local function file_uri(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  if name == "" or vim.bo[buf].buftype ~= "" then return nil end
  return vim.uri_from_fname(vim.fn.fnamemodify(name, ":p"))
end

---@param o vim.api.keyset.create_user_command.command_args
function M.run(o)
  local root = client.root(0)
  local text, range = selection(o)
  local context = {
    uri = file_uri(0),
    language = vim.bo.filetype ~= "" and vim.bo.filetype or nil,
    selection = text,
    range = range,
  }
  local function go(instruction)
    if not instruction or vim.trim(instruction) == "" then return end
    chat.open(root, false)
    M.send(root, vim.trim(instruction), context)
  end
  if o.args ~= "" then go(o.args) else vim.ui.input({ prompt = "oi> " }, go) end
end

-- Filetypes whose language the server names otherwise (it knows the other aliases).
local LANGUAGES = { sh = "shell", ps1 = "powershell", markdown = "python", [""] = "python" }

---@param o vim.api.keyset.create_user_command.command_args
function M.exec(o)
  local root = client.root(0)
  local code = selection(o)
  local language = LANGUAGES[vim.bo.filetype] or vim.bo.filetype
  chat.open(root, false)
  chat.gap(root)
  chat.put(root, "## Run")
  chat.code_block(root, language, code)
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
    require("oi.approval").clear(root)
    chat.clear(root)
    vim.notify("oi: conversation cleared, REPL restarted")
  end)
end

function M.history()
  local root = client.root(0)
  chat.open(root, false)
  client.request(root, "oi/history", { limit = chat.PAGE }, function(res)
    chat.load_history(root, res.messages, res.start)
  end)
end

function M.earlier()
  local root = client.root(0)
  chat.open(root, false)
  chat.earlier(root)
end

---@param o vim.api.keyset.create_user_command.command_args
function M.autorun(o)
  local root = client.root(0)
  if o.args ~= "on" and o.args ~= "off" then
    return vim.notify("oi: usage: :OIAutoRun on|off", vim.log.levels.ERROR)
  end
  client.request(root, "oi/configure", { autoRun = o.args == "on" }, function(res)
    local on = res.settings and res.settings.autoRun
    if o.args == "on" and not on then
      vim.notify("oi: auto-run stays off (the workspace is not trusted)", vim.log.levels.WARN)
    else
      vim.notify("oi: auto-run " .. (on and "on" or "off") .. " for " .. root)
    end
  end)
end

--- :OIModel name sets the model of this workspace; :OIModel alone opens the picker.
---@param o vim.api.keyset.create_user_command.command_args
function M.model(o)
  local root = client.root(0)
  if o.args == "" then return require("oi.models").pick(root) end
  client.request(root, "oi/configure", { model = o.args }, function(res)
    local name = res.settings and res.settings.model
    vim.notify("oi: model " .. (name and name ~= vim.NIL and name or "(none configured)"))
  end)
end

--- :OIConversations: open, start or export the workspace's conversations.
---@param o vim.api.keyset.create_user_command.command_args
function M.conversations(o)
  require("oi.conversations").pick(client.root(0), o and o.args or nil)
end

--- :OIKey: the API key, typed hidden (never in the command history), for this Neovim session:
--- sent to the server as a settings change (it applies to every workspace), not saved.
function M.key()
  local ok, key = pcall(vim.fn.inputsecret, "API key (not saved; empty cancels): ")
  if not ok or type(key) ~= "string" or vim.trim(key) == "" then
    return vim.notify("oi: no key entered; nothing changed")
  end
  local oi = require("oi")
  oi.config.settings = oi.config.settings or {}
  oi.config.settings.apiKey = vim.trim(key)
  local root = client.root(0)
  client.with_client(root, function(c)
    local params = { settings = { oi = oi.server_settings() } }
    if vim.fn.has("nvim-0.11") == 1 then
      c:notify("workspace/didChangeConfiguration", params)
    else
      c.notify("workspace/didChangeConfiguration", params)
    end
    vim.notify("oi: API key set for this session (not saved)")
  end)
end

return M
