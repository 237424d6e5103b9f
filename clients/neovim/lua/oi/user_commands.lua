-- The user commands and <Plug> mappings: defined by plugin/oi.lua at startup, or by setup()
-- when a plugin manager put the plugin on 'runtimepath' too late for plugin/ to be sourced
-- (lazy.nvim's config appending clients/neovim). require() runs this once.

local function cmd(name) return function(o) require("oi.commands")[name](o) end end
local c = vim.api.nvim_create_user_command
c("OIChat", cmd("chat"), { nargs = "*", desc = "oi: open the chat, optionally send a message" })
c("OIAttach", cmd("attach"), { nargs = 1, complete = "file",
  desc = "oi: attach an image file to the next message" })
c("OIRun", cmd("run"), { nargs = "*", range = true, desc = "oi: instruction with the selection as context" })
c("OIExec", cmd("exec"), { range = true, desc = "oi: run the lines in the workspace REPL" })
c("OIStop", cmd("stop"), { desc = "oi: stop the running turn and runs" })
c("OIReset", cmd("reset"), { desc = "oi: clear the conversation and restart the REPLs" })
c("OIHistory", cmd("history"), { desc = "oi: reload the saved conversation" })
c("OIEarlier", cmd("earlier"), { desc = "oi: show the chat's earlier messages (a page more)" })
c("OIAutoRun", cmd("autorun"), { nargs = 1, complete = function() return { "on", "off" } end,
  desc = "oi: run proposals without asking (on|off)" })
c("OIModel", cmd("model"), { nargs = "?",
  desc = "oi: set the model of this workspace (no name: a picker of local models and profiles)" })
c("OIConversations", cmd("conversations"), { nargs = "*",
  desc = "oi: the saved conversations (those with the words given): open, new, export" })
c("OIKey", cmd("key"), { desc = "oi: enter the API key for this session (typed hidden)" })
c("OIApprove", function(o) require("oi.approval").approve(require("oi.client").root(0), o.args) end,
  { nargs = 1, complete = function() return { "run", "skip", "edit" } end,
    desc = "oi: answer the waiting proposal (run|skip|edit)" })

local p = vim.keymap.set
p("n", "<Plug>(oi-chat)", "<Cmd>OIChat<CR>", { desc = "oi: chat" })
p("n", "<Plug>(oi-run)", "<Cmd>OIRun<CR>", { desc = "oi: instruction on the current line" })
p("x", "<Plug>(oi-run)", ":OIRun<CR>", { silent = true, desc = "oi: instruction on the selection" })
p("n", "<Plug>(oi-exec)", "<Cmd>OIExec<CR>", { desc = "oi: run the current line" })
p("x", "<Plug>(oi-exec)", ":OIExec<CR>", { silent = true, desc = "oi: run the selection" })
p("n", "<Plug>(oi-stop)", "<Cmd>OIStop<CR>", { desc = "oi: stop" })
for _, d in ipairs({ "run", "skip", "edit" }) do
  p("n", ("<Plug>(oi-approve-%s)"):format(d), ("<Cmd>OIApprove %s<CR>"):format(d),
    { desc = "oi: " .. d .. " the waiting proposal" })
end
