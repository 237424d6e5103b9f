"""Saving and loading a workspace's conversation, atomically, under the user data folder."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import platformdirs
from pydantic import TypeAdapter, ValidationError

from .protocol import Message

log = logging.getLogger(__name__)

_MESSAGES = TypeAdapter(list[Message])
FORMAT_VERSION = 1


def data_dir() -> Path:
    """$OI_LSP_DATA_DIR, else the platform's user data folder for oi-lsp."""
    return Path(os.environ.get("OI_LSP_DATA_DIR") or platformdirs.user_data_dir("oi-lsp"))


class Store:
    """One JSON file per workspace, named by a hash of its URI."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or data_dir()) / "sessions"

    def path(self, workspace: str) -> Path:
        digest = hashlib.sha256(workspace.encode()).hexdigest()[:24]
        return self.root / f"{digest}.json"

    def spill_dir(self, workspace: str) -> Path:
        """Where the whole outputs of a workspace's runs go when the model sees them trimmed."""
        return self.path(workspace).with_suffix("") / "outputs"

    def load(self, workspace: str) -> tuple[list[Message], str | None]:
        """The saved messages, and a notice when a damaged file had to be set aside."""
        path = self.path(workspace)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return [], None
        try:
            data = json.loads(raw)
            messages = _MESSAGES.validate_python(data["messages"])
            return messages, None
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            path.rename(aside)
            log.error("session file %s is damaged (%s); moved to %s", path, exc, aside)
            return [], (f"The saved conversation could not be read ({type(exc).__name__}); "
                        f"it was moved to {aside} and a new conversation started.")

    def save(self, workspace: str, messages: list[Message]) -> None:
        """Write to a temp file, fsync, rename: a crash leaves the old or the new file whole."""
        path = self.path(workspace)
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({
            "version": FORMAT_VERSION,
            "workspace": workspace,
            "updated": time.time(),
            "messages": [m.model_dump(by_alias=True, exclude_none=True) for m in messages],
        }, ensure_ascii=False).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
