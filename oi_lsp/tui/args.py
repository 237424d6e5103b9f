"""The `oi-lsp chat` command line: built at every `oi-lsp` start, so it loads nothing of the
terminal client (the server never runs it)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", nargs="*",
                        help="a first message; with no terminal on stdin, the only one (read "
                             "from stdin when not given)")
    parser.add_argument("-y", "--auto-run", action="store_true",
                        help="run the model's code without asking")
    parser.add_argument("--model", help="litellm model, e.g. gpt-4o-mini or ollama_chat/llama3.1 "
                                        "(default: $OI_MODEL)")
    parser.add_argument("--api-base", help="base URL of the model API (default: $OI_API_BASE)")
    parser.add_argument("--api-key", help="API key of the model API (default: $OI_API_KEY or "
                                          "the provider's variable, e.g. $OPENAI_API_KEY)")
    parser.add_argument("--profile", help="a settings profile of the server, by name")
    parser.add_argument("--workspace", default=".", metavar="DIR",
                        help="the folder whose conversation and REPLs to use (default: here)")
    parser.add_argument("--attach", action="append", default=[], metavar="IMAGE",
                        help="attach an image file to the first message (repeatable); at the "
                             "prompt, %%attach IMAGE attaches one to the next message")
    parser.add_argument("--standalone", action="store_true",
                        help="a server of its own, as a child (default: the user's shared "
                             "daemon, so an editor on this folder shares the conversation)")
    parser.add_argument("--exec", nargs=2, metavar=("LANG", "CODE"),
                        help="run CODE in the workspace's LANG REPL, print its output, exit")
