"""Where the daemon listens: a private folder (0700) holding its socket (0600), the lock
relays take to start it, its pid lock and its log. Imports nothing heavy: the relay uses it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

SOCKET = "oi-lsp.sock"
START_LOCK = "start.lock"  # held by a relay while it starts the daemon
PID_LOCK = "daemon.pid"  # held by the daemon for its whole life: one daemon per folder
LOG = "daemon.log"


class UnsafeFolder(RuntimeError):
    """The runtime folder exists but another user owns it or others may enter it."""


def runtime_dir() -> Path:
    """$OI_LSP_RUNTIME_DIR; else `run` in $OI_LSP_DATA_DIR when that is set (another data
    folder is another daemon: its conversations are elsewhere); else $XDG_RUNTIME_DIR/oi-lsp;
    else `run` in the platform's data folder (platformdirs only then: it costs an import)."""
    own = os.environ.get("OI_LSP_RUNTIME_DIR")
    if own:
        return Path(own)
    data = os.environ.get("OI_LSP_DATA_DIR")
    if data:
        return Path(data) / "run"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "oi-lsp"
    import platformdirs

    return Path(platformdirs.user_data_dir("oi-lsp")) / "run"


def private_dir() -> Path:
    """The runtime folder, made 0700 if new; refused (UnsafeFolder) if another user owns it
    or its mode lets others in: whoever can reach the socket can run code as this user."""
    folder = runtime_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid():
        raise UnsafeFolder(f"{folder} belongs to another user")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(folder, 0o700)  # ours: made private (an umask or a user's chmod)
    return folder


def socket_path(folder: Path | None = None) -> Path:
    return (folder or runtime_dir()) / SOCKET
