"""Images the user attaches to a message (oi/chat `attachments`): read (a file, in a thread) or
decoded, checked (size, that the bytes are the image type they claim), kept base64 as the
conversation keeps displayed images."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from ..common.uris import to_fs_path
from ..protocol import Attachment
from .aio import in_thread

MAX_BYTES = 10 * 1024 * 1024  # per image, before base64
# The first bytes of each type: an attachment must be what its mimeType says.
_MAGIC = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",),
          "image/gif": (b"GIF87a", b"GIF89a"), "image/webp": (b"RIFF",)}


class AttachmentError(ValueError):
    """An attachment that cannot be sent; the message says which and why."""


async def load(attachments: list[Attachment]) -> list[tuple[str, str]]:
    """(format, base64) of each attachment, in order ("base64.png", as displays are kept)."""
    return [await _one(n, a) for n, a in enumerate(attachments, 1)]


async def _one(n: int, attachment: Attachment) -> tuple[str, str]:
    what = f"attachment {n}"
    if attachment.data is not None:
        if len(attachment.data) > MAX_BYTES * 4 // 3 + 4:
            raise AttachmentError(f"{what}: over the {MAX_BYTES // 2**20} MB an image may have")
        try:
            raw = base64.b64decode(attachment.data, validate=True)
        except (binascii.Error, ValueError):
            raise AttachmentError(f"{what}: `data` is not base64") from None
    else:
        raw = await in_thread(_read, what, attachment.uri or "")
    mime = attachment.mime_type
    if not raw.startswith(_MAGIC[mime]) or (mime == "image/webp" and raw[8:12] != b"WEBP"):
        raise AttachmentError(f"{what}: the bytes are not a {mime} image")
    return f"base64.{mime.removeprefix('image/')}", base64.b64encode(raw).decode()


def _read(what: str, uri: str) -> bytes:
    path = to_fs_path(uri)
    if path is None:
        raise AttachmentError(f"{what}: {uri!r} is no file:// URI")
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise AttachmentError(f"{what}: {path} has {size / 2**20:.1f} MB; an image may have "
                                  f"{MAX_BYTES // 2**20} MB")
        return Path(path).read_bytes()
    except OSError as exc:
        raise AttachmentError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
