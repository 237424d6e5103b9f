-- The chat's status line, a virtual line above the transcript's separator: what the workspace
-- does now (oi/stream status chunks) with a run's figures (oi/resources), or the server's
-- sentence while it waits to call the model again (a `retrying` status).
local M = {}

local transcript = require("oi.transcript")
local FRAMES = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }

--- The words for a state: "thinking…", "waiting for you", "running · 12 s · 98% CPU · 512 MB",
--- the retry's sentence ("The model … is overloaded (529): retrying in 2 s (retry 1 of 3)").
function M.label(s)
  if s.state == "retrying" then return s.text or "retrying…" end
  if s.state == "waiting" then return "waiting for you: [r]un [s]kip [e]dit (:OIApprove)" end
  if s.state ~= "running" then return s.state .. "…" end
  local parts = { "running" }
  local elapsed = s.elapsed or (s.since and (vim.uv.now() - s.since) / 1000)
  if elapsed then table.insert(parts, ("%d s"):format(math.floor(elapsed))) end
  local repl = s.repl or {}
  if type(repl.cpuPercent) == "number" then
    table.insert(parts, ("%d%% CPU"):format(math.floor(repl.cpuPercent + 0.5)))
  end
  if type(repl.rss) == "number" then
    table.insert(parts, ("%d MB"):format(math.floor(repl.rss / 1048576 + 0.5)))
  end
  return table.concat(parts, " · ")
end

-- The text columns of the narrowest window showing `buf` (a virtual line is never wrapped).
local function width(buf)
  local w
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local info = vim.fn.getwininfo(win)[1]
    local cols = info and info.width - info.textoff
    if cols and (not w or cols < w) then w = cols end
  end
  return w
end

-- `text` cut at spaces into lines of at most `w` display columns (a long word stays whole).
local function wrap(text, w)
  if not w or w < 20 or vim.fn.strdisplaywidth(text) <= w then return { text } end
  local lines, line = {}, ""
  for word in text:gmatch("%S+") do
    local next_ = line == "" and word or line .. " " .. word
    if line ~= "" and vim.fn.strdisplaywidth(next_) > w then
      table.insert(lines, line)
      line = "  " .. word
    else
      line = next_
    end
  end
  table.insert(lines, line)
  return lines
end

local function draw(st, frame)
  local s = st.spin
  if not s or not vim.api.nvim_buf_is_valid(st.buf) then return end
  local icon = s.state == "waiting" and "⏸" or FRAMES[frame % #FRAMES + 1]
  local had, height = st.status_mark ~= nil, st.status_height
  local virt = {}
  -- a retry's sentence is wrapped (its end says when: "retrying in 2 s (retry 1 of 3)")
  local w = s.state == "retrying" and width(st.buf) or nil
  for _, line in ipairs(wrap(icon .. " " .. M.label(s), w)) do
    table.insert(virt, { { line, "Comment" } })
  end
  st.status_mark = vim.api.nvim_buf_set_extmark(st.buf, transcript.ns, transcript.sep_row(st.buf), 0, {
    id = st.status_mark, virt_lines_above = true, virt_lines = virt })
  st.status_height = #virt
  if not had or height ~= #virt then transcript.refollow(st.buf) end
end

local function stop_timer(st)
  if st.timer then st.timer:stop(); st.timer:close(); st.timer = nil end
end

--- Set the state of chat `st` (nil or "idle": no status line); `text`, what a `retrying` says.
function M.set(st, state, text)
  if state == "idle" then state = nil end
  local prev = st.spin
  st.status = state
  if not state then
    stop_timer(st)
    st.spin = nil
    if st.status_mark and vim.api.nvim_buf_is_valid(st.buf) then
      vim.api.nvim_buf_del_extmark(st.buf, transcript.ns, st.status_mark)
    end
    st.status_mark = nil
    return
  end
  if not (prev and prev.state == state) then
    st.spin = { state = state, since = vim.uv.now() }
  end
  if state == "retrying" then st.spin.text = text end
  draw(st, 0)
  if st.timer then return end
  local frame = 0
  st.timer = vim.uv.new_timer()
  st.timer:start(100, 100, vim.schedule_wrap(function()
    frame = frame + 1
    draw(st, frame)
  end))
end

--- oi/resources: the figures of the run going on.
function M.resources(st, p)
  if not st.spin or st.spin.state ~= "running" then return end
  st.spin.repl, st.spin.elapsed = p.repl, nil
  if type(p.elapsed) == "number" then
    st.spin.since = vim.uv.now() - p.elapsed * 1000 -- the server's clock counts from the start
  end
  draw(st, 0)
end

--- The text the status line shows now (for tests and statuslines), or nil.
function M.text(st) return st.spin and M.label(st.spin) or nil end

--- Draw it again (the buffer was rebuilt).
function M.redraw(st)
  st.status_mark = nil
  draw(st, 0)
end

return M
