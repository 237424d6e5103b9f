"""Local model servers (Open Interpreter's `--local`): presets, their defaults, and a probe.

This module must not import settings.py (settings.combine calls apply_preset).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    url: str
    prefix: str  # litellm provider prefix for its model names
    models_path: str  # GET this to list the models


_PRESETS = (
    # ollama_chat: litellm's client of Ollama's /api/chat, which takes tool calls.
    Preset("ollama", "http://localhost:11434", "ollama_chat/", "/api/tags"),
    Preset("lmstudio", "http://localhost:1234/v1", "openai/", "/models"),
    Preset("llamafile", "http://localhost:8080/v1", "openai/", "/models"),
    Preset("jan", "http://localhost:1337/v1", "openai/", "/models"),
)

_PROVIDERS = ("ollama", "ollama_chat", "openai")  # a model already naming one keeps it

# Open Interpreter's small-context defaults for local models.
LOCAL_CONTEXT_WINDOW = 3000
LOCAL_MAX_TOKENS = 1000
PROBE_TIMEOUT = 1.5


def presets() -> dict[str, Preset]:
    """The presets; `OI_LSP_LOCAL_PRESETS` (JSON {name: url}) moves them (tests, odd ports)."""
    table = {p.name: p for p in _PRESETS}
    try:
        moved = json.loads(os.environ.get("OI_LSP_LOCAL_PRESETS") or "{}")
    except ValueError:
        moved = {}
    for name, url in moved.items() if isinstance(moved, dict) else ():
        if name in table and isinstance(url, str):
            p = table[name]
            table[name] = Preset(p.name, url.rstrip("/"), p.prefix, p.models_path)
    return table


def is_local(model: str | None, api_base: str | None = None) -> bool:
    if model and model.split("/", 1)[0] in ("ollama", "ollama_chat"):
        return True
    base = (api_base or "").rstrip("/")
    return bool(base) and any(base == p.url for p in presets().values())


def keyless(model: str | None, api_base: str | None = None) -> bool:
    """A server the user's provider keys are never sent to unless set for it (apiKey): a local
    preset, or any server on this machine's loopback (127.0.0.0/8, localhost, ::1)."""
    if is_local(model, api_base):
        return True
    import ipaddress
    from urllib.parse import urlsplit
    try:
        host = urlsplit(api_base or "").hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761: always loopback
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1
    return address.is_loopback or address.is_unspecified  # 0.0.0.0 reaches this machine too


def apply_preset(values: dict[str, Any]) -> dict[str, Any]:
    """Fill in a `local` preset's base URL and model prefix, and the small-context defaults
    for any local model, where the user has not set them (snake_case keys)."""
    out = dict(values)
    preset = presets().get(out.get("local") or "")
    if preset is not None:
        out.setdefault("api_base", preset.url)
        model = out.get("model")
        if isinstance(model, str) and model.split("/", 1)[0] not in _PROVIDERS:
            out["model"] = preset.prefix + model
    if is_local(out.get("model"), out.get("api_base")):
        out.setdefault("context_window", LOCAL_CONTEXT_WINDOW)
        out.setdefault("max_tokens", LOCAL_MAX_TOKENS)
    return out


async def probe(timeout: float = PROBE_TIMEOUT) -> list[dict[str, Any]]:
    """Ask every preset at once which models it serves; a silent one costs `timeout` at most."""
    import httpx  # litellm's HTTP client; loaded only when probing

    # trust_env=False: a proxy from the environment must not see (or break) localhost calls.
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as http:
        return list(await asyncio.gather(*(_probe_one(http, p, timeout)
                                           for p in presets().values())))


async def _probe_one(http: Any, preset: Preset, timeout: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": preset.name, "url": preset.url, "up": False, "models": []}
    try:
        async with asyncio.timeout(timeout + 0.5):  # connect + read, whatever httpx does
            response = await http.get(preset.url + preset.models_path)
        response.raise_for_status()
        data = response.json()
    except Exception as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}".strip().rstrip(":")[:200]
        return entry
    if not isinstance(data, dict):
        entry["error"] = "the answer was not a model list"
        return entry
    items = data.get("models") if preset.name == "ollama" else data.get("data")
    names = [str(m.get("name") or m.get("id")) for m in items or () if isinstance(m, dict)]
    entry.update(up=True, models=[preset.prefix + n for n in names if n and n != "None"])
    return entry
