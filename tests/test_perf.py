"""Issue 24: what the server keeps out of memory. Nothing here is timed (timings belong to
bench/RESULTS.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from oi_lsp.client import OIClient
from oi_lsp.core import context_window, llm
from tests import modelserver as ms
from tests.modelserver import ModelServer

# Imported the first time litellm loads a tokenizer (~110 MiB for cl100k_base).
TOKENIZER = re.compile(rb"\|\s+(litellm\.litellm_core_utils\.default_encoding|tokenizers)$",
                       re.MULTILINE)


async def test_tokenizer_loads_only_near_the_window(model: ModelServer, data_dir: Path,
                                                    workspace: Path) -> None:
    client = OIClient()
    # -X importtime makes the interpreter report every import on stderr as it happens.
    await client.start([sys.executable, "-X", "importtime", "-m", "oi_lsp"],
                       env={"OI_LSP_DATA_DIR": str(data_dir)})
    try:
        await client.initialize([workspace], options=model.settings(autoRun=True))
        # A normal turn: text, a run, an answer; usage estimated without the tokenizer.
        model.script(ms.tool("python", "print(6 * 7)", say="let me see"), ms.text("it is 42"))
        result = await client.chat("what is 6 * 7?")
        assert result["status"] == "done"
        end = await client.wait_for("oi/turn", lambda p: p["turnId"] == result["turnId"]
                                    and p["status"] == "done")
        assert end["usage"]["calls"] == 2 and end["usage"]["promptTokens"] > 100
        assert b"| litellm\n" in client.stderr  # the check can see what the model loaded
        assert not TOKENIZER.search(client.stderr)

        # Near the window: the sent messages are counted with the tokenizer, exactly.
        await client.request("oi/configure", {"contextWindow": 3000, "maxTokens": 300})
        reply = "a long answer " * 20
        model.script(ms.text(reply))
        result = await client.chat("please read this: " + " ".join(
            f"word{i}" for i in range(1200)))
        assert result["status"] == "done"
        end = await client.wait_for("oi/turn", lambda p: p["turnId"] == result["turnId"]
                                    and p["status"] == "done")
        assert TOKENIZER.search(client.stderr)
        litellm = llm._import_litellm()
        sent = model.requests[-1]["messages"]
        assert end["usage"]["promptTokens"] == context_window.tokens(
            litellm, "openai/scripted", messages=sent)
        assert end["usage"]["completionTokens"] == context_window.tokens(
            litellm, "openai/scripted", text=reply)
    finally:
        await client.close()
