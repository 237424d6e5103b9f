-- The chat's own highlight groups (OIReasoning, OITool, ...), and its code blocks highlighted
-- in their language. Where Neovim has tree-sitter parsers for the code (nvim-treesitter
-- installs them), the markdown parser with its injections does it; stock Neovim ships only
-- markdown's, so then the regex markdown syntax includes each fenced language's syntax file
-- (g:markdown_fenced_languages, set only while the chat's syntax loads).
local M = {}

--- The plugin's own highlight groups (default links: a colorscheme or the user may set them).
M.groups = {
  OIReasoning = { link = "Comment" }, -- the model's reasoning, and its fold's line
  OIEarlier = { link = "Comment" }, -- "▲ N earlier messages" above the oldest one shown
  OITool = { link = "Comment" }, -- an MCP call's line in output: "⚙ fs.read(...) · 0.12 s"
}

local function define()
  for name, spec in pairs(M.groups) do
    vim.api.nvim_set_hl(0, name, vim.tbl_extend("force", spec, { default = true }))
  end
end
define()
-- :colorscheme clears every group first: link them again after it
vim.api.nvim_create_autocmd("ColorScheme", {
  group = vim.api.nvim_create_augroup("oi_highlight", { clear = true }), callback = define })

-- The chat buffers (M.apply): their "⚙ " lines are drawn with OITool, as they show.
local chats = {}
local tool_ns = vim.api.nvim_create_namespace("oi_tool_lines")
local GEAR = "⚙ "
vim.api.nvim_set_decoration_provider(tool_ns, {
  on_win = function(_, _, buf) return chats[buf] == true end,
  on_line = function(_, _, buf, row)
    local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1]
    if line and line:sub(1, #GEAR) == GEAR then
      pcall(vim.api.nvim_buf_set_extmark, buf, tool_ns, row, 0,
        { end_col = #line, hl_group = "OITool", priority = 150, ephemeral = true })
    end
  end,
})
vim.api.nvim_create_autocmd("BufWipeout", { group = "oi_highlight",
  callback = function(ev) chats[ev.buf] = nil end })

--- Fenced languages (as the server names them = the syntax file) the regex syntax includes.
M.fenced = { "python", "sh", "bash=sh", "shell=sh", "zsh", "javascript", "js=javascript",
  "node=javascript", "r", "R=r", "ruby", "powershell=ps1", "html", "json", "lua" }

local function has_parser(lang)
  -- a parser file on the runtimepath (0.11's language.add answers nil for a missing one,
  -- 0.10's raises), and it loads
  if #vim.api.nvim_get_runtime_file("parser/" .. lang .. ".*", false) == 0 then return false end
  return (pcall(vim.treesitter.language.add, lang))
end

--- Whether tree-sitter can highlight the chat's code: markdown's parser and Python's.
function M.treesitter_ready()
  return has_parser("markdown") and has_parser("markdown_inline") and has_parser("python")
end

--- Make `buf` a markdown buffer whose code blocks are highlighted; returns "treesitter" or "syntax".
---@param buf integer
---@return "treesitter"|"syntax"
function M.apply(buf)
  chats[buf] = true
  if M.treesitter_ready() then
    vim.bo[buf].filetype = "markdown"
    if not vim.treesitter.highlighter.active[buf] then vim.treesitter.start(buf, "markdown") end
    return "treesitter"
  end
  local saved = vim.g.markdown_fenced_languages
  local langs = vim.deepcopy(M.fenced)
  for _, l in ipairs(type(saved) == "table" and saved or {}) do table.insert(langs, 1, l) end
  vim.g.markdown_fenced_languages = langs
  local ok, err = pcall(function()
    vim.api.nvim_buf_call(buf, function()
      if vim.bo.filetype == "markdown" then
        vim.bo.syntax = "markdown" -- set again: the syntax loads anew, with the languages
      else
        vim.bo.filetype = "markdown"
      end
    end)
  end)
  vim.g.markdown_fenced_languages = saved
  if not ok then error(err) end
  return "syntax"
end

return M
