-- Helpers for tests/test_plain_clients.py: stock Neovim (`nvim --clean`, no plugin), oi-lsp
-- started with vim.lsp.start as the README says. Scenarios run with `nvim --clean -l`.
local T = {}

T.root = vim.fs.normalize(vim.fn.getcwd())
T.notes = {} -- every vim.notify (window/showMessage lands here): { msg, level }
T.progress = {} -- every LspProgress: the $/progress value
T.selects = {} -- every vim.ui.select: { prompt, kind, items }
T.pick = {} -- kind ("codeaction", "lsp_message") -> function(items) -> the item to choose

vim.notify = function(msg, level)
  table.insert(T.notes, { msg = msg, level = level or vim.log.levels.INFO })
end

-- What a picker plugin (telescope, fzf-lua, mini.pick) replaces: Neovim's own handlers call it.
vim.ui.select = function(items, opts, on_choice)
  local titles = {}
  for _, item in ipairs(items) do
    table.insert(titles, opts.format_item and opts.format_item(item) or tostring(item))
  end
  table.insert(T.selects, { prompt = opts.prompt, kind = opts.kind, items = titles })
  local pick = T.pick[opts.kind or ""]
  local choice, index = nil, nil
  if pick then
    index = pick(titles)
    choice = index and items[index]
  end
  on_choice(choice, index)
end

vim.api.nvim_create_autocmd("LspProgress", {
  callback = function(ev) table.insert(T.progress, ev.data.params.value) end,
})

--- Start oi-lsp for the current buffer, as the README's plain-Neovim snippet does.
function T.start(settings)
  T.client_id = vim.lsp.start({
    name = "oi-lsp",
    cmd = { os.getenv("OI_LSP") },
    root_dir = T.root,
    init_options = settings,
  })
  T.wait(function()
    local c = vim.lsp.get_client_by_id(T.client_id)
    return c and c.initialized
  end, "the server to start")
  return vim.lsp.get_client_by_id(T.client_id)
end

function T.wait(pred, what, timeout)
  if not vim.wait(timeout or 60000, pred, 20) then
    error(("timed out waiting for %s"):format(what), 2)
  end
end

--- The index of the first title holding `needle`.
function T.find(needle)
  return function(titles)
    for i, t in ipairs(titles) do
      if t:find(needle, 1, true) then return i end
    end
  end
end

function T.progress_kinds()
  local kinds = {}
  for _, v in ipairs(T.progress) do table.insert(kinds, v.kind) end
  return kinds
end

function T.ended()
  for _, v in ipairs(T.progress) do if v.kind == "end" then return v end end
end

--- The buffer of an opened transcript (window/showDocument), if one is shown in a window.
function T.transcript_buffer()
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local buf = vim.api.nvim_win_get_buf(win)
    if vim.api.nvim_buf_get_name(buf):match("/transcripts/.*%.md$") then return buf end
  end
end

function T.run(fn)
  local ok, res = xpcall(fn, debug.traceback)
  local out = { ok = ok, notes = T.notes, progress = T.progress, selects = T.selects }
  if ok then out.result = res else out.error = res end
  local f = assert(io.open(os.getenv("OI_TEST_OUT"), "w"))
  f:write(vim.json.encode(out))
  f:close()
  if T.client_id then
    vim.lsp.stop_client(T.client_id)
    vim.wait(20000, function() return vim.lsp.get_client_by_id(T.client_id) == nil end, 50)
  end
  if not ok then os.exit(1) end
end

return T
