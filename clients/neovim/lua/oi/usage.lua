-- Tokens and cost: a line in the transcript after each chat turn (from oi/turn's `usage`),
-- and the session's totals (since Neovim started; the cost as the server counts it).
local M = {}

---@class oi.Usage
---@field promptTokens integer
---@field completionTokens integer
---@field calls integer
---@field cost number? USD, when litellm knows the model's price
---@field sessionCost number? USD of the server's session

--- 12345 -> "12,345"
local function n(x)
  local s = tostring(math.floor(tonumber(x) or 0))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

local function usd(x) return ("$%.4f"):format(x) end

--- A turn's tokens and cost, as a restored conversation shows them (oi/history keeps them).
---@param u oi.Usage the turn's usage
---@return string
function M.saved_text(u)
  local text = ("tokens: %s in · %s out · %d call%s"):format(n(u.promptTokens),
    n(u.completionTokens), u.calls or 0, (u.calls or 0) == 1 and "" or "s")
  if type(u.cost) == "number" then text = text .. " · " .. usd(u.cost) end
  return text
end

--- The line shown after a turn.
---@param u oi.Usage the turn's usage
---@param session oi.Usage the session's totals
---@return string
function M.turn_text(u, session)
  local text = M.saved_text(u)
  text = text .. ("; session %s tokens"):format(n(session.promptTokens + session.completionTokens))
  if type(session.sessionCost) == "number" then text = text .. " · " .. usd(session.sessionCost) end
  return text
end

--- The session's totals in a few words, or nil before any turn.
---@param session oi.Usage
---@return string?
function M.session_text(session)
  if not session or session.calls == 0 then return nil end
  local text = n(session.promptTokens + session.completionTokens) .. " tokens"
  if type(session.sessionCost) == "number" then text = text .. " · " .. usd(session.sessionCost) end
  return text
end

---@param root string
---@param p table an oi/turn notification
--- oi/turn: at the end of a chat turn that called the model, add up and show its usage.
function M.on_turn(root, p)
  local u = p.usage
  if p.status == "running" or type(u) ~= "table" or (u.calls or 0) == 0 then return end
  local session = require("oi.status").get(root).session
  session.promptTokens = session.promptTokens + (u.promptTokens or 0)
  session.completionTokens = session.completionTokens + (u.completionTokens or 0)
  session.calls = session.calls + (u.calls or 0)
  if type(u.sessionCost) == "number" then session.sessionCost = u.sessionCost end
  pcall(vim.cmd.redrawstatus, { bang = true }) -- oi.status() shows the new totals
  local chat = require("oi.chat")
  chat.gap(root)
  chat.put(root, "_(" .. M.turn_text(u, session) .. ")_")
end

return M
