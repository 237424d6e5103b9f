-- The chat of a workspace: a read-only markdown transcript (oi.transcript) with a status line
-- (oi.spinner) and a prompt area below it (oi.prompt); the history restored when it opens.
local M = {}

local transcript = require("oi.transcript")
local spinner = require("oi.spinner")
local prompt = require("oi.prompt")
local history = require("oi.history")
local reasoning = require("oi.reasoning")

local ns = transcript.ns
local states = {} -- root -> state

local blocks = require("oi.blocks")
local put, gap, newline, append = blocks.put, blocks.gap, blocks.newline, blocks.append
local cursor_line, limit, fold_at = blocks.cursor_line, blocks.limit, blocks.fold_at
local function sep_row(st) return transcript.sep_row(st.buf) end

local function header(root) return { "# oi: " .. root, "" } end

--- Messages of a saved conversation asked for at once: the last page when a chat opens, the
--- one before it when the user scrolls to the top (oi/history's `limit`).
M.PAGE = 200
local earlier_ns = vim.api.nvim_create_namespace("oi_earlier")

-- Above the oldest message shown, how many are before it (a virtual line: the transcript's
-- lines stay what the conversation holds).
local function mark_earlier(st)
  vim.api.nvim_buf_clear_namespace(st.buf, earlier_ns, 0, -1)
  local n = st.earlier or 0
  if n == 0 then return end
  local count = tostring(n):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
  vim.api.nvim_buf_set_extmark(st.buf, earlier_ns, #header(st.root) - 1, 0, {
    virt_lines = { { { ("▲ %s earlier message%s: scroll up or :OIEarlier to show them")
      :format(count, n == 1 and "" or "s"), "OIEarlier" } } } })
end

local function expand(st)
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  if reasoning.toggle(st, row) then return end
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(st.buf, ns, { row, 0 }, { row, -1 }, {})) do
    local text = st.folds[m[1]]
    if text then
      st.folds[m[1]] = nil
      vim.api.nvim_buf_del_extmark(st.buf, ns, m[1])
      transcript.set_lines(st.buf, row, row + 1,
        vim.split((text:gsub("\n+$", "")), "\n", { plain = true }))
      return
    end
  end
  vim.api.nvim_feedkeys(vim.keycode("<Tab>"), "n", false)
end

local function keymaps(st)
  local o = { buffer = st.buf, nowait = true, silent = true }
  vim.keymap.set("n", "<Tab>", function() expand(st) end,
    vim.tbl_extend("force", o, { desc = "oi: show a folded output, open or close a thought" }))
  -- Typing in the transcript starts a message in the prompt area.
  for _, key in ipairs({ "i", "I", "A", "o", "O" }) do
    vim.keymap.set("n", key, function() M.focus_prompt(st.root, true) end,
      vim.tbl_extend("force", o, { desc = "oi: type a message" }))
  end
  vim.keymap.set("n", "<CR>", function() M.focus_prompt(st.root, false) end,
    vim.tbl_extend("force", o, { desc = "oi: go to the prompt" }))
end

-- The buffer was wiped (:bwipe!): keep what it held, to build it again when it is needed.
local function watch(st)
  vim.api.nvim_create_autocmd("BufUnload", { buffer = st.buf, once = true, callback = function(a)
    if states[st.root] == st and a.buf == st.buf then
      st.snapshot = transcript.snapshot(a.buf)
      st.snapshot.thoughts = reasoning.snapshot(st)
    end
  end })
end

-- The saved conversation goes above what this chat has shown meanwhile: the server answers
-- oi/history at once, before it reads a message sent after it. Unless the transcript was
-- cleared meanwhile (:OIConversations loaded a conversation, :OIReset): it is not shown twice.
local function restore(st)
  local cleared = st.cleared
  require("oi.client").request(st.root, "oi/history", { limit = M.PAGE }, function(res)
    if vim.api.nvim_buf_is_valid(st.buf) and st.cleared == cleared then
      M.insert_history(st, res.messages or {})
      st.earlier = res.start or 0
      mark_earlier(st)
    end
  end, function() end)
