-- User commands and <Plug> mappings only (lua/oi/user_commands.lua); the rest loads on first use.
if vim.g.loaded_oi then return end
vim.g.loaded_oi = true
require("oi.user_commands")
