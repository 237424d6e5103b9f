-- The oi/stream chunks of a chat as transcript blocks: the model's reasoning (oi.reasoning), its
-- text, fenced code and its output (a long one folded), images; the line that runs highlighted.
-- `st` is a chat's state.
local M = {}

local transcript = require("oi.transcript")
local history = require("oi.history")
local reasoning = require("oi.reasoning")

local ns = transcript.ns

local function sep_row(st) return transcript.sep_row(st.buf) end
local function cursor_line(st) return transcript.last(st.buf) end
local function append(st, text) transcript.append(st.buf, text) end

local function newline(st)
  local _, line = cursor_line(st)
  if line ~= "" then append(st, "\n") end
end

--- Complete lines; the transcript then ends on a fresh empty line.
local function put(st, text)
  newline(st)
  append(st, text .. "\n")
end

-- An empty line between blocks, so the markdown reads well.
local function gap(st)
  newline(st)
  local row = cursor_line(st)
  if row > 0 and vim.api.nvim_buf_get_lines(st.buf, row - 1, row, true)[1] ~= "" then
    append(st, "\n")
  end
end

local function limit() return require("oi").config.output_limit or 200 end

--- Put the rest of a long output out of sight: a line says how many lines it holds; <Tab> on
--- it shows them.
local function fold_at(st, row, text)
  local id = vim.api.nvim_buf_set_extmark(st.buf, ns, row, 0, {})
  st.folds[id] = text
end

local hl_ns = vim.api.nvim_create_namespace("oi_active_line")

--- Put fenced code; it becomes the code a run's active_line chunks point into.
local function code_block(st, lang, code)
  gap(st)
  local text = history.fence(lang, code)
  put(st, text)
  local first = cursor_line(st) - select(2, text:gsub("\n", "")) - 1 -- its ``` line
  st.code_mark = vim.api.nvim_buf_set_extmark(st.buf, ns, first, 0, { id = st.code_mark })
end

--- Highlight line `number` (1-based) of the last code block: the line that runs now.
local function active_line(st, number)
  vim.api.nvim_buf_clear_namespace(st.buf, hl_ns, 0, -1)
  if not number or not st.code_mark then return end
  local fence_row = vim.api.nvim_buf_get_extmark_by_id(st.buf, ns, st.code_mark, {})[1]
  local row = fence_row and fence_row + number
  if row and row < sep_row(st) then
    vim.api.nvim_buf_set_extmark(st.buf, hl_ns, row, 0, { line_hl_group = "CursorLine",
      sign_text = "▶", sign_hl_group = "DiagnosticInfo" })
  end
end

function M.save_image(format, data)
  local dir = vim.fs.joinpath(vim.fn.stdpath("cache"), "oi", "images")
  vim.fn.mkdir(dir, "p")
  local ext = format == "svg" and "svg" or (format:match("base64%.(%w+)") or "png")
  local path = vim.fs.joinpath(dir, ("%d-%d.%s"):format(os.time(), vim.uv.hrtime() % 1e9, ext))
  local bytes = format == "svg" and data or vim.base64.decode((data:gsub("%s", "")))
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end

local function open_block(st, p)
  st.open = { role = p.role, type = p.type, format = p.format, parts = {}, lines = 0 }
  if p.type == "console" then
    gap(st); put(st, "```output")
  elseif p.type == "code" then
    gap(st); put(st, "```" .. (p.format or ""))
  elseif p.type == "message" then
    gap(st)
  elseif p.type == "reasoning" then
    reasoning.open(st, st.open)
  end
end

-- Output past the limit is kept out of the buffer; a line counts it.
local function output(st, text)
  local b = st.open
  if b.hidden then
    table.insert(b.hidden, text)
    return
  end
  local room, pos = limit() - b.lines, 0
  for _ = 1, room do
    pos = text:find("\n", pos + 1, true)
    if not pos then break end
  end
  if not pos then
    b.lines = b.lines + select(2, text:gsub("\n", ""))
    return append(st, text)
  end
  append(st, text:sub(1, pos))
  b.lines = limit()
  b.hidden = { text:sub(pos + 1) }
end

local function close_output(st, b)
  if b.hidden then
    local rest = table.concat(b.hidden)
    if rest ~= "" then
      newline(st)
      put(st, history.fold_line(rest))
      fold_at(st, cursor_line(st) - 1, rest)
    end
  end
  put(st, "```")
end

local function close_block(st)
  local b = st.open
  st.open = nil
  if not b then return end
  local data = table.concat(b.parts)
  if b.type == "console" then
    close_output(st, b)
  elseif b.type == "code" then
    put(st, "```")
  elseif b.type == "confirmation" then
    -- the code that runs: shown unless it is the proposal just shown above
    if data ~= st.shown_code then code_block(st, b.format, data) end
    st.shown_code = nil
  elseif b.type == "reasoning" then
    reasoning.close(st, b)
  elseif b.type == "image" then
    local ok, path = pcall(M.save_image, b.format or "base64.png", data)
    gap(st)
    put(st, ok and ("![image](%s)"):format(path) or ("_(image could not be saved: %s)_"):format(path))
  else
    newline(st)
  end
end

local BUFFERED = { confirmation = true, image = true }

--- One oi/stream chunk (not a status one) of chat `st`.
function M.feed(st, p)
  if p.format == "active_line" then -- not a block: the open output block stays open
    active_line(st, tonumber(p.content))
    return
  end
  local b = st.open
  local same = b and b.role == p.role and b.type == p.type and b.format == p.format
  if p.start or not same then
    if b then close_block(st) end
    open_block(st, p)
  end
  if p.content and p.content ~= "" then
    if BUFFERED[p.type] then
      table.insert(st.open.parts, p.content)
    elseif p.type == "console" then
      output(st, p.content)
    elseif p.type == "reasoning" then
      reasoning.add(st, st.open, p.content)
    else
      append(st, p.content)
    end
  end
  if p["end"] then close_block(st) end
end

M.put, M.gap, M.newline, M.append = put, gap, newline, append
M.code_block, M.fold_at, M.close = code_block, fold_at, close_block
M.active_line, M.hl_ns = active_line, hl_ns
M.cursor_line, M.limit = cursor_line, limit

return M
