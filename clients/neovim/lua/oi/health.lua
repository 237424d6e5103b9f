-- :checkhealth oi
local M = {}

local h = vim.health

local function nvim_version()
  local v = vim.version()
  local text = ("Neovim %d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then h.ok(text) else h.error(text .. ": oi needs 0.10 or newer") end
end

--- The server's executable and version; false when it cannot be run.
local function server()
  local cmd = require("oi").config.cmd
  if vim.fn.executable(cmd[1]) ~= 1 then
    h.error(("`%s` not found"):format(cmd[1]), { "pip install oi-lsp", "or set cmd in require('oi').setup{}" })
    return false
  end
  local ok, proc = pcall(vim.system, vim.list_extend(vim.deepcopy(cmd), { "--version" }), { text = true })
  local res = ok and proc:wait(20000) or nil
  if not res or res.code ~= 0 then
    h.error(("`%s --version` failed: %s"):format(table.concat(cmd, " "),
      res and vim.trim(res.stderr or "") or tostring(proc)))
    return false
  end
  h.ok(("%s (%s)"):format(vim.trim(res.stdout), vim.fn.exepath(cmd[1])))
  return true
end

local function model(root)
  local client = require("oi.client")
  local res, err = client.request_sync(root, "oi/configure", {}, 20000)
  if not res then
    h.error("the server did not answer: " .. tostring(err))
    return false
  end
  local s = res.settings or {}
  if type(s.model) == "string" and s.model ~= "" then
    local base = type(s.apiBase) == "string" and (", apiBase " .. s.apiBase) or ""
    h.ok(("model %s%s (API key %s)"):format(s.model, base, s.apiKeySet and "set" or "not set"))
  else
    h.error("no model configured", { "require('oi').setup{ model = 'gpt-4o-mini' }",
      "or :OIModel name, or $OI_MODEL" })
  end
  if s.autoRun then h.warn("autoRun is on: proposals run without asking") end
  return true
end

local function kernel(root)
  local client, chat = require("oi.client"), require("oi.chat")
  chat.mute_next_run(root) -- the probe's output is not part of the conversation
  local res, err = client.request_sync(root, "oi/execute",
    { language = "python", code = "print('oi-health-ok')", timeout = 60 }, 90000)
  if not res then
    h.error("the Python kernel did not answer: " .. tostring(err))
    return
  end
  local out = {}
  for _, o in ipairs(res.outputs or {}) do table.insert(out, o.content) end
  local text = table.concat(out)
  if res.status == "ok" and text:find("oi-health-ok", 1, true) then
    h.ok("the workspace's Python kernel runs code")
  else
    h.error(("the Python kernel could not run code (%s): %s"):format(res.status,
      vim.trim(res.error or text)), { "pip install ipykernel", "check kernelName / kernelGateway" })
  end
end

function M.check()
  h.start("oi: Neovim")
  nvim_version()
  h.start("oi: server")
  if not server() then return end
  local root = require("oi.client").root(0)
  h.info("workspace: " .. root)
  h.start("oi: model")
  if not model(root) then return end
  h.start("oi: kernel")
  kernel(root)
  local roots = vim.tbl_keys(require("oi.client").clients())
  table.sort(roots)
  h.info(("one oi-lsp serves %d workspace folder%s: %s"):format(#roots, #roots == 1 and "" or "s",
    table.concat(roots, ", ")))
end

return M
