-- A running program asks for input (oi/input): vim.ui.input for a line (an asynchronous
-- vim.ui.input, as dressing.nvim's, is waited for), inputsecret() for a password. When the run
-- ends first (a stop, a timeout), the server cancels the request and the box closes.
local M = {}

-- The box open now, if any: the request's handler waits for it, so there is one at a time.
---@type { sync: boolean, win: integer?, finish: fun()? }?
local open = nil

--- The line typed, or nil when the user cancelled (or the server did).
function M.ask(params)
  local prompt = (params.prompt ~= nil and params.prompt ~= "") and params.prompt or "input: "
  if not prompt:match("%s$") then prompt = prompt .. " " end
  local box = { sync = true }
  open = box
  if params.password then
    local ok, value = pcall(vim.fn.inputsecret, prompt)
    open = nil
    if not ok then return nil end  -- interrupted (Ctrl-C)
    return value
  end
  local done, value = false, nil
  local before = vim.api.nvim_get_current_win()
  local ok = pcall(vim.ui.input, { prompt = prompt }, function(input)
    done, value = true, input
  end)
  if ok and not done then
    -- An asynchronous vim.ui.input left its box open: a float it entered, as dressing's.
    local win = vim.api.nvim_get_current_win()
    box.sync = false
    box.win = (win ~= before and vim.api.nvim_win_get_config(win).relative ~= "") and win or nil
    box.finish = function() done, value = true, nil end
    -- The answer is the request's result: wait for it, letting the event loop run meanwhile.
    vim.wait(24 * 3600 * 1000, function() return done end, 50)
  end
  if open == box then open = nil end
  if not ok then return nil end
  return value
end

--- The server no longer wants the answer ($/cancelRequest: the run ended): close the box.
function M.cancel()
  local box = open
  if not box then return end
  open = nil
  if box.sync then
    -- input() and inputsecret() end on Ctrl-C, as when the user presses it.
    vim.api.nvim_feedkeys(vim.keycode("<C-c>"), "n", false)
    return
  end
  if box.win and vim.api.nvim_win_is_valid(box.win) then
    local in_box = vim.api.nvim_get_current_win() == box.win
    pcall(vim.api.nvim_win_close, box.win, true)
    if in_box then vim.cmd.stopinsert() end
  end
  box.finish()
end

return M
