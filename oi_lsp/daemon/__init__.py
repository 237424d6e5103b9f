"""The per-user oi-lsp daemon and the thin stdio relay that editors start (issue 25)."""
