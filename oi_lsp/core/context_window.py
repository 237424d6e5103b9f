"""Fitting the conversation into the model's context window, and what a turn costs.

Tokens are counted with litellm's token counter and priced with its cost map; both are
estimates (a model unknown to litellm is counted with a generic tokenizer and has no price).
The tokenizer takes ~110 MiB, so it is loaded only once a conversation nears the window (its
UTF-8 bytes, an upper bound of its tokens, exceed what the window leaves for it); below that,
a call's tokens are estimated from its bytes. The server keeps litellm's counter switched off
(`disable_token_counter`, set in llm.py) so litellm's own per-call cost bookkeeping never loads
it; `tokens` switches it on only while counting here.
Everything here is CPU work on plain data: callers run it in a thread.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .prompt import OUTPUT_PREFIX
from .settings import Settings
from .vision import IMAGES_NOTE

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 8000  # when neither the settings nor litellm know the model's window
SHORT_OUTPUT = 400  # characters an old output is cut to before any message is dropped
REPLY_RESERVE = 0.2  # share of the window kept free for the reply (when maxTokens is unset)
BYTES_PER_TOKEN = 4  # the usual estimate for English text and code with OpenAI's tokenizers
MESSAGE_TOKENS = 4  # what a message's framing (role, separators) adds, as litellm counts it
TRIMMED = "\n[... trimmed to fit the context window ...]\n"


@dataclass(slots=True)
class Spend:
    """Tokens and money spent in one turn, or in a workspace since it opened."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None  # USD; None while litellm knows no price for the model
    calls: int = 0
    # As the provider reported them; None while no call reported them.
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens read from the provider's cache
    cache_write_tokens: int | None = None  # prompt tokens written to it
    cache_saved: float | None = None  # USD the cache saved (negative: it cost more)

    def add(self, other: Spend) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost = _plus(self.cost, other.cost)
        self.reasoning_tokens = _plus(self.reasoning_tokens, other.reasoning_tokens)
        self.cached_tokens = _plus(self.cached_tokens, other.cached_tokens)
        self.cache_write_tokens = _plus(self.cache_write_tokens, other.cache_write_tokens)
        self.cache_saved = _plus(self.cache_saved, other.cache_saved)


def _plus(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else a + b


def window(litellm: ModuleType, settings: Settings) -> int:
    """The tokens the model takes: the setting, else litellm's model info, else a default."""
    if settings.context_window:
        return settings.context_window
    try:
        info = litellm.get_model_info(settings.model or "")
        return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_WINDOW)
    except Exception:  # litellm raises for models it does not know
        return DEFAULT_WINDOW


def budget(litellm: ModuleType, settings: Settings) -> int:
    """Tokens the messages may take: the window less what the reply needs."""
    size = window(litellm, settings)
    reserve = min(settings.max_tokens or int(size * REPLY_RESERVE), size // 2)
    return max(256, size - reserve)


def reach(litellm: ModuleType, settings: Settings) -> int:
    """Characters of the newest messages that surely cover what the window takes: a
    conversation's older messages stay in its record unless the window may hold them
    (twice the usual bytes per token: denser text than the estimate's still fits)."""
    return 2 * BYTES_PER_TOKEN * budget(litellm, settings)


_counting = threading.Lock()  # the switch is global: one count at a time flips it


def tokens(litellm: Any, model: str, **what: Any) -> int:
    """litellm.token_counter(model=model, **what), with its counter on while it counts."""
    with _counting:
        litellm.disable_token_counter = False
        try:
            return int(litellm.token_counter(model=model, **what))
        finally:
            litellm.disable_token_counter = True


def count(litellm: ModuleType, settings: Settings, messages: list[dict[str, Any]]) -> int:
    try:
        return tokens(litellm, settings.model or "", messages=messages)
    except Exception:  # a message shape the counter does not take: a rough estimate
        return estimate(messages)


def count_text(litellm: ModuleType, settings: Settings, text: str) -> int:
    if not text:
        return 0
    try:
        return tokens(litellm, settings.model or "", text=text)
    except Exception:
        return estimate_text(text)


def estimate_text(text: str) -> int:
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def estimate(messages: list[dict[str, Any]]) -> int:
    """Tokens of these messages guessed from their bytes, without the tokenizer."""
    total = 0
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content or "",
                                                                   ensure_ascii=False)
        calls = m.get("tool_calls")
        if calls:
            text += json.dumps(calls, ensure_ascii=False)
        total += estimate_text(text) + MESSAGE_TOKENS
    return total


def near_window(litellm: ModuleType, settings: Settings, messages: list[dict[str, Any]],
                ) -> bool:
    """The messages may not fit as they are: only then is counting their tokens worth the
    tokenizer. Their UTF-8 bytes bound their tokens from above (a token is at least a byte)."""
    return sum(_bytes(m) for m in messages) > budget(litellm, settings)


def price(litellm: ModuleType, settings: Settings, prompt: int, completion: int) -> float | None:
    """USD for these tokens, or None when litellm's cost map does not know the model."""
    try:
        a, b = litellm.cost_per_token(model=settings.model or "", prompt_tokens=prompt,
                                      completion_tokens=completion)
        return float(a) + float(b)
    except Exception:
        return None


