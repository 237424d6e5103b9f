"""The Agent Client Protocol front end (`oi-lsp acp`): the same core as the LSP server, spoken
over ACP's stdio JSON-RPC. It never imports the LSP front end."""
