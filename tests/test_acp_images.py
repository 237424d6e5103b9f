"""`oi-lsp acp` takes image blocks in a prompt as attachments (it says so: promptCapabilities
.image), and refuses one that is no image."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from acp import RequestError, image_block, text_block
from PIL import Image

from tests import modelserver as ms
from tests.conftest import trust_folder
from tests.modelserver import ModelServer
from tests.test_acp import Recorder, agent


def png() -> str:
    out = io.BytesIO()
    Image.new("RGB", (16, 9), (0, 200, 0)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


async def test_prompt_images_reach_the_model(model: ModelServer, data_dir: Path,
                                             workspace: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("vision: true\n")
    trust_folder(workspace, data_dir)  # ACP has no question to ask it with
    async with agent(model, data_dir, Recorder()) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.text("A green image."))
        done = await conn.prompt(session_id=session.session_id,
                                 prompt=[text_block("what is it?"),
                                         image_block(png(), "image/png")])
        assert done.stop_reason == "end_turn"
        last = model.requests[0]["messages"][-1]
        assert [p["type"] for p in last["content"]] == ["text", "image_url"]
        with pytest.raises(RequestError) as raised:
            await conn.prompt(session_id=session.session_id,
                              prompt=[text_block("and this?"),
                                      image_block(base64.b64encode(b"text").decode(),
                                                  "image/png")])
        assert raised.value.code == -32602 and "not a image/png image" in str(raised.value.data)


async def test_an_image_alone_is_a_prompt(model: ModelServer, data_dir: Path,
                                          workspace: Path) -> None:
    (workspace / ".oi").mkdir()
    (workspace / ".oi" / "profile.yaml").write_text("vision: true\n")
    trust_folder(workspace, data_dir)
    async with agent(model, data_dir, Recorder()) as conn:
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        model.script(ms.text("A green image."))
        done = await conn.prompt(session_id=session.session_id,
                                 prompt=[image_block(png(), "image/png")])
        assert done.stop_reason == "end_turn"
        last = model.requests[0]["messages"][-1]
        assert last["role"] == "user"
        assert [p["type"] for p in last["content"]] == ["image_url"]  # no empty text part
        with pytest.raises(RequestError) as raised:  # nothing at all is still refused
            await conn.prompt(session_id=session.session_id, prompt=[text_block("  ")])
        assert raised.value.code == -32602
        assert "no attachments" in str(raised.value.data)
        assert len(model.requests) == 1
