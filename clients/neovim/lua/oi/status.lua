-- What each workspace is doing, for statuslines and progress UIs: require("oi").status() reads
-- it, every change is a `User OIStatus` autocmd, and each turn or run is mirrored as an LSP
-- work-done progress ($/progress through Neovim's own handler), so `vim.lsp.status()`,
-- `LspProgress` autocmds and fidget.nvim show thinking / waiting / running.
local M = {}

---@class oi.Status
---@field activity string? "thinking" | "waiting" | "running" | nil (idle)
---@field language string? the language that runs
---@field resources string? "12 s · 98% CPU · 512 MB" during a long run
---@field retrying string? while thinking: the server's sentence about a retry of the model call
--- ("The model … is overloaded (529): retrying in 2 s (retry 1 of 3)"), until the next chunk
---@field turn string? the turn id of the progress
---@field session oi.Usage tokens and cost since Neovim started (see oi.usage)

local states = {} ---@type table<string, oi.Status>

local WORDS = { thinking = "thinking", waiting = "waiting for your approval", running = "running" }

---@param root string
---@return oi.Status
function M.get(root)
  states[root] = states[root] or { session = { promptTokens = 0, completionTokens = 0, calls = 0 } }
  return states[root]
end

--- The words for what `st` does now, or nil when idle.
local function message(st)
  if not st.activity then return nil end
  if st.activity == "thinking" and st.retrying then return st.retrying end
  local text = WORDS[st.activity] or st.activity
  if st.activity == "running" then
    if st.language then text = text .. " " .. st.language end
    if st.resources then text = text .. " " .. st.resources end
  end
  return text
end

local function progress(st, kind, text)
  local id = require("oi.client").id()
  if not id or not st.turn or not vim.lsp.get_client_by_id(id) then return end
  local value = { kind = kind, message = text }
  if kind == "begin" then value.title, value.cancellable = "Open Interpreter", true end
  pcall(vim.lsp.handlers["$/progress"], nil, { token = "oi-" .. st.turn, value = value },
    { client_id = id, method = "$/progress" })
end

local function changed(root, st)
  vim.api.nvim_exec_autocmds("User", { pattern = "OIStatus", modeline = false,
    data = { root = root, activity = st.activity, message = message(st) } })
  -- statuslines showing oi.status() are redrawn only on some events: every window's now
  pcall(vim.cmd.redrawstatus, { bang = true })
end

local function set(root, activity)
  local st = M.get(root)
  if st.activity == activity then return end
  st.activity = activity
  if activity ~= "running" then st.resources = nil end
  st.retrying = nil
  if activity and st.turn then progress(st, "report", message(st)) end
  changed(root, st)
end

-- A retry's sentence, shown (while still thinking) until the next chunk of the turn.
local function retrying(root, text)
  local st = M.get(root)
  if st.retrying == text then return end
  st.activity, st.retrying = "thinking", text
  if st.turn then progress(st, "report", message(st)) end
  changed(root, st)
end

--- oi/stream: the status chunks say thinking / waiting / running / idle, or why the model is
--- called again (`retrying`).
---@param root string
---@param p table the notification
function M.on_stream(root, p)
  if p.type == "confirmation" then M.get(root).language = p.format end
  if p.type ~= "status" then
    if M.get(root).retrying then retrying(root, nil) end
    return
  end
  if p.format == "retrying" then return retrying(root, p.content or "retrying") end
  if M.get(root).retrying and p.format == M.get(root).activity then retrying(root, nil) end
  set(root, p.format ~= "idle" and p.format or nil)
end

--- oi/turn: a turn or run begins (a progress begins) or ends (it ends).
---@param root string
---@param p table the notification
function M.on_turn(root, p)
  local st = M.get(root)
  if p.status == "running" then
    st.turn, st.language, st.retrying = p.turnId, nil, nil
    st.activity = p.kind == "execute" and "running" or "thinking"
    progress(st, "begin", message(st))
    changed(root, st)
    return
  end
  if p.turnId == st.turn then
    progress(st, "end", p.status)
    st.turn = nil
  end
  st.activity, st.resources, st.retrying = nil, nil, nil
  changed(root, st)
end

--- oi/resources: a long run's figures.
---@param root string
---@param p table the notification
function M.on_resources(root, p)
  local st = M.get(root)
  local r = p.repl or {}
  local parts = { ("%d s"):format(math.floor(tonumber(p.elapsed) or 0)) }
  if r.cpuPercent then table.insert(parts, ("%d%% CPU"):format(math.floor(r.cpuPercent + 0.5))) end
  if r.rss then table.insert(parts, ("%d MB"):format(math.floor(r.rss / 1048576 + 0.5))) end
  st.resources = table.concat(parts, " · ")
  if r.language and not st.language then st.language = r.language end
  st.activity = "running"
  progress(st, "report", message(st))
  changed(root, st)
end

--- The statusline text of `root`: what it does now, else the session's tokens and cost, else "".
---@param root string
---@return string
function M.text(root)
  local st = states[root]
  if not st then return "" end
  local now = message(st)
  if now then return "oi: " .. now end
  local usage = require("oi.usage").session_text(st.session)
  return usage and ("oi: " .. usage) or ""
end

return M
