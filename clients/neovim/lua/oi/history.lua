-- A saved conversation (oi/history, oi/session/open messages) as transcript lines, as the live
-- chat showed it: the model's reasoning folded (oi.reasoning), each proposal's fate, the
-- editor's context as one line, the user's own runs, the turns' errors, long outputs folded.
local M = {}

-- What became of a proposal (`outcome`), as the live chat marks its answer.
M.FATES = { ran = "_→ run_", edited = "_→ edited_", autoRan = "_(auto-run)_",
  skipped = "_→ skipped_", stopped = "_(stopped)_", timedOut = "_(timed out)_",
  error = "_→ run (it failed)_", expired = "_(not answered)_" }

--- "_(context: file, lines a–b)_" for the context the editor sent with a message.
function M.context_line(context)
  if type(context) ~= "table" or type(context.uri) ~= "string" then return nil end
  local r = type(context.range) == "table" and context.range or nil
  return ("_(context: %s, lines %d–%d)_"):format(
    vim.fn.fnamemodify(vim.uri_to_fname(context.uri), ":~:."),
    r and r.start.line + 1 or 0, r and r["end"].line + 1 or 0)
end

function M.fence(lang, code)
  return ("```%s\n%s\n```"):format(lang or "", (tostring(code):gsub("\n+$", "")))
end

--- "… N more lines (<Tab> shows them)", the line standing for a folded output's rest.
function M.fold_line(text)
  local n = select(2, text:gsub("\n", "")) + (text:match("\n$") and 0 or 1)
  return ("… %d more lines (<Tab> on this line shows them)"):format(n)
end

-- A writer: lines, the folded outputs (the line index of each placeholder, its text), and the
-- reasoning blocks (the indexes of their first and last lines).
local function writer()
  local w = { lines = {}, folds = {}, thoughts = {} }
  function w.put(text)
    vim.list_extend(w.lines, vim.split(text, "\n", { plain = true }))
  end
  function w.gap()
    if #w.lines > 0 and w.lines[#w.lines] ~= "" then table.insert(w.lines, "") end
  end
  return w
end

local function output(w, text, limit)
  local lines = vim.split((text:gsub("\n+$", "")), "\n", { plain = true })
  w.gap()
  w.put("```output")
  if #lines > limit then
    vim.list_extend(w.lines, lines, 1, limit)
    local rest = table.concat(lines, "\n", limit + 1)
    w.put(M.fold_line(rest))
    table.insert(w.folds, { index = #w.lines, text = rest })
  else
    vim.list_extend(w.lines, lines)
  end
  w.put("```")
end

local function thought(w, text)
  local lines = require("oi.reasoning").lines(text)
  if not lines then return end
  w.gap()
  local first = #w.lines + 1
  vim.list_extend(w.lines, lines)
  table.insert(w.thoughts, { first = first, last = #w.lines })
end

local function code(w, m, shown)
  w.gap()
  w.put(M.fence(m.format, m.content))
  local risk = type(m.risk) == "table" and m.risk or nil
  if risk and risk.level ~= "low" then
    w.put(("**risk: %s** (%s)"):format(risk.level, table.concat(risk.reasons or {}, "; ")))
  end
  if M.FATES[m.outcome] then w.put(M.FATES[m.outcome]) end
  shown.code = m.content
  if m.outcome == "edited" and type(m.editedCode) == "string" then
    w.gap(); w.put(M.fence(m.format, m.editedCode))
    shown.code = m.editedCode
  end
end

local function user(w, m, shown)
  if m.type == "code" then -- the user's own run (:OIExec)
    w.gap(); w.put("## Run"); w.put(M.fence(m.format, m.content))
    if m.outcome and m.outcome ~= "ran" and M.FATES[m.outcome] then w.put(M.FATES[m.outcome]) end
    shown.answer = false
  elseif m.type == "message" then
    w.gap(); w.put("## You"); w.put(m.content)
    local ctx = M.context_line(m.context)
    if ctx then w.put(ctx) end
    shown.answer = false
  end
end

--- The lines of `messages`, their folded outputs ({index, text}) and their reasoning blocks
--- ({first, last}); indexes 1-based into the lines.
---@return string[] lines, table[] folds, table[] thoughts
function M.render(messages, limit)
  local w, shown = writer(), { answer = true }
  for _, m in ipairs(messages or {}) do
    if m.role == "user" then
      user(w, m, shown)
    else
      if m.role == "assistant" and not shown.answer then
        w.gap(); w.put("## oi"); shown.answer = true
      end
      if m.role == "assistant" and type(m.reasoning) == "string" then -- carried on the message
        thought(w, m.reasoning)
      end
      if m.type == "reasoning" then
        thought(w, m.content)
      elseif m.type == "message" then
        w.gap(); w.put(m.content)
      elseif m.type == "code" and m.role == "assistant" then
        code(w, m, shown)
      elseif m.type == "confirmation" then
        if m.content ~= shown.code then w.gap(); w.put(M.fence(m.format, m.content)) end
        shown.code = nil
      elseif m.type == "console" then
        output(w, m.content or "", limit)
      elseif m.type == "error" then
        w.gap(); w.put("> **Error:** " .. tostring(m.content):gsub("\n", "\n> "))
      elseif m.type == "image" then
        local ok, path = pcall(require("oi.blocks").save_image, m.format or "base64.png", m.content)
        w.gap(); w.put(ok and ("![image](%s)"):format(path) or "_(image)_")
      elseif m.type == "code" then -- HTML a run displayed
        w.gap(); w.put(M.fence(m.format, m.content))
      end
    end
    -- The turn's last entry: "stopped", then its usage, as the turn's end showed them live.
    if m.stopped == true then
      w.gap(); w.put(M.FATES.stopped)
    end
    if type(m.usage) == "table" and (m.usage.calls or 0) > 0 then
      w.gap(); w.put("_(" .. require("oi.usage").saved_text(m.usage) .. ")_")
    end
  end
  return w.lines, w.folds, w.thoughts
end

return M
