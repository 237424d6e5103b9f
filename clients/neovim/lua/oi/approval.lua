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

-- The answer keys live in the transcript and in the prompt area.
local function buffers(root)
  local chat = require("oi.chat")
  return { chat.buffer(root), chat.prompt_buffer(root) }
end

local function unmap(root)
  for _, buf in ipairs(buffers(root)) do
    for key in pairs(KEYS) do pcall(vim.keymap.del, "n", key, { buffer = buf }) end
    pcall(vim.keymap.del, "n", "o", { buffer = buf })
  end
  require("oi.pending").close(root)
end

-- The answers; [c] names the command an "always" rule would allow (else the exact code).
local function choices(p)
  local always = p.command and ("[c] always `%s`"):format(p.command) or "[c] always this code"
  return ("[r]un  [s]kip  [e]dit  %s  [a]lways"):format(always)
end

local function map(root, keys)
  local chat = require("oi.chat")
  for _, buf in ipairs(buffers(root)) do
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
  if not chat.visible(root) then
    require("oi.pending").show(root, p)
    if require("oi").config.notify_hidden then
      vim.notify(("oi: the model wants to run %s code (:OIApprove run|skip|edit, or :OIChat)")
        :format(p.language), vim.log.levels.WARN)
    end
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

-- The waiting proposal, taken off the chat's keys and marked with the answer (nil, after a
-- warning, when none waits or another one does).
local function take(root, decision, proposal_id)
  local entry = pending[root]
  if not entry or (proposal_id and entry.proposal.proposalId ~= proposal_id) then
    vim.notify("oi: no proposal is waiting", vim.log.levels.WARN)
    return nil
  end
  pending[root] = nil
  unmap(root)
  local chat = require("oi.chat")
  chat.set_marked(root, entry.mark, ({ run = "_→ run_", skip = "_→ skipped_", edit = "_→ edited_",
    outside = "_→ run outside the sandbox_" })[decision])
  if decision ~= "run" then chat.shown(root, nil) end
  return entry
end

local function send(root, entry, decision, code)
  require("oi.client").request(root, "oi/approve",
    { proposalId = entry.proposal.proposalId, decision = decision, code = code })
end

local function answer(root, decision, code, proposal_id)
  local entry = take(root, decision, proposal_id)
  if not entry then return false end
  send(root, entry, decision, code)
  return true
end

--- :OIApprove run|skip|edit (and the <Plug>(oi-approve-...) maps): the pending proposal of
--- this workspace, else the only one waiting anywhere.
function M.approve(root, decision)
  if not pending[root] then
    local roots = vim.tbl_keys(pending)
    if #roots == 1 then root = roots[1] end
  end
  if not pending[root] then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  if decision == "run" and pending[root].proposal.sandboxBlocked then decision = "outside" end
  local act = ({ run = M.run, skip = M.skip, edit = M.edit, outside = M.outside })[decision]
  if not act then
    return vim.notify("oi: usage: :OIApprove run|skip|edit", vim.log.levels.ERROR)
  end
  act(root)
end

function M.run(root) answer(root, "run") end
function M.skip(root) answer(root, "skip") end
function M.outside(root) answer(root, "outside") end

-- The window the edit goes in: over the chat when it is a float (a split would open behind
-- it), else a split below the chat (or below the current window when the chat is hidden).
local function edit_window(root, buf, height)
  local chat_win = vim.fn.bufwinid(require("oi.chat").buffer(root))
  local cfg = chat_win ~= -1 and vim.api.nvim_win_get_config(chat_win) or nil
  local win
  if cfg and cfg.relative ~= "" then
    win = vim.api.nvim_open_win(buf, true, { relative = "editor", width = cfg.width,
      height = cfg.height, row = cfg.row, col = cfg.col, border = "rounded",
      title = " edit the code ", zindex = (cfg.zindex or 50) + 10 })
  else
    win = vim.api.nvim_open_win(buf, true, { split = "below",
      win = chat_win ~= -1 and chat_win or 0, height = height })
  end
  vim.wo[win].winbar = "%#WarningMsg# :w runs · :q cancels %*"
  return win
end

--- Open the code in a scratch buffer with the language's filetype; :w sends it as the edit
--- (unchanged, as a plain run), :q cancels (the proposal still waits).
function M.edit(root)
  local entry = pending[root]
  if not entry then return vim.notify("oi: no proposal is waiting", vim.log.levels.WARN) end
  local p = entry.proposal
  local from = vim.api.nvim_get_current_win()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, ("oi://edit/%s.%s"):format(p.proposalId, p.language))
  vim.bo[buf].buftype = "acwrite"
  vim.bo[buf].bufhidden = "wipe"
  vim.b[buf].oi_root = root
  local original = (p.code:gsub("\n+$", ""))
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(original, "\n", { plain = true }))
  vim.bo[buf].modified = false
  local win = edit_window(root, buf, math.max(6, math.min(vim.api.nvim_buf_line_count(buf) + 1, 20)))
  vim.bo[buf].filetype = M.filetype(p.language)
  -- :q cancels even after changes: the buffer never counts as modified
  vim.api.nvim_create_autocmd("QuitPre", { buffer = buf,
    callback = function() vim.bo[buf].modified = false end })
  vim.api.nvim_create_autocmd("WinClosed", { pattern = tostring(win), once = true,
    callback = function()
      vim.schedule(function()
        if vim.api.nvim_win_is_valid(from) then vim.api.nvim_set_current_win(from) end
      end)
    end })
  vim.api.nvim_create_autocmd("BufWriteCmd", { buffer = buf, callback = function()
    local code = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    vim.bo[buf].modified = false
    local unchanged = vim.trim(code) == vim.trim(original)
    local sent
    if unchanged then sent = answer(root, "run", nil, p.proposalId)
    else sent = answer(root, "edit", code, p.proposalId) end
    if sent then
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
  local entry = take(root, "run")
  if not entry then return end
  -- The run goes once the settings have changed, so it runs as auto-run does (in its sandbox),
  -- not in the REPL the change then restarts.
  require("oi.client").request(root, "oi/configure", { autoRun = true }, function(res)
    if res.settings and res.settings.autoRun then
      vim.notify("oi: auto-run is on for " .. root)
    else
      vim.notify("oi: auto-run stays off (the workspace is not trusted)", vim.log.levels.WARN)
    end
    send(root, entry, "run")
  end, function(err) -- the setting failed; this proposal was still answered "run"
    require("oi.chat").error(root, "oi/configure: " .. (err.message or vim.inspect(err)))
    send(root, entry, "run")
  end)
end

return M
