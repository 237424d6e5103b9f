"""Where oi-lsp keeps its files, and how it writes them: whole or not at all.

Shared by every layer (conversations, kernel records, gateway kernel ids, profiles), so it
imports nothing of oi-lsp's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    """$OI_LSP_DATA_DIR, else the platform's user data folder for oi-lsp."""
    return Path(os.environ.get("OI_LSP_DATA_DIR") or platformdirs.user_data_dir("oi-lsp"))


def config_dir() -> Path:
    """$OI_LSP_CONFIG_DIR, else the platform's user config folder for oi-lsp."""
    return Path(os.environ.get("OI_LSP_CONFIG_DIR") or platformdirs.user_config_dir("oi-lsp"))


def first_time(name: str) -> bool:
    """Whether this is the first time `name` is asked of this data folder (a marker file,
    created atomically: of two servers asking at once, one is first). An unwritable data
    folder: always the first time."""
    folder = data_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def digest(*parts: str) -> str:
    """A short, stable file name for a key (a workspace URI; a folder and a language)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def temp_path(path: Path) -> Path:
    """The temp file a write of `path` goes through (named by our pid, so a later load can
    tell a save in progress from one a killed server left)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def atomic_write(path: Path, body: bytes, *, private: bool = False) -> None:
    """Temp file, fsync, rename, fsync the folder: a crash at any moment leaves the old or the
    new file whole, and the rename itself survives a power cut. `private`: mode 0600 from the
    start (the file holds a key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_in(folder: Path, name: str, body: bytes) -> None:
    """Write the file `name` of `folder` whole, following no symbolic link: the folder is
    opened without following one (resolve it first), the temp file is created anew, and the
    rename replaces a link named `name` instead of writing where it points."""
    if not name or "/" in name or name in (".", ".."):
        raise IsADirectoryError(f"{name!r} is not a file name")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        tmp = f".{name}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):  # one a crash left
            os.unlink(tmp, dir_fd=fd)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666,
                      dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
        os.fsync(fd)
    finally:
        os.close(fd)
