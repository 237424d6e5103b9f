-- The transcript buffer of a chat: read-only for the user (nomodifiable, no undo history), written
-- only through here. Its last line is a separator; the spinner is a virtual line above it, and
-- text is appended just above it. Windows that showed the end keep following it.
local M = {}

M.ns = vim.api.nvim_create_namespace("oi_chat")
M.SEP = "────"

--- A new transcript buffer named `name`, holding `lines` and the separator.
function M.create(name, lines)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].undolevels = -1 -- nothing the plugin wrote can be undone (`u` deleted answers)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.list_extend(vim.deepcopy(lines), { M.SEP }))
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  require("oi.highlight").apply(buf) -- markdown, code blocks highlighted in their language
  return buf
end

--- The row (0-based) of the separator: the buffer's last line.
function M.sep_row(buf) return vim.api.nvim_buf_line_count(buf) - 1 end

-- The windows that show the end of the transcript: they follow it. The current window only
-- when its cursor is on the last lines (the user has not moved up to read).
local function at_tail(buf)
  local last, wins = vim.api.nvim_buf_line_count(buf), {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local tail
    if win == vim.api.nvim_get_current_win() then
      tail = vim.api.nvim_win_get_cursor(win)[1] >= last - 1
    else
      tail = vim.fn.line("w$", win) >= last - 1
    end
    if tail then table.insert(wins, win) end
  end
  return wins
end

local function follow(buf, wins)
  local last = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(wins) do
    if vim.api.nvim_win_is_valid(win) then
      pcall(vim.api.nvim_win_set_cursor, win, { last, 0 })
      -- the separator at the bottom edge, the spinner (a virtual line above it) in view
      vim.api.nvim_win_call(win, function() vim.cmd("normal! zb") end)
    end
  end
end

--- Change the buffer with `fn()`: writable meanwhile, then read-only again; followed.
function M.edit(buf, fn)
  local wins = at_tail(buf)
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  follow(buf, wins)
  if not ok then error(err, 0) end
end

--- Keep the windows that show the end at the end (the spinner changed height).
function M.refollow(buf) follow(buf, at_tail(buf)) end

--- The last transcript line (just above the separator): row, text.
function M.last(buf)
  local row = M.sep_row(buf) - 1
  return row, vim.api.nvim_buf_get_lines(buf, row, row + 1, true)[1]
end

--- Append text at the end of the transcript.
function M.append(buf, text)
  M.edit(buf, function()
    local row, line = M.last(buf)
    vim.api.nvim_buf_set_text(buf, row, #line, row, #line, vim.split(text, "\n", { plain = true }))
  end)
end

--- Set lines [first, last) (0-based, end exclusive) of the transcript.
function M.set_lines(buf, first, last, lines)
  M.edit(buf, function() vim.api.nvim_buf_set_lines(buf, first, last, true, lines) end)
end

--- What a wiped buffer held: its lines and the positions of its marks, to build it again.
function M.snapshot(buf)
  local marks = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(buf, M.ns, 0, -1, { details = true })) do
    if not m[4].virt_lines then table.insert(marks, { id = m[1], row = m[2], col = m[3] }) end
  end
  return { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false), marks = marks }
end

--- A new buffer holding a snapshot (its marks under their old ids).
function M.rebuild(name, snap)
  local buf = M.create(name, {})
  M.edit(buf, function() vim.api.nvim_buf_set_lines(buf, 0, -1, true, snap.lines) end)
  for _, m in ipairs(snap.marks) do
    pcall(vim.api.nvim_buf_set_extmark, buf, M.ns, m.row, m.col, { id = m.id })
  end
  return buf
end

return M
