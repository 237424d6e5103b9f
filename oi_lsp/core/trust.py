"""Which workspaces may change their own settings: a per-user trust store, as direnv's `allow`.

A workspace's `.oi/profile.yaml` can change anything, even the model server the API key is sent
to and whether code runs without asking, and a cloned repository brings its own. So it applies
only once the user has trusted that folder with that very content: the store keeps one small
file per folder (under the data folder's `trust/`) with the folder and the SHA-256 of its
settings files. Editing the profile changes the digest, and the user is asked again.

Reading and writing the store is blocking: callers use threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..common.files import atomic_write, data_dir, digest

log = logging.getLogger(__name__)

# Every file of a workspace that changes settings (all of them go into the digest).
WORKSPACE_PROFILE = Path(".oi") / "profile.yaml"
SETTINGS_FILES = (WORKSPACE_PROFILE,)
MAX_FILE = 1_000_000  # a settings file past this is not read (nor trusted): it is no profile


@dataclass(frozen=True)
class WorkspaceFiles:
    """A workspace's settings files as read once: what is trusted is exactly what applies."""

    folder: Path
    bodies: dict[str, bytes]  # relative path -> content, for the files that exist

    @property
    def digest(self) -> str:
        sha = hashlib.sha256()
        for name in sorted(self.bodies):
            body = self.bodies[name]
            sha.update(f"{name}\0{len(body)}\0".encode())
            sha.update(body)
        return sha.hexdigest()

    @property
    def profile(self) -> bytes | None:
        return self.bodies.get(str(WORKSPACE_PROFILE))


def read(folder: Path) -> WorkspaceFiles:
    bodies: dict[str, bytes] = {}
    for name in SETTINGS_FILES:
        path = folder / name
        try:
            if not path.is_file():
                continue
            with path.open("rb") as fh:
                body = fh.read(MAX_FILE + 1)
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc)
            continue
        bodies[str(name)] = body
    return WorkspaceFiles(folder, bodies)


def store_dir() -> Path:
    return data_dir() / "trust"


def _entry(folder: Path) -> Path:
    return store_dir() / f"{digest(str(folder))}.json"


def allowed(folder: Path, files_digest: str) -> bool:
    """Whether the user trusted `folder` with settings files of exactly this digest."""
    try:
        entry = json.loads(_entry(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(entry, dict) and entry.get("folder") == str(folder)
            and entry.get("sha256") == files_digest)


def allow(folder: Path, files_digest: str) -> None:
    body = json.dumps({"folder": str(folder), "sha256": files_digest}).encode()
    atomic_write(_entry(folder), body, private=True)


def revoke(folder: Path) -> bool:
    """Forget the folder; whether it was trusted."""
    try:
        _entry(folder).unlink()
    except FileNotFoundError:
        return False
    return True
