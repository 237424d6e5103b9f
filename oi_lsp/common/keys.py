"""Which environment variables hold keys the server reads: the model's (OI_API_KEY, and the
providers' *_API_KEY that litellm reads), the kernel gateway's token and the --tcp/--ws token.
REPLs start without them, and error texts never show their values. Imports nothing of oi-lsp."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

KEY_VARIABLES = frozenset({"OI_API_KEY", "OI_KERNEL_GATEWAY_TOKEN", "OI_LSP_TOKEN"})
_SHORTEST = 6  # a shorter value would mask ordinary words


def is_key(name: str) -> bool:
    return name in KEY_VARIABLES or name.upper().endswith("_API_KEY")


def values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The key values in the environment, longest first (so a key that contains another is
    masked whole)."""
    environ = os.environ if environ is None else environ
    found = {v for k, v in environ.items() if is_key(k) and len(v) >= _SHORTEST}
    return sorted(found, key=len, reverse=True)


def mask(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with every key the server knows (the environment's, and `extra`) as ***."""
    for value in sorted({*values(), *(v for v in extra if len(v) >= _SHORTEST)},
                        key=len, reverse=True):
        text = text.replace(value, "***")
    return text
