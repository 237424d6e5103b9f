"""Fitting the conversation into the model's context window, and what a turn costs.

Tokens are counted with litellm's token counter and priced with its cost map; both are
estimates (a model unknown to litellm is counted with a generic tokenizer and has no price).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .settings import Settings

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 8000  # when neither the settings nor litellm know the model's window
SHORT_OUTPUT = 400  # characters an old tool output is cut to before any message is dropped
REPLY_RESERVE = 0.2  # share of the window kept free for the reply (when maxTokens is unset)


@dataclass(slots=True)
class Usage:
    """Tokens and money spent in one session (or one turn)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None  # USD; None while litellm knows no price for the model

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"promptTokens": self.prompt_tokens,
                               "completionTokens": self.completion_tokens}
        if self.cost is not None:
            out["cost"] = round(self.cost, 8)
        return out


def _name(settings: Settings) -> str:
    return settings.model or "gpt-4o-mini"


def window(litellm: ModuleType, settings: Settings) -> int:
    """The tokens the model takes: the setting, else litellm's model info, else a default."""
    if settings.context_window:
        return settings.context_window
    try:
        info = litellm.get_model_info(_name(settings))
        return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_WINDOW)
    except Exception:  # litellm raises for models it does not know
        return DEFAULT_WINDOW


def count(litellm: ModuleType, settings: Settings, messages: list[dict[str, Any]]) -> int:
    try:
        return int(litellm.token_counter(model=_name(settings), messages=messages))
    except Exception:
        return sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages)


def count_text(litellm: ModuleType, settings: Settings, text: str) -> int:
    try:
        return int(litellm.token_counter(model=_name(settings), text=text))
    except Exception:
        return len(text) // 4


def price(litellm: ModuleType, settings: Settings, prompt: int, completion: int) -> float | None:
    try:
        a, b = litellm.cost_per_token(model=_name(settings), prompt_tokens=prompt,
                                      completion_tokens=completion)
        return float(a) + float(b)
    except Exception:
        return None


def fit(litellm: ModuleType, settings: Settings,
        messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages within the window: the system message and the newest messages stay; old
    long tool outputs are shortened first, then the oldest exchanges are dropped whole (a tool
    result never loses the call it answers)."""
    reserve = settings.max_tokens or int(window(litellm, settings) * REPLY_RESERVE)
    budget = max(256, window(litellm, settings) - reserve)
    if count(litellm, settings, messages) <= budget:
        return messages
    out = copy.deepcopy(messages)
    system, rest = out[:1], out[1:]
    # 1. Shorten outputs of old runs (all but the newest exchange), oldest first.
    last_user = max((i for i, m in enumerate(rest) if m["role"] == "user"), default=0)
    for m in rest[:last_user]:
        text = m.get("content")
        if m["role"] in ("tool", "user") and isinstance(text, str) and len(text) > SHORT_OUTPUT:
            m["content"] = (text[:SHORT_OUTPUT // 2] + "\n[... trimmed to fit the context ...]\n"
                            + text[-SHORT_OUTPUT // 2:])
            if count(litellm, settings, system + rest) <= budget:
                return system + rest
    # 2. Drop the oldest messages; never leave a tool result or a reply first.
    while len(rest) > 1 and count(litellm, settings, system + rest) > budget:
        rest.pop(0)
        while len(rest) > 1 and rest[0]["role"] != "user":
            rest.pop(0)
    if count(litellm, settings, system + rest) > budget:
        log.warning("the newest message alone exceeds the context window (%s tokens)", budget)
    return system + rest
