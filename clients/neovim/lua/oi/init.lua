-- oi.nvim: Open Interpreter in Neovim, through the oi-lsp language server.
local M = {}

-- The documented defaults (see :help oi-config).
M.defaults = {
  cmd = { "oi-lsp" },        -- how to start the server
  settings = {},             -- the `oi` settings of docs/protocol.md (model, apiBase, apiKey, ...)
  model = nil,               -- shorthand for settings.model
  auto_run = false,          -- shorthand for settings.autoRun
  layout = "vsplit",         -- chat window: "vsplit" | "split" | "float" | "tab"
  root_markers = { ".git", "pyproject.toml" }, -- workspace root; else the tab's cwd
  keymaps = true,            -- false: no default keymaps (the <Plug>(oi-...) ones stay)
  notify_hidden = true,      -- vim.notify a proposal when the chat window is hidden
}

M.config = vim.deepcopy(M.defaults)

--- The settings sent as initializationOptions.
function M.server_settings()
  local s = vim.deepcopy(M.config.settings or {})
  if M.config.model then s.model = M.config.model end
  if M.config.auto_run then s.autoRun = true end
  return s
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  if M.config.keymaps then
    local map = function(mode, lhs, rhs)
      if vim.fn.mapcheck(lhs, mode) == "" then vim.keymap.set(mode, lhs, rhs, { remap = true }) end
    end
    map("n", "<leader>oc", "<Plug>(oi-chat)")
    map("x", "<leader>or", "<Plug>(oi-run)")
    map("x", "<leader>oe", "<Plug>(oi-exec)")
    map("n", "<leader>os", "<Plug>(oi-stop)")
  end
end

return M
