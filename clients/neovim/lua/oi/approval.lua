-- Proposals: shown in the chat with [r]un [s]kip [e]dit [c] always for this command [a]lways,
-- answered with oi/approve. A run the sandbox blocked is offered [o]utside (once, outside the
-- sandbox) [s]kip instead.
local M = {}

local pending = {} -- root -> { proposal, mark }
local KEYS = { r = "run", s = "skip", e = "edit", c = "command", a = "always" }
local BLOCKED_KEYS = { o = "outside", s = "skip" }

-- The filetype of a language's code (the server's names and aliases, see oi/languages).
local FILETYPES = { shell = "sh", bash = "sh", zsh = "zsh", fish = "fish", javascript = "javascript",
  js = "javascript", node = "javascript", powershell = "ps1", pwsh = "ps1", py = "python",
  rb = "ruby", r = "r", html = "html" }

function M.filetype(language)
  local lang = (language or ""):lower()
  return FILETYPES[lang] or vim.filetype.match({ filename = "x." .. lang }) or lang
end

local function unmap(root)
  local buf = require("oi.chat").buffer(root)
  for key in pairs(KEYS) do pcall(vim.keymap.del, "n", key, { buffer = buf }) end
  pcall(vim.keymap.del, "n", "o", { buffer = buf })
end

-- The answers; [c] names the command an "always" rule would allow (else the exact code).
local function choices(p)
  local always = p.command and ("[c] always `%s`"):format(p.command) or "[c] always this code"
  return ("[r]un  [s]kip  [e]dit  %s  [a]lways"):format(always)
end

local function map(root, keys)
  local chat = require("oi.chat")
  local buf = chat.buffer(root)
  for key, action in pairs(keys) do
    vim.keymap.set("n", key, function()
      -- While the user types a message the keys keep their meaning (a appends, s substitutes).
      if chat.typing(root) then
        return vim.api.nvim_feedkeys(vim.v.count > 0 and (vim.v.count .. key) or key, "n", false)
      end
      M[action](root)
    end, { buffer = buf, nowait = true, desc = "oi: " .. action .. " the proposal" })
  end
end

function M.on_proposal(root, p)
  local chat = require("oi.chat")
  chat.code_block(root, p.language, p.code)
  chat.shown(root, p.code)
  if p.risk and p.risk.level ~= "low" then -- the server's risk check: always shown
    chat.put(root, ("**risk: %s** (%s)"):format(p.risk.level, table.concat(p.risk.reasons, "; ")))
  end
  if p.autoRun then
    chat.put(root, "_(auto-run)_")
    return
  end
  if p.sandboxBlocked then -- it ran confined and was blocked: only the user lets it out, once
    chat.put(root, "[o]utside the sandbox, once (a fresh process, without the REPL's variables)  [s]kip")
  else
    chat.put(root, choices(p))
  end
  pending[root] = { proposal = p, mark = chat.mark_last(root) }
  map(root, p.sandboxBlocked and BLOCKED_KEYS or KEYS)
  if require("oi").config.notify_hidden and not chat.visible(root) then
    vim.notify(("oi: the model wants to run %s code (:OIChat to answer)"):format(p.language),
      vim.log.levels.WARN)
  end
end

--- Forget the pending proposal of `root` (of turn `turn_id` only, when given): its turn ended.
function M.clear(root, turn_id)
  local entry = pending[root]
  if entry and (turn_id == nil or entry.proposal.turnId == turn_id) then
    pending[root] = nil
    unmap(root)
    require("oi.chat").set_marked(root, entry.mark, "_(not answered)_")
  end
end

function M.pending(root) return pending[root] and pending[root].proposal end

--- oi/answered (the shared daemon): another client answered this proposal first.
function M.answered(root, p)
  local entry = pending[root]
  if entry and entry.proposal.proposalId == p.proposalId then
    pending[root] = nil
    unmap(root)
    require("oi.chat").set_marked(root, entry.mark, ("_→ answered in another client: %s_"):format(p.decision))
  end
