-- Tokens and cost: a line in the transcript after each chat turn (from oi/turn's `usage`),
-- and the session's totals (since Neovim started; the cost as the server counts it).
local M = {}

---@class oi.Usage
---@field promptTokens integer
---@field completionTokens integer
---@field calls integer
---@field cost number? USD, when litellm knows the model's price
---@field sessionCost number? USD of the server's session
---@field reasoningTokens integer? of the completion tokens, those spent reasoning (the provider's count)
---@field cachedTokens integer? of the prompt tokens, those read from the provider's prompt cache
---@field cacheWriteTokens integer? of the prompt tokens, those written to its cache
---@field cacheSaved number? USD the cache saved (negative: it cost more than it saved)

--- 12345 -> "12,345"
local function n(x)
  local s = tostring(math.floor(tonumber(x) or 0))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

local function usd(x) return ("$%.4f"):format(x) end

local function count(x) return type(x) == "number" and x > 0 end

--- "1,200 in (1,000 cached, 150 written)": the prompt tokens, with what the cache did.
local function prompt_tokens(u)
  local parts = {}
  if count(u.cachedTokens) then table.insert(parts, n(u.cachedTokens) .. " cached") end
  if count(u.cacheWriteTokens) then table.insert(parts, n(u.cacheWriteTokens) .. " written") end
  local text = n(u.promptTokens) .. " in"
  return #parts > 0 and ("%s (%s)"):format(text, table.concat(parts, ", ")) or text
end

--- A turn's tokens and cost, as a restored conversation shows them (oi/history keeps them):
--- "tokens: 1,200 in (1,000 cached) · 56 out (40 reasoning) · 1 call · $0.0012 (cache saved
--- $0.0027)"; the cached, written and reasoning tokens and the saving when the provider said.
---@param u oi.Usage the turn's usage
---@return string
function M.saved_text(u)
  local out = n(u.completionTokens) .. " out"
  if count(u.reasoningTokens) then out = ("%s (%s reasoning)"):format(out, n(u.reasoningTokens)) end
  local text = ("tokens: %s · %s · %d call%s"):format(prompt_tokens(u), out, u.calls or 0,
    (u.calls or 0) == 1 and "" or "s")
  if type(u.cost) == "number" then text = text .. " · " .. usd(u.cost) end
  local saved = u.cacheSaved
  if type(saved) == "number" and saved ~= 0 then
    text = text .. (saved > 0 and (" (cache saved %s)"):format(usd(saved))
      or (" (cache cost %s more)"):format(usd(-saved)))
  end
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
