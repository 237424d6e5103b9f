"""Issue 35: what a 40-step session costs with Anthropic prompt caching and without it.

Each side is a fresh oi-lsp process of its own against the scripted Anthropic Messages server
(tests/providers/anthropic.py), which bills cache reads and writes from the request's
`cache_control` breakpoints as Anthropic does. The cost is the session's, as oi-lsp reports it
(oi/turn `sessionCost`): litellm's price table for claude-sonnet-4-5, cached tokens at their own
price. A step is one model call: each turn a run (auto-run) and an answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests import modelserver as ms
from tests.providers.anthropic import AnthropicServer

from .driver import Server

STEPS = 40


async def session_cost(data: Path, workspace: Path, caching: bool,
                       steps: int = STEPS) -> dict[str, Any]:
    """The last turn's usage (its sessionCost) and the session's cached tokens."""
    model = AnthropicServer().start()
    server = Server(data)
    cached = 0
    usage: dict[str, Any] = {}
    try:
        await server.start()
        await server.initialize([workspace], model.settings(
            autoRun=True, sandbox="off", promptCaching=caching, contextWindow=200_000))
        for turn in range(steps // 2):
            model.script(ms.tool("python", f"print('step {turn}: ' + 'x' * 400)",
                                 say=f"Step {turn}."),
                         ms.text(f"Step {turn} printed its line. " + "Noted. " * 40))
            since = len(server.client.notifications)
            result = await server.client.chat(f"turn {turn}: run the next step")
            if result["status"] != "done":
                raise RuntimeError(f"caching bench turn {turn} ended {result}")
            usage = next(p for m, p in server.client.notifications[since:]
                         if m == "oi/turn" and p["status"] != "running").get("usage") or {}
            cached += int(usage.get("cachedTokens") or 0)
    finally:
        await server.close()
        model.stop()
    return {**usage, "sessionCached": cached}
