"""Which Jupyter kernel runs which language: kernelspecs, installed here or on a gateway.

Reading them costs (a walk of the kernel folders on disk, a request to the gateway) and every
list of languages asks, so what was read is kept for SPECS_TTL seconds."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..common.languages import ALIASES

if TYPE_CHECKING:
    from jupyter_client.kernelspec import KernelSpecManager

SPECS_TTL = 30.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values by key, each read again once it is `ttl` seconds old (counted from the start of
    its read). A read that fails is not kept: the next call tries again."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._values: dict[K, tuple[float, V]] = {}

    def _fresh(self, key: K, now: float) -> tuple[float, V] | None:
        kept = self._values.get(key)
        return kept if kept is not None and now - kept[0] < self.ttl else None

    def get(self, key: K, read: Callable[[], V]) -> V:
        now = time.monotonic()
        if (kept := self._fresh(key, now)) is None:
            kept = self._values[key] = (now, read())
        return kept[1]

    async def get_async(self, key: K, read: Callable[[], Awaitable[V]]) -> V:
        now = time.monotonic()
        if (kept := self._fresh(key, now)) is None:
            kept = self._values[key] = (now, await read())
        return kept[1]


def by_language(specs: Mapping[str, Any]) -> dict[str, str]:
    """Kernelspecs as jupyter_client lists them (name -> {"spec": {"language": ...}, ...}),
    also a gateway's /api/kernelspecs: canonical language (bash -> shell) -> kernel name. Of
    two kernels for one language, the first by name."""
    found: dict[str, str] = {}
    for name, entry in sorted(specs.items()):
        spec = entry.get("spec") if isinstance(entry, dict) else None
        language = str((spec or {}).get("language", "")).strip().lower()
        if language:
            found.setdefault(ALIASES.get(language, language), str(name))
    return found


def spec_manager() -> KernelSpecManager:
    """A KernelSpecManager told where the kernelspecs are: jupyter's folders and IPython's.

    Left to find them itself, it imports IPython.paths for the last one, and with it all of
    IPython (~77 modules, ~2.8 MiB) into a server that never runs IPython itself; IPython's
    rule for that folder is $IPYTHONDIR, else ~/.ipython."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_core.paths import jupyter_path

    ipython = os.environ.get("IPYTHONDIR") or os.path.join(os.path.expanduser("~"), ".ipython")
    return KernelSpecManager(kernel_dirs=[*jupyter_path("kernels"),
                                          os.path.join(ipython, "kernels")])
