-- Proposals: shown in the chat with [r]un [s]kip [e]dit [a]lways, answered with oi/approve.
local M = {}

local pending = {} -- root -> { proposal, row }
local KEYS = { r = "run", s = "skip", e = "edit", a = "always" }

local function unmap(root)
  local buf = require("oi.chat").buffer(root)
  for key in pairs(KEYS) do pcall(vim.keymap.del, "n", key, { buffer = buf }) end
end

function M.on_proposal(root, p)
  local chat = require("oi.chat")
  chat.gap(root)
  chat.put(root, chat.fence(p.language, p.code))
  chat.shown(root, p.code)
  if p.risk and p.risk.level ~= "low" then -- the server's risk check: always shown
    chat.put(root, ("**risk: %s** (%s)"):format(p.risk.level, table.concat(p.risk.reasons, "; ")))
  end
  if p.autoRun then
    chat.put(root, "_(auto-run)_")
    return
  end
  chat.put(root, "[r]un  [s]kip  [e]dit  [a]lways")
  pending[root] = { proposal = p, row = chat.last_row(root) }
  local buf = chat.buffer(root)
  for key, action in pairs(KEYS) do
    vim.keymap.set("n", key, function() M[action](root) end,
      { buffer = buf, nowait = true, desc = "oi: " .. action .. " the proposal" })
  end
  if require("oi").config.notify_hidden and not chat.visible(root) then
    vim.notify(("oi: the model wants to run %s code (:OIChat to answer)"):format(p.language),
      vim.log.levels.WARN)
  end
end

--- Forget the pending proposal (the turn ended or was stopped).
function M.clear(root)
  if pending[root] then
    pending[root] = nil
    unmap(root)
  end
end

function M.pending(root) return pending[root] and pending[root].proposal end

local function answer(root, decision, code)
  local entry = pending[root]
  if not entry then
    vim.notify("oi: no proposal is waiting", vim.log.levels.WARN)
    return
  end
  M.clear(root)
  local chat = require("oi.chat")
  chat.set_line(root, entry.row, ({ run = "→ run", skip = "→ skipped", edit = "→ edited" })[decision])
  if decision ~= "run" then chat.shown(root, nil) end
  require("oi.client").request(root, "oi/approve",
    { proposalId = entry.proposal.proposalId, decision = decision, code = code })
end

function M.run(root) answer(root, "run") end
function M.skip(root) answer(root, "skip") end

--- Open the code in a scratch buffer; :w sends it as the edited code.
function M.edit(root)
  local entry = pending[root]
  if not entry then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  local p = entry.proposal
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, ("oi://edit/%s"):format(p.proposalId))
  vim.bo[buf].buftype = "acwrite"
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split((p.code:gsub("\n+$", "")), "\n", { plain = true }))
  vim.bo[buf].modified = false
  vim.cmd("belowright split")
  vim.api.nvim_win_set_buf(0, buf)
  vim.bo[buf].filetype = vim.filetype.match({ filename = "x." .. p.language }) or p.language
  vim.api.nvim_create_autocmd("BufWriteCmd", { buffer = buf, callback = function()
    local code = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    vim.bo[buf].modified = false
    answer(root, "edit", code)
    vim.schedule(function()
      if vim.api.nvim_buf_is_valid(buf) then vim.api.nvim_buf_delete(buf, { force = true }) end
    end)
  end })
end

--- Turn auto-run on for this workspace (after a confirmation) and run this proposal.
function M.always(root)
  if not pending[root] then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  if vim.fn.confirm("Run every proposal in this workspace without asking?", "&Yes\n&No", 2) ~= 1 then
    return
  end
  require("oi.client").request(root, "oi/configure", { autoRun = true }, function()
    vim.notify("oi: auto-run is on for " .. root)
  end)
  answer(root, "run")
end

return M
