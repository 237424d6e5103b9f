-- The chat buffer of a workspace: a markdown transcript, a status line and a prompt area.
local M = {}

local ns = vim.api.nvim_create_namespace("oi_chat")
local SEP = "──── <CR> or <C-s> sends · :OIStop stops ────"
local SPINNER = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }
local states = {} -- root -> state

local function sep_row(st)
  return vim.api.nvim_buf_get_extmark_by_id(st.buf, ns, st.sep, {})[1]
end

local function cursor_line(st)
  local row = sep_row(st) - 1
  return row, vim.api.nvim_buf_get_lines(st.buf, row, row + 1, true)[1]
end

-- Keep windows that are not being typed in scrolled to the newest line.
local function follow(st)
  local row = sep_row(st)
  for _, win in ipairs(vim.fn.win_findbuf(st.buf)) do
    if win ~= vim.api.nvim_get_current_win() then
      pcall(vim.api.nvim_win_set_cursor, win, { row, 0 })
    end
  end
end

--- Append text at the end of the transcript (the line just above the separator).
local function append(st, text)
  local row, line = cursor_line(st)
  vim.api.nvim_buf_set_text(st.buf, row, #line, row, #line, vim.split(text, "\n", { plain = true }))
  follow(st)
end

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

local function header(root) return { "# oi: " .. root, "" } end

local function set_status(st, status)
  st.status = status
  if st.timer then st.timer:stop(); st.timer:close(); st.timer = nil end
  if not vim.api.nvim_buf_is_valid(st.buf) then return end
  if not status then
    if st.status_mark then vim.api.nvim_buf_del_extmark(st.buf, ns, st.status_mark) end
    st.status_mark = nil
    return
  end
  local function draw(frame)
    if not vim.api.nvim_buf_is_valid(st.buf) then return end
    local text = SPINNER[frame % #SPINNER + 1] .. " " .. status .. "…"
    st.status_mark = vim.api.nvim_buf_set_extmark(st.buf, ns, sep_row(st), 0, {
      id = st.status_mark, virt_lines_above = true, virt_lines = { { { text, "Comment" } } } })
  end
  draw(0)
  if status then
    local frame = 0
    st.timer = vim.uv.new_timer()
    st.timer:start(100, 100, vim.schedule_wrap(function()
      frame = frame + 1
      if st.status == status then draw(frame) end
    end))
  end
end

local function send_prompt(st)
  local first = sep_row(st) + 1
  local text = vim.trim(table.concat(vim.api.nvim_buf_get_lines(st.buf, first, -1, false), "\n"))
  if text == "" then return end
  vim.api.nvim_buf_set_lines(st.buf, first, -1, false, { "" })
  require("oi.commands").send(st.root, text)
end

--- The state (and buffer) of a workspace's chat, created on first use.
function M.state(root)
  local st = states[root]
  if st and vim.api.nvim_buf_is_valid(st.buf) then return st end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, "oi://chat" .. root)
  require("oi.highlight").apply(buf) -- markdown, code blocks highlighted in their language
  vim.b[buf].oi_root = root
  local lines = header(root)
  vim.list_extend(lines, { "", SEP, "" })
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  st = { root = root, buf = buf, open = nil, muted = {} }
  st.sep = vim.api.nvim_buf_set_extmark(buf, ns, #lines - 2, 0, {})
  states[root] = st
  local o = { buffer = buf, nowait = true, silent = true }
  vim.keymap.set("n", "<CR>", function() send_prompt(st) end, vim.tbl_extend("force", o, { desc = "oi: send" }))
  vim.keymap.set({ "n", "i" }, "<C-s>", function()
    vim.cmd.stopinsert(); send_prompt(st)
  end, vim.tbl_extend("force", o, { desc = "oi: send" }))
  return st
end

function M.buffer(root) return M.state(root).buf end

--- Whether the chat of `root` shows in some window.
function M.visible(root)
  local st = states[root]
  return st ~= nil and vim.api.nvim_buf_is_valid(st.buf) and #vim.fn.win_findbuf(st.buf) > 0
end

--- Open (or focus) the chat window of `root`; with focus = false the cursor stays where it is.
function M.open(root, focus)
  local st = M.state(root)
  local prev = vim.api.nvim_get_current_win()
  local win = vim.fn.bufwinid(st.buf)
  if win == -1 then
    local layout = require("oi").config.layout
    if layout == "float" then
      local w, h = math.floor(vim.o.columns * 0.8), math.floor(vim.o.lines * 0.8)
      win = vim.api.nvim_open_win(st.buf, true, { relative = "editor", width = w, height = h,
        row = math.floor((vim.o.lines - h) / 2), col = math.floor((vim.o.columns - w) / 2),
        border = "rounded", title = " oi " })
    else
      vim.cmd(({ split = "botright split", tab = "tabnew", vsplit = "botright vsplit" })[layout]
        or "botright vsplit")
      win = vim.api.nvim_get_current_win()
      vim.api.nvim_win_set_buf(win, st.buf)
    end
    vim.wo[win].wrap = true
    vim.wo[win].linebreak = true
  end
  if focus then
    vim.api.nvim_set_current_win(win)
    vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(st.buf), 0 })
  elseif vim.api.nvim_win_is_valid(prev) then
    vim.api.nvim_set_current_win(prev)
  end
  return win
