"""Images attached to the next message (for `oi-lsp chat`: --attach PATH, or `%attach PATH` at
the prompt): sent as oi/chat `attachments`, by file URI; the server reads and checks them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COMMAND = "%attach"
TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
         ".webp": "image/webp"}


def attachment(path: str) -> dict[str, Any]:
    """The attachment of an image file; ValueError (saying why) for what cannot be one."""
    from ..client import to_uri  # pygls: not loaded before the chat starts its client

    file = Path(path.strip()).expanduser()
    mime = TYPES.get(file.suffix.lower())
    if mime is None:
        raise ValueError(f"{path}: only images can be attached ({', '.join(sorted(TYPES))})")
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    return {"uri": to_uri(file), "mimeType": mime}


def is_command(line: str) -> bool:
    return line == COMMAND or line.startswith(COMMAND + " ")
