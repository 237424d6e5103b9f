-- oi.nvim: Open Interpreter in Neovim, through the oi-lsp language server.
-- require("oi").setup{...} is optional: the commands work with the defaults below.
local M = {}

---@class oi.Settings
---The `oi` settings of docs/protocol.md, sent as initializationOptions; any other key of its
---settings table passes through as given (the server ignores unknown ones, saying so).
---@field model string? a litellm model string
---@field apiBase string?
---@field apiKey string?
---@field temperature number?
---@field maxTokens integer?
---@field autoRun boolean?
---@field reasoningEffort "low"|"medium"|"high"? how hard a reasoning model thinks
---@field modelOptions table<string, any>? further litellm keyword arguments, as given
---@field promptCaching boolean|"auto"? mark the prompt cacheable (Anthropic, Claude elsewhere)
---@field modelRetries integer? 0–10: retries of a refused (429, 5xx, 529) model call
---@field [string] any

---@class oi.Config
---@field cmd string[]|string how to start the server
---@field settings oi.Settings the `oi` settings of docs/protocol.md (model, apiBase, apiKey, ...)
---@field model string? shorthand for settings.model
---@field auto_run boolean? shorthand for settings.autoRun
---@field layout "vsplit"|"split"|"float"|"tab" where the chat opens
---@field root_markers string[] files or folders that mark a workspace root
---@field keymaps boolean false: no default keymaps (the <Plug>(oi-...) ones stay)
---@field notify_hidden boolean vim.notify a proposal when the chat window is hidden
---@field output_limit integer output lines shown in the chat; the rest folded (<Tab> shows it)

-- The documented defaults (see :help oi-config).
---@type oi.Config
M.defaults = {
  cmd = { "oi-lsp" },        -- how to start the server
  settings = {},             -- the `oi` settings of docs/protocol.md (model, apiBase, apiKey, ...)
  model = nil,               -- shorthand for settings.model
  auto_run = nil,            -- shorthand for settings.autoRun (true/false)
  layout = "vsplit",         -- chat window: "vsplit" | "split" | "float" | "tab"
  root_markers = { ".git", "pyproject.toml", "package.json" }, -- workspace root, else the cwd
  keymaps = true,            -- false: no default keymaps (the <Plug>(oi-...) ones stay)
  notify_hidden = true,      -- vim.notify a proposal when the chat window is hidden
  output_limit = 200,        -- output lines shown in the chat; the rest folded (<Tab> shows it)
}

---@type oi.Config
M.config = vim.deepcopy(M.defaults)

--- The settings sent as initializationOptions.
---@return oi.Settings
function M.server_settings()
  local s = vim.deepcopy(M.config.settings or {})
  -- an empty Lua table goes out as [], which the server refuses for an object
  if type(s.modelOptions) == "table" and next(s.modelOptions) == nil then
    s.modelOptions = vim.empty_dict()
  end
  if M.config.model then s.model = M.config.model end
  if M.config.auto_run ~= nil then s.autoRun = M.config.auto_run end
  return s
end

-- The default keymaps: each maps to a <Plug> mapping, and none replaces a user's own.
M.keymaps = {
  { "n", "<leader>oc", "<Plug>(oi-chat)" },
  { "n", "<leader>or", "<Plug>(oi-run)" },
  { "x", "<leader>or", "<Plug>(oi-run)" },
  { "x", "<leader>oe", "<Plug>(oi-exec)" },
  { "n", "<leader>oe", "<Plug>(oi-exec)" },
  { "n", "<leader>os", "<Plug>(oi-stop)" },
}

--- Configure the plugin (optional: the commands work with the defaults).
---@param opts oi.Config? keys of |oi-config|; missing ones keep their defaults
function M.setup(opts)
  if opts ~= nil and type(opts) ~= "table" then error("oi.setup: expected a table of options") end
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  require("oi.user_commands") -- :OIChat and the rest, however the plugin was installed
  local layouts = { vsplit = true, split = true, float = true, tab = true }
  if not layouts[M.config.layout] then
    vim.notify(("oi: unknown layout %q (vsplit, split, float or tab); using vsplit")
      :format(tostring(M.config.layout)), vim.log.levels.ERROR)
    M.config.layout = "vsplit"
  end
  if type(M.config.cmd) == "string" then M.config.cmd = { M.config.cmd } end
  if M.config.keymaps then
    for _, k in ipairs(M.keymaps) do
      local mode, lhs, rhs = k[1], k[2], k[3]
      if vim.fn.mapcheck(lhs, mode) == "" then vim.keymap.set(mode, lhs, rhs, { remap = true }) end
    end
  end
end

--- A statusline component: what the workspace of `root` (default: the current buffer's) does
--- now ("oi: thinking", "oi: waiting for your approval", "oi: running python 12 s · 98% CPU"),
--- else the session's tokens and cost ("oi: 1,234 tokens · $0.0021"), else "".
---@param root string? a workspace root
---@return string
function M.status(root)
  return require("oi.status").text(root or require("oi.client").root(0))
end

return M
