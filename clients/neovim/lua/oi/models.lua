-- :OIModel without a name: a vim.ui.select picker fed by oi/models (the models the local
-- servers serve, the user's profiles, another model by name); the choice is set with
-- oi/configure for the current workspace.
local M = {}

local client = require("oi.client")

---@class oi.ModelChoice
---@field label string what the picker shows
---@field settings table? the oi/configure params it sets (nil: ask for a name)

--- The picker's entries for an oi/models answer.
---@param res table the oi/models result
---@return oi.ModelChoice[]
function M.choices(res)
  local out = {}
  local current = type(res.model) == "string" and res.model or nil
  for _, server in ipairs(res["local"] or {}) do
    for _, name in ipairs(server.up and server.models or {}) do
      local mark = name == current and "  (current)" or ""
      table.insert(out, { label = ("%s  · %s %s%s"):format(name, server.name, server.url, mark),
        settings = { model = name, ["local"] = server.name, apiBase = server.url } })
    end
  end
  for _, profile in ipairs(res.profiles or {}) do
    table.insert(out, { label = "profile: " .. profile, settings = { profile = profile } })
  end
  table.insert(out, { label = "another model, by name…" })
  return out
end

local function set(root, settings)
  client.request(root, "oi/configure", settings, function(res)
    local name = res.settings and res.settings.model
    vim.notify("oi: model " .. (type(name) == "string" and name or "(none configured)")
      .. " for " .. vim.fs.basename(root))
  end)
end

--- Ask for a model and set it for the workspace of `root`.
---@param root string
function M.pick(root)
  client.request(root, "oi/models", {}, function(res)
    local current = type(res.model) == "string" and res.model or "none"
    local down = {}
    for _, s in ipairs(res["local"] or {}) do if not s.up then table.insert(down, s.name) end end
    vim.ui.select(M.choices(res), {
      prompt = ("Model (now %s; local servers not running: %s)"):format(current,
        #down > 0 and table.concat(down, ", ") or "none"),
      format_item = function(c) return c.label end,
    }, function(choice)
      if not choice then return end
      if choice.settings then return set(root, choice.settings) end
      vim.ui.input({ prompt = "litellm model (e.g. gpt-4o-mini, ollama/llama3.1): " }, function(name)
        if name and vim.trim(name) ~= "" then set(root, { model = vim.trim(name) }) end
      end)
    end)
  end)
end

return M
