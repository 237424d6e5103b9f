"""Which executor runs a language, and what this machine can run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol import LanguageInfo
from .base import Executor
from .kernel import KernelExecutor

if TYPE_CHECKING:
    from ..settings import Settings

# Names models and users give a language, mapped to the one we run it as.
ALIASES: dict[str, str] = {
    "python": "python", "py": "python", "python3": "python", "ipython": "python",
}


class UnknownLanguage(LookupError):
    """A language this machine cannot run; the message says what would make it work."""


def canonical(language: str) -> str:
    name = ALIASES.get(language.strip().lower())
    if name is None:
        known = ", ".join(sorted(set(ALIASES.values())))
        raise UnknownLanguage(f"cannot run {language!r} here; available: {known}")
    return name


def runnable() -> set[str]:
    """Every name (aliases included) that fenced code blocks may use to ask for a run."""
    return set(ALIASES)


def create(language: str, cwd: Path, kernel_name: str,
           settings: Settings | None = None) -> Executor:
    """A new, not yet started executor for the canonical `language`."""
    if language == "python":
        if settings is not None and settings.kernel_gateway is not None:
            from . import gateway  # lazy: httpx and websockets only for remote kernels

            return gateway.for_settings(language, cwd, settings)
        return KernelExecutor("python", kernel_name, cwd)
    raise UnknownLanguage(f"cannot run {language!r} here")


def describe(kernel_name: str, settings: Settings | None = None) -> list[LanguageInfo]:
    infos = [LanguageInfo(name="python", aliases=["py", "python3", "ipython"], kind="kernel",
                          runner=kernel_name, available=True)]
    gateway = settings.kernel_gateway if settings is not None else None
    if gateway is not None:  # the Python kernel runs on the gateway: say where
        from urllib.parse import urlsplit

        infos = [info.model_copy(update={
            "location": "remote", "host": urlsplit(gateway.url).netloc,
            "runner": gateway.kernel_name or kernel_name}) if info.name == "python" else info
            for info in infos]
    return infos