end

--- The page of the saved conversation before the oldest message the chat shows, put above
--- it; every window on the chat keeps showing what it showed.
---@param root string
function M.earlier(root)
  local st = M.state(root)
  if (st.earlier or 0) == 0 or st.loading_earlier then return end
  st.loading_earlier = true
  local cleared = st.cleared
  require("oi.client").request(root, "oi/history", { before = st.earlier, limit = M.PAGE },
    function(res)
      st.loading_earlier = false
      if not vim.api.nvim_buf_is_valid(st.buf) or st.cleared ~= cleared then return end
      local views = {}
      for _, win in ipairs(vim.fn.win_findbuf(st.buf)) do
        views[win] = vim.api.nvim_win_call(win, vim.fn.winsaveview)
      end
      local before = vim.api.nvim_buf_line_count(st.buf)
      M.insert_history(st, res.messages or {})
      local added = vim.api.nvim_buf_line_count(st.buf) - before
      st.earlier = res.start or 0
      mark_earlier(st)
      for win, view in pairs(views) do
        view.topline, view.lnum = view.topline + added, view.lnum + added
        vim.api.nvim_win_call(win, function() vim.fn.winrestview(view) end)
      end
    end, function() st.loading_earlier = false end)
end

-- Scrolled (or moved) to the top of the chat with older messages not shown: show them.
local function at_top(st)
  if (st.earlier or 0) == 0 then return end
  for _, win in ipairs(vim.fn.win_findbuf(st.buf)) do
    if vim.fn.line("w0", win) <= #header(st.root) + 1 then return M.earlier(st.root) end
  end
end

--- The state (and buffer) of a workspace's chat, created on first use: a wiped buffer is built
--- again as it was, and a new chat shows the saved conversation.
function M.state(root)
  local st = states[root]
  if st and vim.api.nvim_buf_is_valid(st.buf) then return st end
  local name = "oi://chat" .. root
  local fresh = st == nil
  local thoughts
  if st and st.snapshot then
    st.buf = transcript.rebuild(name, st.snapshot)
    thoughts, st.snapshot = st.snapshot.thoughts, nil
  elseif st then
    st.buf = transcript.create(name, header(root))
  else
    st = { root = root, open = nil, muted = {}, folds = {} }
    st.buf = transcript.create(name, header(root))
    states[root] = st
  end
  vim.b[st.buf].oi_root = root
  keymaps(st)
  watch(st)
  local group = vim.api.nvim_create_augroup("oi_earlier_" .. st.buf, { clear = true })
  vim.api.nvim_create_autocmd("WinScrolled", { group = group, callback = function()
    if vim.api.nvim_buf_is_valid(st.buf) then at_top(st) else return true end
  end })
  vim.api.nvim_create_autocmd("CursorMoved", { group = group, buffer = st.buf,
    callback = function() at_top(st) end })
  reasoning.attach(st)
  if thoughts then reasoning.rebuild(st, thoughts) end
  if st.spin then spinner.redraw(st) end
  if fresh then restore(st) end
  return st
end

function M.buffer(root) return M.state(root).buf end
function M.prompt_buffer(root) return prompt.buffer(M.state(root)) end

--- Whether the chat of `root` shows in some window.
function M.visible(root)
  local st = states[root]
  return st ~= nil and vim.api.nvim_buf_is_valid(st.buf) and #vim.fn.win_findbuf(st.buf) > 0
end

-- Closing the transcript's window or the prompt's closes the other one too (unless its buffer
-- shows again meanwhile, as after a :bwipe! and :OIChat).
local function pair(st, chat_win, prompt_win)
  local group = vim.api.nvim_create_augroup("oi_chat_pair_" .. chat_win, { clear = true })
  vim.api.nvim_create_autocmd("WinClosed", { group = group, callback = function(a)
    local closed = tonumber(a.match)
    if closed ~= chat_win and closed ~= prompt_win then return end
    vim.api.nvim_del_augroup_by_id(group)
    local other = closed == prompt_win and chat_win or prompt_win
    vim.schedule(function()
      -- the buffer as it is now: a wiped chat's (the closed window's) is built again by :OIChat
      local buf = closed == prompt_win and st.prompt or st.buf
      local shown = buf and vim.api.nvim_buf_is_valid(buf) and #vim.fn.win_findbuf(buf) > 0
      if not shown and vim.api.nvim_win_is_valid(other) and #vim.api.nvim_list_wins() > 1 then
        pcall(vim.api.nvim_win_close, other, false)
      end
    end)
  end })
