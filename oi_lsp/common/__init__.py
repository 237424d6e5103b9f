"""Small helpers every part of oi-lsp shares (files, URIs, keys, languages, pipes, the httpx
compat shim): leaves that import nothing of oi-lsp's own, so any package may use them."""
