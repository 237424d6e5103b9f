-- The proposal waiting for an answer, in a small float at the top right, while the chat is
-- hidden: the user sees what would run and answers from any buffer (:OIApprove).
local M = {}

local floats = {} -- root -> { win, buf }
local MAX_LINES = 12

local function lines_of(p)
  local code = vim.split((p.code:gsub("\n+$", "")), "\n", { plain = true })
  local out = { ("oi wants to run %s:"):format(p.language), "" }
  for i = 1, math.min(#code, MAX_LINES) do table.insert(out, "  " .. code[i]) end
  if #code > MAX_LINES then table.insert(out, ("  … %d more lines"):format(#code - MAX_LINES)) end
  if p.risk and p.risk.level ~= "low" then
    table.insert(out, "")
    table.insert(out, ("risk: %s (%s)"):format(p.risk.level, table.concat(p.risk.reasons or {}, "; ")))
  end
  table.insert(out, "")
  table.insert(out, ":OIApprove run | skip | edit    :OIChat shows it")
  return out
end

--- Show proposal `p` of `root` (the chat is hidden).
function M.show(root, p)
  M.close(root)
  local lines = lines_of(p)
  local width = 20
  for _, l in ipairs(lines) do width = math.max(width, vim.fn.strdisplaywidth(l)) end
  width = math.min(width + 1, math.max(20, vim.o.columns - 4))
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  local win = vim.api.nvim_open_win(buf, false, { relative = "editor", anchor = "NE",
    row = 1, col = vim.o.columns - 1, width = width, height = math.min(#lines, vim.o.lines - 4),
    border = "rounded", title = " oi: run? ", style = "minimal", focusable = false })
  floats[root] = { win = win, buf = buf }
end

--- Close the float of `root` (answered, or the turn ended).
function M.close(root)
  local f = floats[root]
  floats[root] = nil
  if f and vim.api.nvim_win_is_valid(f.win) then pcall(vim.api.nvim_win_close, f.win, true) end
end

--- The lines of the float of `root`, or nil (for tests).
function M.lines(root)
  local f = floats[root]
  if not f or not vim.api.nvim_win_is_valid(f.win) then return nil end
  return vim.api.nvim_buf_get_lines(f.buf, 0, -1, false)
end

return M