end

-- The status line of a chat's two windows, instead of their buffers' names (oi://chat/...,
-- cut at the left): the folder's name (the header has its path), and in the chat's what its
-- workspace does now or the session's spend.
M.STATUSLINE = "%!v:lua.require'oi.chat'.statusline()"

local function escape(text) return (text:gsub("%%", "%%%%")) end

--- The status line M.STATUSLINE draws for window `g:statusline_winid`; the usual one once the
--- window shows another buffer.
---@return string
function M.statusline()
  local buf = vim.api.nvim_win_get_buf(vim.g.statusline_winid or 0)
  local root = vim.b[buf].oi_root
  if not root then return "%<%f %h%m%r%=%-14.(%l,%c%V%) %P" end
  local folder = escape(vim.fn.fnamemodify(root, ":t"))
  local st = states[root]
  if st and buf == st.prompt then return (" message · %%<%s%%= %%P "):format(folder) end
  local now = require("oi.status").text(root):gsub("^oi: ", "")
  return (" oi · %%<%s%%=%s %%P "):format(folder, now ~= "" and escape(now) .. " ·" or "")
end

local function open_window(st)
  local layout = require("oi").config.layout
  local win
  if layout == "float" then
    local w, h = math.floor(vim.o.columns * 0.8), math.floor(vim.o.lines * 0.8)
    win = vim.api.nvim_open_win(st.buf, false, { relative = "editor", width = w,
      height = h - prompt.HEIGHT - 2, row = math.floor((vim.o.lines - h) / 2),
      col = math.floor((vim.o.columns - w) / 2), border = "rounded", title = " oi " })
  elseif layout == "tab" then
    vim.cmd("tabnew")
    win = vim.api.nvim_get_current_win()
    vim.api.nvim_win_set_buf(win, st.buf)
  else
    win = vim.api.nvim_open_win(st.buf, false,
      { split = layout == "split" and "below" or "right", win = -1 })
  end
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].statusline = M.STATUSLINE
  reasoning.refold(st) -- the thoughts folded in this window too
  pair(st, win, prompt.open(st, win))
  vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(st.buf), 0 })
  vim.api.nvim_win_call(win, function() vim.cmd("normal! zb") end)
  return win
end

--- Open the chat window of `root` (and its prompt); with focus the cursor goes to the prompt,
--- else it stays where it is.
function M.open(root, focus)
  local st = M.state(root)
  require("oi.pending").close(root) -- the proposal shows in the chat now
  local prev = vim.api.nvim_get_current_win()
  local win = vim.fn.bufwinid(st.buf)
  if win == -1 then
    win = open_window(st)
  elseif vim.fn.bufwinid(prompt.buffer(st)) == -1 then
    pair(st, win, prompt.open(st, win))
  end
  if focus then
    M.focus_prompt(root, false)
  elseif vim.api.nvim_win_is_valid(prev) then
    vim.api.nvim_set_current_win(prev)
  end
  return win
end

--- Put the cursor in the prompt area (in insert mode with `insert`).
function M.focus_prompt(root, insert)
  local st = M.state(root)
  local win = vim.fn.bufwinid(prompt.buffer(st))
  if win == -1 then
    M.open(root, false)
    win = vim.fn.bufwinid(st.prompt)
  end
  vim.api.nvim_set_current_win(win)
  if insert then vim.cmd("startinsert!") end
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
  if row then transcript.set_lines(st.buf, row, row + 1, { text }) end
  vim.api.nvim_buf_del_extmark(st.buf, ns, id)
end

