-- The model's reasoning (oi/stream `reasoning` chunks, oi/history `reasoning` messages) in the
-- chat: a "▾ Thinking…" line with the reasoning quoted below it, streaming live and dimmed
-- (OIReasoning); once the answer starts it becomes "▾ Thought" and a closed fold ("▸ Thought ·
-- 3 lines: how it began"), which <Tab>, zo or za opens. A saved conversation draws the same
-- lines (M.lines) and fold. Each block is an extmark over its lines, so every window that shows
-- the chat gets the folds (manual folds belong to a window), a fold it already has is left as
-- the user put it, and a wiped chat built again keeps them.
local M = {}

local transcript = require("oi.transcript")

M.ns = vim.api.nvim_create_namespace("oi_reasoning")
M.STREAMING = "▾ Thinking…" -- the header while the reasoning streams
M.DONE = "▾ Thought" -- once it ended (shown when its fold is open)

--- The lines of a finished block: the header, then the reasoning quoted (markdown inside it
--- stays inside the quote); nil when there is no reasoning to show.
---@param text string the reasoning, as it streamed
---@return string[]?
function M.lines(text)
  text = vim.trim((tostring(text or ""):gsub("\r\n?", "\n")))
  if text == "" then return nil end
  local out = { M.DONE }
  for _, line in ipairs(vim.split(text, "\n", { plain = true })) do
    table.insert(out, line == "" and ">" or "> " .. line)
  end
  return out
end

--- Mark rows [first, last] (0-based) of the chat as a reasoning block (dimmed); `id` moves one.
---@return integer id
local function mark(st, first, last, id)
  local line = vim.api.nvim_buf_get_lines(st.buf, last, last + 1, true)[1]
  return vim.api.nvim_buf_set_extmark(st.buf, M.ns, first, 0,
    { id = id, end_row = last, end_col = #line, hl_group = "OIReasoning" })
end

--- The blocks of chat `st`: { id, first, last } (0-based rows), in order; with `all`, the one
--- streaming too.
local function blocks(st, all)
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(st.buf, M.ns, 0, -1, { details = true })) do
    if all or m[1] ~= st.thinking then
      table.insert(out, { id = m[1], first = m[2], last = m[4].end_row or m[2] })
    end
  end
  return out
end

--- The options a window needs for the folds: manual folds (whatever the user's 'foldmethod'),
--- enabled, drawn by M.foldtext, the rest of a folded line left blank.
---@param win integer
function M.window(win)
  local wo = vim.wo[win]
  if wo.foldmethod ~= "manual" then wo.foldmethod = "manual" end
  wo.foldenable = true
  wo.foldtext = "v:lua.require'oi.reasoning'.foldtext()"
  if not wo.fillchars:find("fold:", 1, true) then
    wo.fillchars = (wo.fillchars ~= "" and wo.fillchars .. "," or "") .. "fold: "
  end
end

--- Give window `win` a closed fold for every finished block it has none for yet (a fold the
--- user opened stays open).
local function fold_window(st, win)
  if vim.api.nvim_win_get_buf(win) ~= st.buf then return end
  M.window(win)
  vim.api.nvim_win_call(win, function()
    for _, b in ipairs(blocks(st)) do
      local first, last = b.first + 1, b.last + 1
      if last > first and vim.fn.foldlevel(first) == 0 then
        vim.cmd(("%d,%dfold"):format(first, last))
        vim.cmd(("silent! %dfoldclose"):format(first))
      end
    end
  end)
end

--- Fold the finished blocks in every window that shows chat `st`.
function M.refold(st)
  for _, win in ipairs(vim.fn.win_findbuf(st.buf)) do fold_window(st, win) end
end

--- A block of reasoning begins (the chunk that opens it): its header, and a mark that grows
--- with it. `b` is the open block of oi.blocks.
function M.open(st, b)
  local blocks_ = require("oi.blocks")
  blocks_.gap(st)
  blocks_.put(st, M.STREAMING)
  local head = blocks_.cursor_line(st) - 1
  st.thinking = mark(st, head, head)
  b.mark = st.thinking
end

--- Reasoning streams in: appended quoted, the mark (and its highlight) grown over it.
function M.add(st, b, text)
  table.insert(b.parts, text)
  text = text:gsub("\r", "")
  if not b.begun then -- what it begins with, without the newlines a <think> tag leaves
    text = text:gsub("^%s+", "")
    if text == "" then return end
    b.begun = true
    text = "> " .. text
  end
  transcript.append(st.buf, (text:gsub("\n", "\n> ")))
  local head = vim.api.nvim_buf_get_extmark_by_id(st.buf, M.ns, b.mark, {})[1]
  if head then mark(st, head, transcript.last(st.buf), b.mark) end
end

--- The block ends (the answer or code starts, or the turn ended): its lines written as a
--- saved conversation shows them (M.lines), then folded and closed.
function M.close(st, b)
  local head = vim.api.nvim_buf_get_extmark_by_id(st.buf, M.ns, b.mark, {})[1]
  st.thinking = nil
  if not head then return end
  local lines = M.lines(table.concat(b.parts))
  local last = transcript.last(st.buf)
  if not lines then -- only blank lines came: no block at all
    vim.api.nvim_buf_del_extmark(st.buf, M.ns, b.mark)
    transcript.set_lines(st.buf, head, last + 1, { "" })
    return
  end
  transcript.set_lines(st.buf, head, last + 1, vim.list_extend(lines, { "" }))
  mark(st, head, head + #lines - 2, b.mark) -- lines now ends with the "" added
  M.refold(st)
end

--- The blocks of a saved conversation put at row `at`: `found` is history.render's list of
--- { first, last } (1-based indexes into the lines put there).
function M.insert(st, at, found)
  for _, t in ipairs(found or {}) do mark(st, at + t.first - 1, at + t.last - 1) end
  if #(found or {}) > 0 then M.refold(st) end
end

--- <Tab> on a block: open or close its fold. False when `row` (0-based) is in none.
---@return boolean
function M.toggle(st, row)
  for _, b in ipairs(blocks(st)) do
    if row >= b.first and row <= b.last then
      vim.cmd("normal! za")
      return true
    end
  end
  return false
end

--- The transcript is emptied: no block, and no fold left in its windows.
function M.clear(st)
  st.thinking = nil
  vim.api.nvim_buf_clear_namespace(st.buf, M.ns, 0, -1)
  for _, win in ipairs(vim.fn.win_findbuf(st.buf)) do
    vim.api.nvim_win_call(win, function() vim.cmd("silent! normal! zE") end)
  end
end

--- What a wiped buffer's blocks were ({ first, last, streaming }), to mark them again.
function M.snapshot(st)
  local out = {}
  for _, b in ipairs(blocks(st, true)) do
    table.insert(out, { first = b.first, last = b.last, id = b.id, streaming = b.id == st.thinking })
  end
  return out
end

--- Mark a rebuilt buffer's blocks again (under their old ids: the open block keeps its own).
function M.rebuild(st, snap)
  for _, b in ipairs(snap or {}) do
    pcall(mark, st, b.first, b.last, b.id)
  end
  M.refold(st)
end

--- Keep the folds in every window the chat buffer comes to show in.
function M.attach(st)
  vim.api.nvim_create_autocmd("BufWinEnter", { buffer = st.buf, callback = function()
    vim.schedule(function()
      if vim.api.nvim_buf_is_valid(st.buf) then M.refold(st) end
    end)
  end })
end

--- 'foldtext' of the chat's windows: a block's fold says it was thought, how long it is and
--- how it began; any other fold is drawn as Neovim draws it.
---@return string|table
function M.foldtext()
  local start, stop = vim.v.foldstart, vim.v.foldend
  local here = vim.api.nvim_buf_get_extmarks(0, M.ns, { start - 1, 0 }, { start - 1, 0 }, {})
  if #here == 0 then return vim.fn.foldtext() end
  local first = vim.api.nvim_buf_get_lines(0, start, start + 1, false)[1] or ""
  local n = stop - start
  return { { ("▸ Thought · %d line%s: "):format(n, n == 1 and "" or "s"), "OIReasoning" },
    { (first:gsub("^>%s?", "")), "OIReasoning" } }
end

return M