def measure(litellm: ModuleType, settings: Settings, sent: list[dict[str, Any]],
            reply_text: str, usage: Any = None) -> Spend:
    """What one model call cost: as the provider reported it (`usage`, litellm's Usage), else
    from the messages sent and the reply (text and tool arguments): counted with the
    tokenizer near the window, else estimated from their bytes."""
    if usage is not None and getattr(usage, "prompt_tokens", None):
        return reported(litellm, settings, usage)
    if near_window(litellm, settings, sent):
        prompt = count(litellm, settings, sent)
        completion = count_text(litellm, settings, reply_text)
    else:
        prompt, completion = estimate(sent), estimate_text(reply_text)
    return Spend(prompt, completion, price(litellm, settings, prompt, completion), calls=1)


def reported(litellm: ModuleType, settings: Settings, usage: Any) -> Spend:
    """A call's Spend from the provider's own counts. litellm puts every provider's into
    OpenAI's shape: prompt tokens include those read from the cache
    (`prompt_tokens_details.cached_tokens`) and written to it (`cache_creation_input_tokens`,
    Anthropic's); completion tokens include the reasoning ones."""
    prompt = int(usage.prompt_tokens or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    cached = _count(getattr(prompt_details, "cached_tokens", None)) \
        or _count(getattr(usage, "cache_read_input_tokens", None))
    written = _count(getattr(usage, "cache_creation_input_tokens", None)) \
        or _count(getattr(prompt_details, "cache_creation_tokens", None))
    spend = Spend(prompt, completion, calls=1,
                  reasoning_tokens=_count(getattr(completion_details, "reasoning_tokens", None)),
                  cached_tokens=cached, cache_write_tokens=written)
    full = price(litellm, settings, prompt, completion)
    try:
        a, b = litellm.cost_per_token(model=settings.model or "", usage_object=usage,
                                      prompt_tokens=prompt, completion_tokens=completion,
                                      cache_read_input_tokens=cached or 0,
                                      cache_creation_input_tokens=written or 0)
        spend.cost = float(a) + float(b)
    except Exception:
        spend.cost = full
    if (cached or written) and full is not None and spend.cost is not None:
        spend.cache_saved = full - spend.cost
    return spend


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value else None


def _bytes(message: dict[str, Any]) -> int:
    """An upper bound of a message's tokens: its UTF-8 bytes, plus the per-message framing."""
    return len(json.dumps(message, ensure_ascii=False).encode()) + 8


def _is_output(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and (
        message["role"] == "tool"
        or (message["role"] == "user" and content.startswith(OUTPUT_PREFIX)))


def _has_images(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(p.get("type") == "image_url" for p in content)


def _is_images_note(message: dict[str, Any]) -> bool:
    """The message that carries a run's images: no exchange of its own."""
    content = message.get("content")
    return (message["role"] == "user" and isinstance(content, list) and bool(content)
            and content[0].get("text") == IMAGES_NOTE)


def _is_exchange(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and not _is_images_note(message)


def _without_images(message: dict[str, Any]) -> dict[str, Any]:
    parts = message["content"]
    dropped = sum(p.get("type") == "image_url" for p in parts)
    kept = [p for p in parts if p.get("type") != "image_url"]
    kept.append({"type": "text", "text": f"[{dropped} image(s) left out to fit the context "
                                         "window]"})
    return {**message, "content": kept}


def _shorten(text: str) -> str:
    return text[:SHORT_OUTPUT // 2] + TRIMMED + text[-SHORT_OUTPUT // 2:]


def fit(litellm: ModuleType, settings: Settings,
        messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages within the window. The system message and the newest exchange (from the
    last user message on) stay. First old images are left out, then old long outputs are
    shortened, oldest first; then the oldest exchanges are dropped whole (so a tool result never
    loses the call it answers); last the current exchange's own long outputs are shortened, and
    its images left out."""
    if not near_window(litellm, settings, messages):
        return messages  # surely fits: no need to count
    limit = budget(litellm, settings)
    sizes = [count(litellm, settings, [m]) for m in messages]
    total = sum(sizes)
    if total <= limit or len(messages) < 2:
        return messages
    out = copy.deepcopy(messages)
    last_user = max((i for i, m in enumerate(out) if _is_exchange(m)), default=len(out) - 1)

    def resize(i: int, message: dict[str, Any]) -> None:
        nonlocal total
        out[i] = message
        size = count(litellm, settings, [message])
        total += size - sizes[i]
        sizes[i] = size

    def shorten(i: int) -> None:
        resize(i, {**out[i], "content": _shorten(out[i]["content"])})

    def drop_images(first: int, end: int) -> None:
        for i in range(first, end):
            if total > limit and _has_images(out[i]):
                resize(i, _without_images(out[i]))

    drop_images(1, last_user)  # 0. Old images, oldest first (each costs as much as an output)
    # 1. Old long outputs, oldest first.
    for i in range(1, last_user):
        if total <= limit:
            return out
        if _is_output(out[i]) and len(out[i]["content"]) > SHORT_OUTPUT + len(TRIMMED):
            shorten(i)
    # 2. The oldest exchanges, whole: from message 1 up to (not including) the next user one.
    while total > limit:
        following = next((j for j in range(2, last_user + 1) if _is_exchange(out[j])), None)
        if following is None:
            break
        total -= sum(sizes[1:following])
        del out[1:following], sizes[1:following]
        last_user -= following - 1
    # 3. The current exchange's outputs (a long run in this very turn).
    for i in range(last_user + 1, len(out)):
        if total <= limit:
            break
        if _is_output(out[i]) and len(out[i]["content"]) > SHORT_OUTPUT + len(TRIMMED):
            shorten(i)
    drop_images(last_user, len(out))  # 4. The current exchange's (attachments included)
    if total > limit:
        log.warning("the newest messages alone exceed the context window (%s > %s tokens)",
                    total, limit)
    return out
