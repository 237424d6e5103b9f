-- A failed turn's `errorKind` (docs/protocol.md) turned into what to do about it in Neovim:
-- the server's sentence is shown as it is; this adds the command or setting that fixes it.
local M = {}

--- What to do, per errorKind.
---@type table<string, string>
M.advice = {
  noModel = "Choose a model: :OIModel (a picker), or model = ... in require('oi').setup{}, or $OI_MODEL.",
  noApiKey = "Missing API key: :OIKey sets one for this session; to keep it, settings.apiKey in "
    .. "require('oi').setup{}, or the provider's variable ($OPENAI_API_KEY, ...) or $OI_API_KEY.",
  authFailed = "The API key was refused: :OIKey enters another (or fix settings.apiKey / the "
    .. "provider's variable).",
  unreachable = "Is the model's server running? :checkhealth oi shows the model and its address.",
  rateLimited = "Rate limited: wait a little, then send again.",
  contextTooLong = "Too long for the model: :OIConversations starts a new conversation.",
  budget = "maxBudget is spent: raise settings.maxBudget in require('oi').setup{} to go on.",
  maxSteps = "maxSteps reached: send a message to go on, or raise maxSteps in settings.",
  notSaved = "The conversation could not be saved: check the data folder ($OI_LSP_DATA_DIR).",
}

--- oi/turn: after an error the chat already shows, say what to do there; notified too when
--- the chat is hidden (the error itself already was: a second message would make the user
--- press ENTER in a visible chat), in one line with Neovim's own vim.notify (oi.notify).
---@param root string
---@param p table an oi/turn notification
function M.on_turn(root, p)
  if p.status == "running" or type(p.errorKind) ~= "string" then return end
  local text = M.advice[p.errorKind]
  if not text then return end
  local chat = require("oi.chat")
  chat.put(root, "> " .. text)
  if not chat.visible(root) then require("oi.notify").tell(text, vim.log.levels.WARN) end
end

return M
