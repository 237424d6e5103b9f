"""oi_lsp/common/uris.py spells file:// URIs exactly as pygls does (the core cannot use pygls), so a
workspace keeps its key, and with it its saved conversations."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st
from pygls import uris as pygls_uris

from oi_lsp.common import uris

SEGMENT = st.text(alphabet=string.ascii_letters + string.digits + " -_.%#?&=+@,;:'()[]!~é漢",
                  min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(SEGMENT, min_size=1, max_size=5))
def test_paths_round_trip_like_pygls(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    uri = uris.from_fs_path(path)
    assert uri == pygls_uris.from_fs_path(path)
    back = uris.to_fs_path(uri)
    assert back == pygls_uris.to_fs_path(uri)
    if not re.match(r"^/[a-zA-Z]:", path):  # a Windows drive comes back without the slash
        assert back == path


def test_special_spellings() -> None:
    for uri in ("file:///home/u/my%20project", "file://server/share/x", "file:///C:/Users/x",
                "file:///c%3A/Users/x", "untitled:Untitled-1", "https://example.com/x"):
        assert uris.to_fs_path(uri) == pygls_uris.to_fs_path(uri), uri
    for path in ("//server/share/x", "/C:/Users/x", "/home/u/a b"):
        assert uris.from_fs_path(path) == pygls_uris.from_fs_path(path), path
