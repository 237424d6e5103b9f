"""A saved conversation as ACP session updates, for session/load: what the user saw, again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp import (
    image_block,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)

from ..protocol import Message
from .calls import status_of, title
from .locations import named_files

_IMAGES = {"base64.png": "image/png", "base64.jpeg": "image/jpeg"}


def updates(messages: list[Message], folder: Path) -> list[Any]:
    """`folder`: the workspace's, where the files a run's code names are looked for."""
    out: list[Any] = []
    call: str | None = None  # the tool call the following output belongs to
    shown: list[Any] = []  # its content so far (an update replaces the whole content)
    for index, message in enumerate(messages):
        kind = (message.role, message.type)
        if kind == ("user", "message"):
            call = None
            out.append(update_user_message_text(message.content))
        elif kind == ("assistant", "message"):
            out.append(update_agent_message_text(message.content))
        elif kind == ("assistant", "reasoning") and message.content:
            out.append(update_agent_thought_text(message.content))
        elif message.type == "code" and message.role in ("assistant", "user"):
            call = f"{message.turn_id or 'run'}-{index}"
            language = message.format or ""
            shown = [tool_content(text_block(f"```{language}\n{message.content}\n```"))]
            out.append(start_tool_call(call, title(language, message.content), kind="execute",
                                       status=status_of(message.outcome), content=shown,
                                       locations=named_files(message.content, folder) or None))
        elif kind == ("computer", "console") and call is not None:
            shown = [*shown, tool_content(text_block(f"```\n{message.content}\n```"))]
            out.append(update_tool_call(call, content=shown))
        elif kind == ("computer", "image") and call is not None \
                and message.format in _IMAGES:
            shown = [*shown, tool_content(image_block(message.content, _IMAGES[message.format]))]
            out.append(update_tool_call(call, content=shown))
        elif kind == ("computer", "error"):
            out.append(update_agent_message_text(f"\n\n**oi-lsp:** {message.content}\n"))
    return out