end

function M.put(root, text) put(M.state(root), text) end
function M.gap(root) gap(M.state(root)) end

--- A mark on the last complete transcript line (the prompt of a proposal), to rewrite it later.
function M.mark_last(root)
  local st = M.state(root)
  return vim.api.nvim_buf_set_extmark(st.buf, ns, cursor_line(st) - 1, 0, {})
end

--- Replace the line a mark of mark_last() is on.
function M.set_marked(root, id, text)
  local st = M.state(root)
  local row = vim.api.nvim_buf_get_extmark_by_id(st.buf, ns, id, {})[1]
  if row then vim.api.nvim_buf_set_lines(st.buf, row, row + 1, true, { text }) end
  vim.api.nvim_buf_del_extmark(st.buf, ns, id)
end

--- Whether the user is typing in the chat's prompt area: the cursor is there and it holds text.
function M.typing(root)
  local st = M.state(root)
  if vim.api.nvim_get_current_buf() ~= st.buf
    or vim.api.nvim_win_get_cursor(0)[1] - 1 <= sep_row(st) then
    return false
  end
  local prompt = vim.api.nvim_buf_get_lines(st.buf, sep_row(st) + 1, -1, false)
  return vim.trim(table.concat(prompt, "\n")) ~= ""
end

function M.user(root, text, context)
  local st = M.state(root)
  gap(st)
  put(st, "## You")
  put(st, text)
  if context and context.uri then
    local r = context.range
    put(st, ("_(context: %s, lines %d–%d)_"):format(vim.fn.fnamemodify(vim.uri_to_fname(context.uri), ":~:."),
      r and r.start.line + 1 or 0, r and r["end"].line + 1 or 0))
  end
  gap(st)
  put(st, "## oi")
end

function M.error(root, message)
  local st = M.state(root)
  gap(st)
  put(st, "> **Error:** " .. message:gsub("\n", "\n> "))
  vim.notify("oi: " .. message, vim.log.levels.ERROR)
end

--- An error the server showed (window/showMessage): the turn's own error event follows it
--- with the same text, which is then not shown twice.
function M.server_error(root, message)
  local text = message:gsub("^oi%-lsp: ", "")
  M.state(root).last_error = text
  M.error(root, text)
end

--- The next direct run's output stays out of the transcript (the health check's probe).
function M.mute_next_run(root) M.state(root).mute_next = true end

local function fence(lang, code)
  return ("```%s\n%s\n```"):format(lang or "", (code:gsub("\n+$", "")))
end
M.fence = fence

local hl_ns = vim.api.nvim_create_namespace("oi_active_line")

--- Put fenced code; it becomes the code a run's active_line chunks point into.
local function code_block(st, lang, code)
  gap(st)
  put(st, fence(lang, code))
  local first = cursor_line(st) - select(2, fence(lang, code):gsub("\n", "")) - 1 -- its ``` line
  st.code_mark = vim.api.nvim_buf_set_extmark(st.buf, ns, first, 0, { id = st.code_mark })
end
function M.code_block(root, lang, code) code_block(M.state(root), lang, code) end

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

--- The text of the highlighted active line, if any (for tests and statuslines).
function M.active_line(root)
  local st = states[root]
  if not st then return nil end
  local marks = vim.api.nvim_buf_get_extmarks(st.buf, hl_ns, 0, -1, {})
  if #marks == 0 then return nil end
  return vim.api.nvim_buf_get_lines(st.buf, marks[1][2], marks[1][2] + 1, true)[1]
end

local function save_image(format, data)
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
  st.open = { role = p.role, type = p.type, format = p.format, parts = {} }
  if p.type == "console" then
    gap(st); put(st, "```output")
  elseif p.type == "code" then
    gap(st); put(st, "```" .. (p.format or ""))
  elseif p.type == "message" then
    gap(st)
  end
