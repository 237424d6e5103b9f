-- LSP glue: one oi-lsp client for every workspace root. The first root starts the server; each
-- further root is added to it as a workspace folder (workspace/didChangeWorkspaceFolders), and
-- gets its own session there (conversation, REPLs): one server process, not one per root.
local M = {}

local client_id = nil -- the running client
local ready = false   -- true once it is initialized
local queued = {}     -- functions waiting for its initialization
local folders = {}    -- root -> true: the workspace folders it serves
local by_uri = {}     -- workspace URI -> root, to route the server's notifications

local has_011 = vim.fn.has("nvim-0.11") == 1

--- The workspace root of a buffer: the chat's own root, else a root marker above its file,
--- else the window's working directory (so each tab can have its own with :tcd).
---@param bufnr integer? the buffer (0 or nil: the current one)
---@return string root an absolute, normalized folder
function M.root(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local own = vim.b[bufnr].oi_root
  if own then return own end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if vim.bo[bufnr].buftype == "" and name ~= "" then
    local found = vim.fs.root(bufnr, require("oi").config.root_markers)
    if found then return vim.fs.normalize(found) end
  end
  return vim.fs.normalize(vim.fn.getcwd())
end

---@param root string
---@return string uri the file:// URI of the folder
function M.uri(root) return vim.uri_from_fname(root) end

local function is_stopped(client)
  if has_011 then return client:is_stopped() end
  return client.is_stopped()
end

--- The root a notification is about: its `workspace`; else (window/showMessage names none)
--- the one root where a turn or run goes on, else the current buffer's root when the server
--- serves it, else the first root.
local function root_for(params)
  local uri = type(params) == "table" and params.workspace or nil
  if type(uri) == "string" then
    if by_uri[uri] then return by_uri[uri] end
    local ok, path = pcall(vim.uri_to_fname, uri)
    if ok and folders[vim.fs.normalize(path)] then return vim.fs.normalize(path) end
  end
  local busy = vim.tbl_filter(function(r) return require("oi.chat").busy(r) end,
    vim.tbl_keys(folders))
  if #busy == 1 then return busy[1] end
  local here = M.root(0)
  if folders[here] then return here end
  return next(folders)
end

local function handlers()
  local function on(fn)
    return function(err, params)
      if err then return end
      local root = root_for(params)
      if root then fn(root, params) end
    end
  end
  return {
    ["oi/stream"] = on(function(root, p)
      require("oi.status").on_stream(root, p)
      require("oi.chat").on_stream(root, p)
    end),
    ["oi/proposal"] = on(function(root, p) require("oi.approval").on_proposal(root, p) end),
    ["oi/answered"] = on(function(root, p) require("oi.approval").answered(root, p) end),
    ["oi/turn"] = on(function(root, p)
      require("oi.status").on_turn(root, p)
      require("oi.chat").on_turn(root, p)
      require("oi.usage").on_turn(root, p)
      require("oi.errors").on_turn(root, p)
    end),
    ["oi/resources"] = on(function(root, p)
      require("oi.status").on_resources(root, p)
      require("oi.chat").on_resources(root, p)
    end),
    -- A running program reads input: asked here, masked for a password; nil is a cancel.
    ["oi/input"] = function(err, params)
      if err then return vim.NIL end
      local value = require("oi.input").ask(params)
      if value == nil then return vim.NIL end
      return { value = value }
    end,
    -- The server cancels only its oi/input (the run ended): the open box closes.
    ["$/cancelRequest"] = function()
      require("oi.input").cancel()
      return vim.NIL
    end,
    -- The server's messages: errors to the chat, all to vim.notify, never a "Press ENTER".
    ["window/showMessage"] = function(err, params)
      local root = root_for(params)
      if not err and root then require("oi.notify").server_message(root, params) end
      return vim.NIL
    end,
    ["window/showMessageRequest"] = function(...) return require("oi.notify").ask(...) end,
  }
end

--- Add `root` to the running client's workspace folders (the server opens its session).
local function add_folder(client, root)
  local folder = { uri = M.uri(root), name = vim.fs.basename(root) }
  folders[root], by_uri[folder.uri] = true, root
  client.workspace_folders = client.workspace_folders or {}
  for _, f in ipairs(client.workspace_folders) do
    if f.uri == folder.uri then return end
  end
  table.insert(client.workspace_folders, folder)
  local params = { event = { added = { folder }, removed = {} } }
  if has_011 then
    client:notify("workspace/didChangeWorkspaceFolders", params)
  else
    client.notify("workspace/didChangeWorkspaceFolders", params)
  end
end

local function forget_client(code, signal)
  local roots = vim.tbl_keys(folders)
  client_id, ready, queued, folders, by_uri = nil, false, {}, {}, {}
  if vim.v.exiting ~= vim.NIL then return end -- v:exiting is null until Neovim quits
  vim.schedule(function()
    for _, r in ipairs(roots) do require("oi.chat").server_exited(r, code, signal) end
  end)
end

local function start(root)
  local cfg = require("oi").config
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.experimental = vim.tbl_extend("force", caps.experimental or {}, { oi = true, oiInput = true })
  local config = {
    name = "oi",
    cmd = cfg.cmd,
    root_dir = root,
    workspace_folders = { { uri = M.uri(root), name = vim.fs.basename(root) } },
    capabilities = caps,
    init_options = require("oi").server_settings(),
    handlers = handlers(),
    on_init = function(c)
      ready = true
      local waiting = queued
      queued = {}
      for _, f in ipairs(waiting) do f(c) end
    end,
    on_exit = function(code, signal, cid)
      if cid == client_id then forget_client(code, signal) end
    end,
  }
  local ok, new_id
  if has_011 then
    -- attach = false: the client serves workspaces, not a document
    ok, new_id = pcall(vim.lsp.start, config, { attach = false, reuse_client = function() return false end })
  else
    ok, new_id = pcall(vim.lsp.start_client, config)
  end
  if not ok or not new_id then
    vim.notify(("oi: could not start %s%s"):format(table.concat(cfg.cmd, " "),
      ok and "" or (": " .. tostring(new_id))), vim.log.levels.ERROR)
    return nil
  end
  client_id = new_id
  folders[root], by_uri[M.uri(root)] = true, root
  return new_id
end

--- Start the client (or reuse it, adding `root` as a workspace folder); `fn(client)` runs once
--- it is initialized.
---@param root string the workspace root
---@param fn fun(client: vim.lsp.Client)
function M.with_client(root, fn)
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if not (client and not is_stopped(client)) then
    if client_id then forget_client(0, 0) end
    if not start(root) then return end
    client = vim.lsp.get_client_by_id(client_id)
  end
  local function go(c)
    if not folders[root] then add_folder(c, root) end
    fn(c)
  end
  if ready then go(client) else table.insert(queued, go) end
end

--- Send an oi/* request for `root`; `on_result(result)` on success. Errors go to the chat
--- buffer and vim.notify, unless `on_error(err)` takes them.
---@param root string the workspace root (sent as `workspace` unless params has one)
---@param method string e.g. "oi/chat", "oi/configure"
---@param params table?
---@param on_result fun(result: any)?
---@param on_error fun(err: lsp.ResponseError)?
function M.request(root, method, params, on_result, on_error)
  params = params or {}
  params.workspace = params.workspace or M.uri(root)
  M.with_client(root, function(client)
    local function handler(err, result)
      if err then
        if on_error then return on_error(err) end
        require("oi.chat").error(root, ("%s: %s"):format(method, err.message or vim.inspect(err)))
      elseif on_result then
        on_result(result)
      end
    end
    if has_011 then client:request(method, params, handler) else client.request(method, params, handler) end
  end)
end

--- The same, waiting up to `timeout` ms: returns result, err (err is a string on a timeout).
---@param root string
---@param method string
---@param params table?
---@param timeout integer? milliseconds (default 10000)
---@return any result, string? err
function M.request_sync(root, method, params, timeout)
  local done, result, err = false, nil, nil
  M.request(root, method, params, function(r) done, result = true, r end,
    function(e) done, err = true, e end)
  if not vim.wait(timeout or 10000, function() return done end, 20) then
    return nil, ("no answer to %s in %d s"):format(method, math.floor((timeout or 10000) / 1000))
  end
  return result, err and (err.message or vim.inspect(err))
end

--- The running client's id, if any.
---@return integer?
function M.id() return client_id end

--- The client id serving each root (for :checkhealth and tests): one client for all of them.
---@return table<string, integer>
function M.clients()
  local out = {}
  if client_id then for root in pairs(folders) do out[root] = client_id end end
  return out
end

--- Stop the oi client; with `wait`, until it has exited (at most `wait` ms).
---@param wait integer? milliseconds
function M.stop_all(wait)
  local id = client_id
  local c = id and vim.lsp.get_client_by_id(id)
  if c then if has_011 then c:stop() else c.stop() end end
  if wait and c then
    vim.wait(wait, function() return client_id ~= id end, 20)
  end
end

return M
