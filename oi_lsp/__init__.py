"""oi-lsp: Open Interpreter as a language server."""

__version__ = "0.1.0"
