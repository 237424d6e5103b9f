-- The chat's status line, a virtual line above the transcript's separator: what the workspace
-- does now (oi/stream status chunks) with a run's figures (oi/resources).
local M = {}

local transcript = require("oi.transcript")
local FRAMES = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }

--- The words for a state: "thinking…", "waiting for you", "running · 12 s · 98% CPU · 512 MB".
function M.label(s)
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

local function draw(st, frame)
  local s = st.spin
  if not s or not vim.api.nvim_buf_is_valid(st.buf) then return end
  local icon = s.state == "waiting" and "⏸" or FRAMES[frame % #FRAMES + 1]
  local had = st.status_mark ~= nil
  st.status_mark = vim.api.nvim_buf_set_extmark(st.buf, transcript.ns, transcript.sep_row(st.buf), 0, {
    id = st.status_mark, virt_lines_above = true,
    virt_lines = { { { icon .. " " .. M.label(s), "Comment" } } } })
  if not had then transcript.refollow(st.buf) end
end

local function stop_timer(st)
  if st.timer then st.timer:stop(); st.timer:close(); st.timer = nil end
end

--- Set the state of chat `st` (nil or "idle": no status line).
function M.set(st, state)
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
