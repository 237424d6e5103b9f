"""What the model sees of images: whether it sees any (setting `vision`), and each image shrunk
to a size cap (Pillow, loaded when an image is first sent) as a chat-completions image part."""

from __future__ import annotations

import base64
import binascii
import functools
import io
import logging
from types import ModuleType
from typing import Any

from .settings import Settings

log = logging.getLogger(__name__)

MAX_SIDE = 1024  # pixels: a larger image is scaled down to fit a square of this side
MAX_BYTES = 400_000  # an image over this (encoded) is sent as a JPEG, smaller, instead
PER_RUN = 3  # the most images of one run the model is sent
# The formats models take; others (SVG) are described, not sent.
MIME = {"base64.png": "image/png", "base64.jpeg": "image/jpeg", "base64.jpg": "image/jpeg",
        "base64.gif": "image/gif", "base64.webp": "image/webp"}
IMAGES_NOTE = "The images the code displayed, as the user saw them:"


def enabled(litellm: ModuleType | None, settings: Settings) -> bool:
    """`vision` true/false, or (auto) whether litellm says the model takes images: a model it
    does not know (a local one, the tests' scripted one) is sent none."""
    if isinstance(settings.vision, bool):
        return settings.vision
    if litellm is None or not settings.model:
        return False
    try:
        return bool(litellm.supports_vision(model=settings.model))
    except Exception:
        return False


def part(fmt: str | None, content: str) -> dict[str, Any] | None:
    """The image as an image_url part, shrunk; None when it cannot be sent (not a bitmap the
    model takes, or not an image at all)."""
    mime = MIME.get(fmt or "")
    if mime is None:
        return None
    shrunk = _shrink(mime, content)
    if shrunk is None:
        return None
    mime, data = shrunk
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


@functools.lru_cache(maxsize=64)  # every model call of a conversation sends its images again
def _shrink(mime: str, content: str) -> tuple[str, str] | None:
    try:
        raw = base64.b64decode(content, validate=False)
    except (binascii.Error, ValueError):
        return None
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(raw)) as image:
            if max(image.size) <= MAX_SIDE and len(raw) <= MAX_BYTES:
                return mime, content.strip()
            image.thumbnail((MAX_SIDE, MAX_SIDE))
            out = io.BytesIO()
            if mime == "image/png" and image.mode in ("RGBA", "LA", "P"):
                image.save(out, "PNG", optimize=True)
            if not out.tell() or out.tell() > MAX_BYTES:
                out = io.BytesIO()
                image.convert("RGB").save(out, "JPEG", quality=80)
                mime = "image/jpeg"
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        log.warning("an image could not be read (%s); not sent to the model", exc)
        return None
    return mime, base64.b64encode(out.getvalue()).decode()