--- Whether the user is typing a message in the chat's prompt area.
function M.typing(root) return prompt.typing(M.state(root)) end

function M.user(root, text, context)
  local st = M.state(root)
  gap(st)
  put(st, "## You")
  put(st, text)
  local ctx = history.context_line(context)
  if ctx then put(st, ctx) end
  gap(st)
  put(st, "## oi")
end

--- An error in the transcript; `quiet`: not notified (a saved one, shown again).
function M.error(root, message, quiet)
  local st = M.state(root)
  gap(st)
  put(st, "> **Error:** " .. message:gsub("\n", "\n> "))
  if not quiet then require("oi.notify").tell(message, vim.log.levels.ERROR) end
end

--- A message of the server, whole (vim.notify showed it cut).
function M.note(root, text)
  local st = M.state(root)
  gap(st)
  put(st, "> **oi-lsp:** " .. text:gsub("\n", "\n> "))
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

M.fence = history.fence

--- The text of the highlighted active line, if any (for tests and statuslines).
function M.active_line(root)
  local st = states[root]
  if not st then return nil end
  local marks = vim.api.nvim_buf_get_extmarks(st.buf, blocks.hl_ns, 0, -1, {})
  if #marks == 0 then return nil end
  return vim.api.nvim_buf_get_lines(st.buf, marks[1][2], marks[1][2] + 1, true)[1]
end

M.save_image = blocks.save_image
function M.code_block(root, lang, code) blocks.code_block(M.state(root), lang, code) end

function M.on_stream(root, p)
  local st = M.state(root)
  if st.muted[p.turnId] then return end
  if p.type == "status" then
    spinner.set(st, p.format, p.content)
    if p.format == "idle" then blocks.active_line(st, nil) end
    return
  end
  -- a retry's sentence shows until the next chunk of the turn: the model answers again
  if st.status == "retrying" then spinner.set(st, "thinking") end
  blocks.feed(st, p)
end

--- oi/resources: a long run's figures, for the status line.
function M.on_resources(root, p)
  local st = states[root]
  if st and not st.muted[p.turnId] then spinner.resources(st, p) end
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
    spinner.set(st, p.kind == "execute" and "running" or "thinking")
    return
  end
  if st.open then blocks.close(st) end
  spinner.set(st, nil)
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
    if st.open then blocks.close(st) end
    spinner.set(st, nil)
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
  st.open, st.folds, st.cleared, st.earlier = nil, {}, (st.cleared or 0) + 1, 0
  reasoning.clear(st)
  transcript.set_lines(st.buf, 0, sep_row(st), header(root))
  mark_earlier(st)
end

--- Put a saved conversation (oi/history messages) after the transcript's header.
function M.insert_history(st, messages)
  local lines, folds, thoughts = history.render(messages, limit())
  if #lines == 0 then return end
  table.insert(lines, "")
  local at = #header(st.root)
  transcript.set_lines(st.buf, at, at, lines)
  for _, f in ipairs(folds) do fold_at(st, at + f.index - 1, f.text) end
  reasoning.insert(st, at, thoughts)
end

--- Render a saved conversation (oi/history messages) as the whole transcript; `start`: the
--- index of the first of them (older ones are shown on scrolling up).
---@param root string
---@param messages table[]
---@param start integer?
function M.load_history(root, messages, start)
  M.clear(root)
  local st = M.state(root)
  M.insert_history(st, messages)
  st.earlier = start or 0
  mark_earlier(st)
end

--- The chat buffer's lines (for tests and scripts).
function M.lines(root)
  local st = states[root]
  if not st or not vim.api.nvim_buf_is_valid(st.buf) then return {} end
  return vim.api.nvim_buf_get_lines(st.buf, 0, -1, false)
end

--- The state shown (thinking, retrying, waiting, running), and the status line's words.
function M.status(root) return states[root] and states[root].status end
function M.status_text(root) return states[root] and spinner.text(states[root]) end

--- Whether a turn or a run of `root` is going on.
function M.busy(root)
  local st = states[root]
  return st ~= nil and next(st.running or {}) ~= nil
end

return M