end

local function close_block(st)
  local b = st.open
  st.open = nil
  if not b then return end
  local data = table.concat(b.parts)
  if b.type == "console" or b.type == "code" then
    put(st, "```")
  elseif b.type == "confirmation" then
    -- the code that runs: shown unless it is the proposal just shown above
    if data ~= st.shown_code then code_block(st, b.format, data) end
    st.shown_code = nil
  elseif b.type == "image" then
    local ok, path = pcall(save_image, b.format or "base64.png", data)
    gap(st)
    put(st, ok and ("![image](%s)"):format(path) or ("_(image could not be saved: %s)_"):format(path))
  else
    newline(st)
  end
end

local BUFFERED = { confirmation = true, image = true }

function M.on_stream(root, p)
  local st = M.state(root)
  if st.muted[p.turnId] then return end
  if p.type == "status" then
    set_status(st, p.format ~= "idle" and p.format or nil)
    if p.format == "idle" then active_line(st, nil) end
    return
  end
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
    if BUFFERED[p.type] then table.insert(st.open.parts, p.content) else append(st, p.content) end
  end
  if p["end"] then close_block(st) end
end

--- Remember code shown with a proposal, so its confirmation is not shown twice.
function M.shown(root, code) M.state(root).shown_code = code end

function M.on_turn(root, p)
  local st = M.state(root)
  if p.status == "running" and p.kind == "execute" and st.mute_next then
    st.mute_next, st.muted[p.turnId] = nil, true
  end
  if st.muted[p.turnId] then
    if p.status ~= "running" then st.muted[p.turnId] = nil end
    return
  end
  st.running = st.running or {}
  st.running[p.turnId] = p.status == "running" or nil
  if p.status == "running" then
    st.turn = p.turnId
    set_status(st, p.kind == "execute" and "running" or "thinking")
    return
  end
  if st.open then close_block(st) end
  set_status(st, nil)
  require("oi.approval").clear(root, p.turnId)
  if p.status == "stopped" then
    gap(st); put(st, "_(stopped)_")
  elseif p.status == "error" then
    local text = p.error or "the turn failed"
    if st.last_error ~= text then M.error(root, text) end
  end
  st.last_error = nil
end

--- The server of `root` is gone: nothing runs any more; an unexpected exit is an error.
function M.server_exited(root, code, signal)
  local st = states[root]
  if st and vim.api.nvim_buf_is_valid(st.buf) then
    if st.open then close_block(st) end
    set_status(st, nil)
    st.running = {}
    require("oi.approval").clear(root)
  end
  if code ~= 0 or (signal or 0) ~= 0 then
    M.error(root, ("the server exited (code %d, signal %d); the next command starts it again")
      :format(code, signal or 0))
  end
end

--- Empty the transcript (after oi/reset, or before reloading the history).
function M.clear(root)
  local st = M.state(root)
  st.open = nil
  vim.api.nvim_buf_set_lines(st.buf, 0, sep_row(st), true, vim.list_extend(header(root), { "" }))
end

--- Render a saved conversation (oi/history messages).
function M.load_history(root, messages)
  M.clear(root)
  local st = M.state(root)
  for _, m in ipairs(messages or {}) do
    if m.role == "user" then
      M.user(root, m.content)
    elseif m.type == "message" then
      gap(st); put(st, m.content)
    elseif m.type == "code" then
      gap(st); put(st, fence(m.format, m.content)); st.shown_code = m.content
    elseif m.type == "confirmation" then
      if m.content ~= st.shown_code then gap(st); put(st, fence(m.format, m.content)) end
      st.shown_code = nil
    elseif m.type == "console" then
      gap(st); put(st, fence("output", m.content))
    elseif m.type == "image" then
      local ok, path = pcall(save_image, m.format or "base64.png", m.content)
      gap(st); put(st, ok and ("![image](%s)"):format(path) or "_(image)_")
    end
  end
end

--- The chat buffer's lines (for tests and scripts).
function M.lines(root)
  local st = states[root]
  if not st then return {} end
  return vim.api.nvim_buf_get_lines(st.buf, 0, -1, false)
end

function M.status(root) return states[root] and states[root].status end

--- Whether a turn or a run of `root` is going on.
function M.busy(root)
  local st = states[root]
  return st ~= nil and next(st.running or {}) ~= nil
end

return M
