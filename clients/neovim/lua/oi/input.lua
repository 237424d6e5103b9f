-- A running program asks for input (oi/input): vim.ui.input for a line (an asynchronous
-- vim.ui.input, as dressing.nvim's, is waited for), inputsecret() for a password.
local M = {}

--- The line typed, or nil when the user cancelled.
function M.ask(params)
  local prompt = (params.prompt ~= nil and params.prompt ~= "") and params.prompt or "input: "
  if not prompt:match("%s$") then prompt = prompt .. " " end
  if params.password then
    local ok, value = pcall(vim.fn.inputsecret, prompt)
    if not ok then return nil end  -- interrupted (Ctrl-C)
    return value
  end
  local done, value = false, nil
  local ok = pcall(vim.ui.input, { prompt = prompt }, function(input)
    done, value = true, input
  end)
  if not ok then return nil end
  -- The answer is the request's result: wait for it, letting the event loop run meanwhile.
  vim.wait(24 * 3600 * 1000, function() return done end, 50)
  return value
end

return M
