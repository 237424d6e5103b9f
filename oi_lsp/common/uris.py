"""file:// URIs and the folders they name, as editors spell them (VS Code's rules, which
pygls follows too: the path percent-encoded, a UNC host as the authority). Here, not from
pygls, so that the core can use them without the LSP library."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlparse

_DRIVE = re.compile(r"^/[a-zA-Z]:")  # a Windows drive in a URI's path: /c:/...


def from_fs_path(path: str) -> str:
    """The file:// URI of an absolute path."""
    netloc = ""
    if path.startswith("//"):  # a UNC path: //host/share/...
        end = path.find("/", 2)
        netloc, path = (path[2:], "/") if end < 0 else (path[2:end], path[end:])
    if not path.startswith("/"):
        path = "/" + path
    if _DRIVE.match(path):  # lower-case drive letter, the colon left as it is
        return f"file://{quote(netloc)}{path[0]}{path[1].lower()}:{quote(path[3:])}"
    return f"file://{quote(netloc)}{quote(path)}"


def to_fs_path(uri: str) -> str | None:
    """The path a file:// URI names; None for any other scheme."""
    parts = urlparse(uri)
    if unquote(parts.scheme) != "file":
        return None
    netloc, path = unquote(parts.netloc), unquote(parts.path)
    if netloc and path:
        return f"//{netloc}{path}"
    if _DRIVE.match(path):
        return path[1].lower() + path[2:]
    return path
