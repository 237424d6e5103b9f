-- LSP glue: one oi-lsp client per workspace root, reused by every buffer of that root.
local M = {}

local by_root = {}  -- root -> client id
local root_of = {}  -- client id -> root
local ready = {}    -- client id -> true once initialized
local queued = {}   -- client id -> functions waiting for initialization

local has_011 = vim.fn.has("nvim-0.11") == 1

--- The workspace root of a buffer: the chat's own root, else a root marker above its file,
--- else the window's working directory (so each tab can have its own with :tcd).
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

function M.uri(root) return vim.uri_from_fname(root) end

local function is_stopped(client)
  if has_011 then return client:is_stopped() end
  return client.is_stopped()
end

local function handlers()
  local function on(fn)
    return function(err, params, ctx)
      if err then return end
      local root = root_of[ctx.client_id]
      if root then fn(root, params) end
    end
  end
  return {
    ["oi/stream"] = on(function(root, p) require("oi.chat").on_stream(root, p) end),
    ["oi/proposal"] = on(function(root, p) require("oi.approval").on_proposal(root, p) end),
    ["oi/turn"] = on(function(root, p) require("oi.chat").on_turn(root, p) end),
    ["oi/resources"] = on(function(root, p) require("oi.chat").on_resources(root, p) end),
    -- A running program reads input: asked here, masked for a password; nil is a cancel.
    ["oi/input"] = function(err, params)
      if err then return vim.NIL end
      local value = require("oi.input").ask(params)
      if value == nil then return vim.NIL end
      return { value = value }
    end,
    -- The server's messages: errors to the chat, all to vim.notify, never a "Press ENTER".
    ["window/showMessage"] = function(err, params, ctx)
      local root = root_of[ctx.client_id]
      if not err and root then require("oi.notify").server_message(root, params) end
      return vim.NIL
    end,
  }
end

--- Start (or reuse) the client of `root`; `fn(client)` runs once it is initialized.
function M.with_client(root, fn)
  local id = by_root[root]
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not is_stopped(client) then
    if ready[id] then fn(client) else table.insert(queued[id], fn) end
    return
  end
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
      ready[c.id] = true
      local waiting = queued[c.id] or {}
      queued[c.id] = {}
      for _, f in ipairs(waiting) do f(c) end
    end,
    on_exit = function(code, signal, cid)
      local r = root_of[cid]
      if r and by_root[r] == cid then by_root[r] = nil end
      root_of[cid], ready[cid], queued[cid] = nil, nil, nil
      if r and vim.v.exiting == vim.NIL then -- v:exiting is null until Neovim quits
        vim.schedule(function() require("oi.chat").server_exited(r, code, signal) end)
      end
    end,
  }
  local ok, new_id
  if has_011 then
    -- attach = false: the client serves a workspace, not a document
    ok, new_id = pcall(vim.lsp.start, config, { attach = false, reuse_client = function() return false end })
  else
    ok, new_id = pcall(vim.lsp.start_client, config)
  end
  if not ok or not new_id then
    vim.notify(("oi: could not start %s%s"):format(table.concat(cfg.cmd, " "),
      ok and "" or (": " .. tostring(new_id))), vim.log.levels.ERROR)
    return
  end
  by_root[root], root_of[new_id] = new_id, root
  queued[new_id] = queued[new_id] or {}
  if ready[new_id] then fn(vim.lsp.get_client_by_id(new_id)) else table.insert(queued[new_id], fn) end
end

--- Send an oi/* request for `root`; `on_result(result)` on success. Errors go to the chat
--- buffer and vim.notify, unless `on_error(err)` takes them.
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
function M.request_sync(root, method, params, timeout)
  local done, result, err = false, nil, nil
  M.request(root, method, params, function(r) done, result = true, r end,
    function(e) done, err = true, e end)
  if not vim.wait(timeout or 10000, function() return done end, 20) then
    return nil, ("no answer to %s in %d s"):format(method, math.floor((timeout or 10000) / 1000))
  end
  return result, err and (err.message or vim.inspect(err))
end

--- The ids of the running clients, by root (for :checkhealth and tests).
function M.clients() return vim.deepcopy(by_root) end

--- Stop every oi client; with `wait`, until they have exited (at most `wait` ms).
function M.stop_all(wait)
  local ids = vim.tbl_values(by_root)
  for _, id in ipairs(ids) do
    local c = vim.lsp.get_client_by_id(id)
    if c then if has_011 then c:stop() else c.stop() end end
  end
  if wait then
    vim.wait(wait, function()
      for _, id in ipairs(ids) do if root_of[id] then return false end end
      return true
    end, 20)
  end
end

return M
