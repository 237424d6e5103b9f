"""Vision: the images a run displays reach the model (setting `vision`), shrunk; images the user
attaches to a message reach it too; old images are the first thing left out of a full window."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient, to_uri
from oi_lsp.core import context_window, vision
from oi_lsp.core.llm import warm_up
from oi_lsp.core.settings import Settings
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal
from tests.modelserver import ModelServer


def png(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def image_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for m in body["messages"] if isinstance(m.get("content"), list)
            for p in m["content"] if p.get("type") == "image_url"]


def size_of(part: dict[str, Any]) -> tuple[int, int]:
    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def show(data: bytes, times: int = 1) -> str:
    """Python that displays the PNG `times` times."""
    return ("import base64\nfrom IPython.display import Image, display\n"
            f"for _ in range({times}):\n"
            f"    display(Image(data=base64.b64decode({base64.b64encode(data).decode()!r})))\n"
            "print('shown')")


async def run_turn(client: OIClient, model: ModelServer, code: str) -> None:
    model.script(ms.tool("python", code), ms.text("I see it."))
    chat = asyncio.create_task(client.chat("plot it"))
    await client.approve((await next_proposal(client))["proposalId"], "run")
    assert (await chat)["status"] == "done"


@pytest.mark.parametrize("on", [True, False])
async def test_displayed_png_reaches_the_model(start_server: StartServer, workspace: Path,
                                               model: ModelServer, on: bool) -> None:
    client = await start_server(workspace, options=model.settings(vision=on, contextWindow=128000))
    await run_turn(client, model, show(png(2400, 1200), times=5))
    body = model.requests[1]
    parts = image_parts(body)
    if not on:
        assert parts == []
        return
    assert len(parts) == vision.PER_RUN  # at most a few of one run
    assert max(size_of(parts[0])) <= vision.MAX_SIDE  # shrunk
    roles = [m["role"] for m in body["messages"]]
    # After the tool result, in a user message of their own: providers take no images there.
    assert roles[-2:] == ["tool", "user"]
    assert body["messages"][-1]["content"][0]["text"] == vision.IMAGES_NOTE


@pytest.mark.parametrize(("model_name", "sees"), [("openai/gpt-4o", True),
                                                 ("openai/scripted", False)])
async def test_vision_auto_follows_litellm(start_server: StartServer, workspace: Path,
                                           model: ModelServer, model_name: str,
                                           sees: bool) -> None:
    """auto: images for a model litellm says takes them (the scripted server answers under
    any name); none for a model litellm does not know."""
    client = await start_server(workspace, options=model.settings(model=model_name))
    await run_turn(client, model, show(png(40, 30)))
    assert len(image_parts(model.requests[1])) == (1 if sees else 0)


async def test_attachments_reach_the_model(start_server: StartServer, workspace: Path,
                                           model: ModelServer, tmp_path: Path) -> None:
    client = await start_server(workspace,
                                options=model.settings(vision=True, contextWindow=128000))
    picture = tmp_path / "photo.png"
    await asyncio.to_thread(picture.write_bytes, png(30, 20, (0, 0, 250)))
    model.script(ms.text("Two images."))
    result = await client.chat("what are these?", attachments=[
        {"data": base64.b64encode(png(50, 40)).decode(), "mimeType": "image/png"},
        {"uri": to_uri(picture), "mimeType": "image/png"}])
    assert result["status"] == "done"
    last = model.requests[0]["messages"][-1]
    assert last["role"] == "user" and last["content"][0] == {"type": "text",
                                                             "text": "what are these?"}
    parts = image_parts(model.requests[0])
    assert [size_of(p) for p in parts] == [(50, 40), (30, 20)]


@pytest.mark.parametrize(("attachment", "said"), [
    ({"data": base64.b64encode(b"not an image").decode(), "mimeType": "image/png"},
     "not a image/png image"),
    ({"data": "%%%", "mimeType": "image/png"}, "not base64"),
    ({"uri": "file:///nonexistent/x.png", "mimeType": "image/png"}, "cannot read"),
    ({"data": "AAAA", "mimeType": "text/plain"}, "only images"),
    ({"mimeType": "image/png"}, "either `uri` or `data`"),
])
async def test_bad_attachments_are_refused(client: OIClient, model: ModelServer,
                                           attachment: dict[str, Any], said: str) -> None:
    with pytest.raises(JsonRpcException) as caught:
        await client.chat("look", attachments=[attachment])
    assert said in str(caught.value)
    assert model.requests == []  # nothing was sent, nothing recorded


async def test_old_images_are_left_out_first() -> None:
    litellm = await warm_up()
    picture = vision.part("base64.png", base64.b64encode(png(800, 600)).decode())
    assert picture is not None

    def images() -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": vision.IMAGES_NOTE},
                                            picture, picture]}

    def call(n: int) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{n}", "type": "function",
            "function": {"name": "execute", "arguments": "{}"}}]}

    old_output = "x" * 3000
    messages = [{"role": "system", "content": "system"},
                {"role": "user", "content": "first"}, call(1),
                {"role": "tool", "tool_call_id": "c1", "content": old_output}, images(),
                {"role": "assistant", "content": "saw them"},
                {"role": "user", "content": "second"}, call(2),
                {"role": "tool", "tool_call_id": "c2", "content": "new"}, images()]
    settings = Settings(model="openai/scripted", context_window=3300, max_tokens=300)
    fitted = await asyncio.to_thread(context_window.fit, litellm, settings, messages)
    assert len(fitted) == len(messages)  # nothing dropped: leaving the old images out did it
    assert image_parts({"messages": fitted[:5]}) == []
    assert "left out" in fitted[4]["content"][-1]["text"]
    assert fitted[3]["content"] == old_output  # the old output stays whole
    assert len(image_parts({"messages": fitted[5:]})) == 2  # this turn's stay
