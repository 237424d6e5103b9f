-- The prompt area of a chat: a small buffer of its own below the transcript. <CR> in normal
-- mode or <C-s> sends what it holds.
local M = {}

M.HINT = " <CR>/<C-s> sends · :OIStop · :OIApprove"
M.HEIGHT = 3

local function send(st)
  local text = vim.trim(table.concat(vim.api.nvim_buf_get_lines(st.prompt, 0, -1, false), "\n"))
  if text == "" then return end
  vim.api.nvim_buf_set_lines(st.prompt, 0, -1, false, { "" })
  require("oi.commands").send(st.root, text)
end

--- The prompt buffer of chat `st`, made on first use.
function M.buffer(st)
  if st.prompt and vim.api.nvim_buf_is_valid(st.prompt) then return st.prompt end
  local buf = vim.api.nvim_create_buf(false, true)
  pcall(vim.api.nvim_buf_set_name, buf, "oi://prompt" .. st.root)
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].filetype = "markdown"
  vim.b[buf].oi_root = st.root
  st.prompt = buf
  local o = { buffer = buf, nowait = true, silent = true, desc = "oi: send" }
  vim.keymap.set("n", "<CR>", function() send(st) end, o)
  vim.keymap.set({ "n", "i" }, "<C-s>", function() vim.cmd.stopinsert(); send(st) end, o)
  return buf
end

--- Whether the user is typing: the cursor is in the prompt and it holds text.
function M.typing(st)
  if not st.prompt or vim.api.nvim_get_current_buf() ~= st.prompt then return false end
  return vim.trim(table.concat(vim.api.nvim_buf_get_lines(st.prompt, 0, -1, false), "\n")) ~= ""
end

--- Open the prompt's window below the chat window `chat_win` (a float below a float).
function M.open(st, chat_win)
  local buf = M.buffer(st)
  local win = vim.fn.bufwinid(buf)
  if win ~= -1 then return win end
  local cfg = vim.api.nvim_win_get_config(chat_win)
  if cfg.relative ~= "" then
    win = vim.api.nvim_open_win(buf, false, { relative = "editor", width = cfg.width,
      height = M.HEIGHT, row = cfg.row + cfg.height + 2, col = cfg.col, border = "rounded",
      title = " message ", zindex = cfg.zindex })
  else
    win = vim.api.nvim_open_win(buf, false, { split = "below", win = chat_win, height = M.HEIGHT })
    vim.wo[win].winfixheight = true
  end
  vim.wo[win].winbar = M.HINT
  vim.wo[win].statusline = require("oi.chat").STATUSLINE
  vim.wo[win].wrap = true
  return win
end

return M
