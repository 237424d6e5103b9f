-- LSP glue: one oi-lsp client per workspace root, reused across buffers.
local M = {}

local by_root = {}  -- root -> client id
local root_of = {}  -- client id -> root
local ready = {}    -- client id -> true once initialized
local queued = {}   -- client id -> functions waiting for initialization

--- The workspace root of a buffer: a root marker above its file, else the tab's cwd.
function M.root(bufnr)
  bufnr = bufnr or 0
  local cfg = require("oi").config
  local name = vim.api.nvim_buf_get_name(bufnr)
  if vim.bo[bufnr].buftype == "" and name ~= "" then
    local found = vim.fs.root(bufnr, cfg.root_markers)
    if found then return vim.fs.normalize(found) end
  end
  local chat_root = vim.b[bufnr].oi_root
  if chat_root then return chat_root end
  return vim.fs.normalize(vim.fn.getcwd())
end

function M.root_for_client(id) return root_of[id] end
function M.uri(root) return vim.uri_from_fname(root) end

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
  }
end

--- Start (or reuse) the client of `root`; `fn(client)` runs once it is initialized.
function M.with_client(root, fn)
  local id = by_root[root]
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not client:is_stopped() then
    if ready[id] then fn(client) else table.insert(queued[id], fn) end
    return
  end
  local cfg = require("oi").config
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.experimental = vim.tbl_extend("force", caps.experimental or {}, { oi = true })
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
    on_exit = function(code, _, cid)
      local r = root_of[cid]
      if r and by_root[r] == cid then by_root[r] = nil end
      root_of[cid], ready[cid], queued[cid] = nil, nil, nil
      if code ~= 0 then
        vim.schedule(function()
          vim.notify(("oi: the server exited with code %d"):format(code), vim.log.levels.ERROR)
        end)
      end
    end,
  }
  local new_id
  if vim.fn.has("nvim-0.11") == 1 then
    -- attach = false: the client serves a workspace, not a buffer
    new_id = vim.lsp.start(config, { attach = false, reuse_client = function() return false end })
  else
    new_id = vim.lsp.start_client(config)
  end
  if not new_id then
    vim.notify("oi: could not start " .. table.concat(cfg.cmd, " "), vim.log.levels.ERROR)
    return
  end
  by_root[root], root_of[new_id] = new_id, root
  queued[new_id] = queued[new_id] or {}
  if ready[new_id] then fn(vim.lsp.get_client_by_id(new_id)) else table.insert(queued[new_id], fn) end
end

--- Send an oi/* request for `root`; `on_result(result)` on success. Errors are shown.
function M.request(root, method, params, on_result)
  params = params or {}
  params.workspace = params.workspace or M.uri(root)
  M.with_client(root, function(client)
    local function handler(err, result)
      if err then
        require("oi.chat").error(root, ("%s failed: %s"):format(method, err.message or vim.inspect(err)))
      elseif on_result then
        on_result(result)
      end
    end
    if vim.fn.has("nvim-0.11") == 1 then
      client:request(method, params, handler)
    else
      client.request(method, params, handler)
    end
  end)
end

--- The ids of the running clients, by root (for :checkhealth and tests).
function M.clients() return vim.deepcopy(by_root) end

return M
