"""Prompt caching: which model calls mark their stable prefix cacheable, and where.

OpenAI, DeepSeek and Gemini cache a repeated prefix on their own. Anthropic's Messages API (also
through Bedrock, Vertex and OpenRouter) caches only up to the `cache_control` breakpoints the
request marks, at most four. Marked here: the system message (the same at every call), and the
newest user or tool messages, so that each call reads what the call before it wrote and writes
what it adds. litellm carries the marks to the provider's own shape.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .settings import Settings

# Providers whose caching needs marks (litellm's provider names).
MARKED = {"anthropic", "bedrock", "vertex_ai", "openrouter"}
EPHEMERAL = {"type": "ephemeral"}
NEWEST = 2  # newest user / tool messages marked, besides the system message


def wanted(litellm: ModuleType, settings: Settings) -> bool:
    """Whether this model's calls get cache marks: `promptCaching` true for a provider that
    takes them, or auto where litellm's model map says the model supports prompt caching."""
    if settings.prompt_caching is False or not settings.model:
        return False
    try:
        provider = litellm.get_llm_provider(settings.model, api_base=settings.api_base)[1]
    except Exception:  # a model litellm cannot place: the call itself will say so
        return False
    if provider not in MARKED:
        return False
    if settings.prompt_caching is True:
        return True
    try:  # not among litellm's top-level names: its utils module has it
        from litellm.utils import supports_prompt_caching
        return bool(supports_prompt_caching(model=settings.model, custom_llm_provider=provider))
    except Exception:
        return False


def mark(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with cache breakpoints on the system message and the newest user or tool
    messages; those marked are copies, the rest are the same objects."""
    out = list(messages)
    marked = 0
    for i in range(len(out) - 1, -1, -1):
        role = out[i].get("role")
        if role == "system" or (role in ("user", "tool") and marked < NEWEST):
            out[i] = _marked(out[i])
            marked += role != "system"
    return out


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if message.get("role") == "tool" or not content:
        return {**message, "cache_control": EPHEMERAL}
    parts: list[dict[str, Any]] = ([{"type": "text", "text": content}]
                                   if isinstance(content, str)
                                   else [dict(part) for part in content])
    parts[-1]["cache_control"] = EPHEMERAL
    return {**message, "content": parts}