end

local function answer(root, decision, code, proposal_id)
  local entry = pending[root]
  if not entry or (proposal_id and entry.proposal.proposalId ~= proposal_id) then
    vim.notify("oi: no proposal is waiting", vim.log.levels.WARN)
    return false
  end
  pending[root] = nil
  unmap(root)
  local chat = require("oi.chat")
  chat.set_marked(root, entry.mark, ({ run = "_→ run_", skip = "_→ skipped_", edit = "_→ edited_",
    outside = "_→ run outside the sandbox_" })[decision])
  if decision ~= "run" then chat.shown(root, nil) end
  require("oi.client").request(root, "oi/approve",
    { proposalId = entry.proposal.proposalId, decision = decision, code = code })
  return true
end

function M.run(root) answer(root, "run") end
function M.skip(root) answer(root, "skip") end
function M.outside(root) answer(root, "outside") end

--- Open the code in a scratch buffer with the language's filetype; :w sends it as the edit.
function M.edit(root)
  local entry = pending[root]
  if not entry then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  local p = entry.proposal
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, ("oi://edit/%s.%s"):format(p.proposalId, p.language))
  vim.bo[buf].buftype = "acwrite"
  vim.bo[buf].bufhidden = "wipe"
  vim.b[buf].oi_root = root
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split((p.code:gsub("\n+$", "")), "\n", { plain = true }))
  vim.bo[buf].modified = false
  vim.cmd("belowright split")
  vim.api.nvim_win_set_buf(0, buf)
  vim.bo[buf].filetype = M.filetype(p.language)
  vim.api.nvim_create_autocmd("BufWriteCmd", { buffer = buf, callback = function()
    local code = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    vim.bo[buf].modified = false
    if answer(root, "edit", code, p.proposalId) then
      vim.schedule(function()
        if vim.api.nvim_buf_is_valid(buf) then vim.api.nvim_buf_delete(buf, { force = true }) end
      end)
    end
  end })
end

--- Run this proposal, and have the server save a rule (in the workspace's .oi/profile.yaml)
--- that runs this command (its first word, else this exact code) without asking from now on.
function M.command(root)
  local entry = pending[root]
  if not entry then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  local p = entry.proposal
  local what = p.command and ("`%s` commands"):format(p.command) or "this exact code"
  if vim.fn.confirm(("Always run %s in this workspace without asking?"):format(what),
      "&Yes\n&No", 2) ~= 1 then
    return
  end
  pending[root] = nil
  unmap(root)
  local chat = require("oi.chat")
  chat.set_marked(root, entry.mark, "_→ run, and always " .. what .. "_")
  require("oi.client").request(root, "oi/approve",
    { proposalId = p.proposalId, decision = "run", always = "command" },
    function(res)
      vim.notify(("oi: %s now run without asking here (rule saved in %s)"):format(what, res.file))
    end,
    function(err) -- refused (an untrusted workspace): nothing ran, the proposal still waits
      chat.error(root, "oi/approve: " .. (err.message or vim.inspect(err)))
      if pending[root] == nil then
        chat.put(root, choices(p))
        pending[root] = { proposal = p, mark = chat.mark_last(root) }
        map(root, KEYS)
      end
    end)
end

--- Turn auto-run on for this workspace (after a confirmation) and run this proposal.
function M.always(root)
  if not pending[root] then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  if vim.fn.confirm("Run every proposal of this workspace without asking?", "&Yes\n&No", 2) ~= 1 then
    return
  end
  require("oi.client").request(root, "oi/configure", { autoRun = true }, function(res)
    if res.settings and res.settings.autoRun then
      vim.notify("oi: auto-run is on for " .. root)
    else
      vim.notify("oi: auto-run stays off (the workspace is not trusted)", vim.log.levels.WARN)
    end
  end)
  answer(root, "run")
end

return M
