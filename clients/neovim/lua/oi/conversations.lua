-- :OIConversations: a vim.ui.select picker over the workspace's saved conversations
-- (oi/sessions): open one, start a new one, or export one (Markdown, Notebook, JSON) into a
-- buffer you can read or :write.
local M = {}

local client = require("oi.client")

M.formats = {
  { label = "Export to Markdown", format = "markdown", filetype = "markdown", ext = "md" },
  { label = "Export to Notebook (.ipynb)", format = "ipynb", filetype = "json", ext = "ipynb" },
  { label = "Export to JSON", format = "json", filetype = "json", ext = "json" },
}

--- "title · 12 messages · 2026-12-03 06:20" (the open one marked).
---@param s table an entry of oi/sessions
---@return string
function M.label(s)
  local title = (s.title and s.title ~= "") and s.title or "(empty)"
  local when = type(s.updated) == "string" and s.updated:gsub("T", " "):gsub(":%d%dZ$", "") or ""
  local label = ("%s%s · %d message%s · %s"):format(s.current and "● " or "  ", title,
    s.messageCount or 0, s.messageCount == 1 and "" or "s", when)
  if type(s.snippet) == "string" then label = label .. " · " .. s.snippet end
  return label
end

local function show(root, res)
  local chat = require("oi.chat")
  require("oi.approval").clear(root)
  chat.open(root, false)
  chat.load_history(root, res.messages or {}, res.start)
end

--- Open the export of conversation `id` in a new window (not saved: :w name saves it).
local function export(root, id, fmt)
  client.request(root, "oi/session/export", { id = id, format = fmt.format }, function(res)
    vim.cmd("new")
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(res.content or "", "\n", { plain = true }))
    vim.bo[buf].filetype = fmt.filetype
    vim.bo[buf].modified = false
    local name = (res.title and res.title ~= "") and res.title or id
    vim.b[buf].oi_export = { id = id, format = fmt.format }
    vim.b[buf].oi_root = root -- oi.status() and the commands there act on its workspace
    vim.notify(("oi: %s exported (%s); :w %s.%s saves it"):format(name, fmt.format,
      name:gsub("[^%w%-_ ]", ""):gsub(" +", "-"):sub(1, 40), fmt.ext))
  end)
end

local function act(root, s)
  local actions = { { label = "Open" } }
  vim.list_extend(actions, M.formats)
  vim.ui.select(actions, { prompt = M.label(s), format_item = function(a) return a.label end },
    function(a)
      if not a then return end
      if a.format then return export(root, s.id, a) end
      client.request(root, "oi/session/open", { id = s.id, limit = require("oi.chat").PAGE },
        function(res) show(root, res) end)
    end)
end

--- Pick a conversation of the workspace of `root`, then what to do with it; with `query`,
--- among those where all its words were said (the server's search), the words shown.
---@param root string
---@param query string?
function M.pick(root, query)
  query = query and vim.trim(query) or ""
  local params = query ~= "" and { query = query } or {}
  client.request(root, "oi/sessions", params, function(res)
    local items = { { new = true } }
    vim.list_extend(items, res.sessions or {})
    if query ~= "" and #items == 1 then
      vim.notify(("oi: “%s” was said in no conversation of %s"):format(query,
        vim.fs.basename(root)))
      return
    end
    local prompt = query ~= "" and ("Conversations of %s with “%s”"):format(
      vim.fs.basename(root), query) or "Conversations of " .. vim.fs.basename(root)
    vim.ui.select(items, { prompt = prompt,
      format_item = function(s) return s.new and "+ New conversation" or M.label(s) end },
      function(s)
        if not s then return end
        if not s.new then return act(root, s) end
        client.request(root, "oi/session/new", {}, function(r)
          show(root, r)
          vim.notify("oi: new conversation (the others stay saved: :OIConversations)")
        end)
      end)
  end)
end

return M
