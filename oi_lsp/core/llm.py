"""The model: litellm's streaming completion turned into plain events.

litellm takes seconds to import, so it is loaded lazily: `warm_up()` loads it in a thread after
`initialize`, and the first turn waits for that same load instead of importing it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import anyio

from ..common import keys
from ..protocol import ErrorKind
from . import caching, model_presets
from .reasoning import ThinkingBlocks, ThinkTags
from .settings import Settings

# %verbose output goes to the server log whatever --log-level says.
_verbose = logging.getLogger("oi_lsp.verbose")
_verbose.setLevel(logging.INFO)

EXECUTE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "execute",
        "description": "Executes code on the user's machine, in a persistent session of that "
                       "language, and returns the output.",
        "parameters": {
            "type": "object",
            "properties": {
                "language": {"type": "string",
                             "description": "The programming language, e.g. python or shell."},
                "code": {"type": "string", "description": "The code to execute."},
            },
            "required": ["language", "code"],
        },
    },
}


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, as the model wrote it


@dataclass(slots=True)
class Reply:
    """What one model call produced once its stream ended."""

    text: str = ""
    reasoning: str = ""  # the model's reasoning, as it streamed (core/reasoning.py)
    thinking_blocks: list[dict[str, Any]] = field(default_factory=list)  # Anthropic's, signed
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Any = None  # litellm's Usage of the call, when the provider reported it


PieceKind = Literal["text", "reasoning", "retry"]


@dataclass(slots=True, frozen=True)
class Piece:
    """What the stream yields: text or reasoning as it comes, or a retry's notice."""

    kind: PieceKind
    text: str


class ModelError(Exception):
    """A model call failed; the message says what to do about it in plain words (never the
    API key), and `kind` says which failure it is (protocol.ErrorKind)."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


# Sent as the key to a server at `apiBase` when no key is set anywhere: OpenAI's client will
# not call without one, and a local OpenAI-compatible server (llama.cpp, vLLM, LM Studio)
# wants none. A server that does want one answers 401, which then reads as "no key".
NO_KEY = "no-key-set"
# What a local server (Ollama, LM Studio, ...) is sent when the user set no key: one that
# answers 401 wants a key, so that is a missing key, not a wrong one.
LOCAL_KEY = "local"
CLOSE_GRACE = 2.0  # seconds closing a stopped model stream may take
# Retries of a call refused before it answered: statuses worth another try, the first delay
# (doubled at each retry) and the longest wait a server's Retry-After may ask for.
RETRY_STATUSES = {408, 429, 500, 502, 503, 504, 529}
RETRY_FIRST = 0.5
RETRY_LONGEST = 60.0


# Lazy litellm ----------------------------------------------------------------------------------

_loading: asyncio.Future[ModuleType] | None = None


def _import_litellm() -> ModuleType:
    # Offline, litellm would try to download its price map at import time.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # litellm prints at import; stdout is the LSP stream
    try:
        import litellm
    finally:
        sys.stdout = real_stdout
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    # litellm prices every call itself, counting its tokens when the reply has no usage: that
    # loads its tokenizer (~110 MiB) at the first turn. Off; context_window counts when needed.
    litellm.disable_token_counter = True
    from . import litellm_compat
    litellm_compat.split_ollama_think_tags(litellm)
    return litellm


def warm_up() -> asyncio.Future[ModuleType]:
    """Start loading litellm in a thread (once); await the result to use it.

    A daemon thread, not asyncio.to_thread: the import takes seconds (tens on a busy machine),
    and a server told to exit must not wait for it at interpreter shutdown.
    """
    global _loading
    if _loading is None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ModuleType] = loop.create_future()

        def settle(result: ModuleType | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        def load() -> None:
            try:
                result, error = _import_litellm(), None
            except BaseException as exc:  # handed to whoever awaits the future
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=load, name="litellm-import", daemon=True).start()
        _loading = future
    return _loading


def loaded() -> ModuleType | None:
    """litellm, once warm_up() has loaded it."""
    if _loading is None or not _loading.done() or _loading.cancelled() or _loading.exception():
        return None
    return _loading.result()


# Streaming -------------------------------------------------------------------------------------

def completion_args(litellm: ModuleType, settings: Settings,
                    messages: list[dict[str, Any]]) -> dict[str, Any]:
    if not settings.model:
        raise ModelError("noModel", NO_MODEL)
    args: dict[str, Any] = {"model": settings.model, "messages": messages, "stream": True}
    if settings.tool_calls:
        args["tools"] = [EXECUTE_TOOL]
    if settings.api_base:
        args["api_base"] = settings.api_base
    own = _provider_key(litellm, settings)
    if settings.api_key is not None:
        args["api_key"] = settings.api_key.get_secret_value()
    elif own is not None:
        args["api_key"] = own
    elif model_presets.keyless(settings.model, settings.api_base):
        # A local server wants no key, but litellm's OpenAI client insists on one; never send
        # the user's real OPENAI_API_KEY to it (apiKey sends one where the user means it).
        args["api_key"] = LOCAL_KEY
    elif settings.api_base and _keys_missing(litellm, settings):
        args["api_key"] = NO_KEY
    if settings.temperature is not None:
        args["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        args["max_tokens"] = settings.max_tokens
    if settings.reasoning_effort is not None:
        args["reasoning_effort"] = settings.reasoning_effort
    # The provider's own token counts (cached and reasoning tokens among them) on the last
    # chunk; oi-lsp retries itself (shown to the user), so the SDK's silent retries are off.
    args["stream_options"] = {"include_usage": True}
    args["max_retries"] = 0
    args.update(settings.model_options or {})
    if _provider(litellm, settings) not in SIGNS_THINKING:
        args["messages"] = [_unsigned(m) for m in messages]
    if caching.wanted(litellm, settings):
        args["messages"] = caching.mark(args["messages"])
    return args


# Providers whose models sign their thinking blocks and want them back (Claude's).
SIGNS_THINKING = {"anthropic", "bedrock", "vertex_ai"}


def _provider(litellm: ModuleType, settings: Settings) -> str | None:
    try:
        return str(litellm.get_llm_provider(settings.model, api_base=settings.api_base)[1])
    except Exception:  # a model litellm cannot place: the call itself will say so
        return None


def _unsigned(message: dict[str, Any]) -> dict[str, Any]:
    """Another provider's thinking blocks are not sent (the model changed mid-conversation)."""
    if "thinking_blocks" not in message:
        return message
    return {k: v for k, v in message.items() if k != "thinking_blocks"}


async def stream(settings: Settings, messages: list[dict[str, Any]],
                 reply: Reply) -> AsyncIterator[Piece]:
    """Yield the reply's text and reasoning as they stream, and a notice before each retry;
    tool calls, finish reason and usage land in `reply`. A call refused as rate limited or
    overloaded before anything streamed is tried again (`modelRetries`), after the delay the
    server asked for or a doubling one; a stop cancels the wait."""
    if not settings.model:
        raise ModelError("noModel", NO_MODEL)
    litellm = await warm_up()
    args = completion_args(litellm, settings, messages)
    if settings.verbose:
        _verbose.info("request to %s: %s", settings.model, json.dumps(messages,
                                                                      ensure_ascii=False))
    attempt = 0
    while True:
        try:
            async for piece in _call(litellm, args, reply):
                yield piece
            return
        except _Failed as failed:
            error = describe_error(failed.error, settings,
                                   args.get("api_key") in (NO_KEY, LOCAL_KEY))
            delay = _retry_delay(failed.error, attempt)
            if failed.streamed:
                raise ModelError(error.kind, f"{error} The answer broke off after it had "
                                 "started: what it streamed is kept.") from None
            if delay is None or attempt >= settings.model_retries:
                raise error from None
            attempt += 1
            yield Piece("retry", f"{_busy(failed.error, settings)}: retrying in {delay:g} s "
                                 f"(retry {attempt} of {settings.model_retries})")
            await asyncio.sleep(delay)


class _Failed(Exception):
    """A call's exception, and whether anything of the answer had streamed."""

    def __init__(self, error: Exception, streamed: bool) -> None:
        self.error = error
        self.streamed = streamed


async def _call(litellm: ModuleType, args: dict[str, Any], reply: Reply) -> AsyncIterator[Piece]:
    try:
        response = await litellm.acompletion(**args)
    except Exception as exc:
        raise _Failed(exc, streamed=False) from None
    tags, blocks = ThinkTags(), ThinkingBlocks()
    streamed = False
    try:
        calls: dict[int, ToolCall] = {}
        async for chunk in response:
            usage = getattr(chunk, "usage", None)
            if usage is not None:
                reply.usage = usage
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            delta = choice.delta
            if choice.finish_reason:
                reply.finish_reason = choice.finish_reason
            if delta is None:
                continue
            thought = getattr(delta, "reasoning_content", None)
            if thought:
                streamed = True
                reply.reasoning += thought
                yield Piece("reasoning", thought)
            if getattr(delta, "thinking_blocks", None):
                blocks.add(delta.thinking_blocks)
            if delta.content:
                streamed = True
                for kind, text in tags.feed(delta.content):
                    yield _piece(reply, kind, text)
            for piece in delta.tool_calls or ():
                streamed = True
                call = calls.setdefault(piece.index or 0, ToolCall("", "", ""))
                if piece.id:
                    call.id = piece.id
                if piece.function is not None:
                    call.name += piece.function.name or ""
                    call.arguments += piece.function.arguments or ""
        for kind, text in tags.flush():
            yield _piece(reply, kind, text)
        reply.tool_calls = [calls[i] for i in sorted(calls)]
        reply.thinking_blocks = blocks.blocks
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        reply.thinking_blocks = blocks.blocks
        raise _Failed(exc, streamed) from None
    finally:
        # Close the HTTP stream at once: on stop, a hosted model would go on generating
        # (and billing) tokens nobody reads.
        # Shielded (a stop's scope would cancel it at once), but bounded.
        aclose = getattr(response, "aclose", None)
        if aclose is not None:
            with anyio.move_on_after(CLOSE_GRACE, shield=True), contextlib.suppress(Exception):
                await aclose()


def _piece(reply: Reply, kind: Literal["text", "reasoning"], text: str) -> Piece:
    if kind == "reasoning":
        reply.reasoning += text
    else:
        reply.text += text
    return Piece(kind, text)


def _retry_delay(exc: Exception, attempt: int) -> float | None:
    """Seconds before trying a failed call again, or None when it is not worth another try:
    the server's Retry-After when it sent one (up to RETRY_LONGEST), else a doubling delay."""
    status = _status(exc)
    if status not in RETRY_STATUSES:
        return None
    asked = _retry_after(exc)
    if asked is not None:
        return asked if asked <= RETRY_LONGEST else None
    return RETRY_FIRST * 2 ** attempt


def _retry_after(exc: Exception) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if headers is None:
        return None
    with contextlib.suppress(Exception):
        value = headers.get("retry-after")
        if value is not None:
            return max(0.0, float(value))
    return None


# The provider's key variable where it is not <PROVIDER>_API_KEY.
_KEY_VARIABLE = {"together_ai": "TOGETHERAI_API_KEY", "azure_ai": "AZURE_AI_API_KEY"}


def _provider_key(litellm: ModuleType, settings: Settings) -> str | None:
    """The client's own key for the model's provider when the client's environment is not the
    process's (the shared daemon): its value; NO_KEY when the client has none but the process
    does (another editor's key is never used); None: let litellm read the environment."""
    if settings.provider_keys is None or model_presets.keyless(settings.model, settings.api_base):
        return None
    try:
        provider = litellm.get_llm_provider(settings.model, api_base=settings.api_base)[1]
    except Exception:  # a model litellm cannot place: the call itself will say so
        return None
    name = _KEY_VARIABLE.get(provider, f"{provider.upper()}_API_KEY")
    if name in settings.provider_keys:
        return settings.provider_keys[name].get_secret_value()
    return NO_KEY if os.environ.get(name) else None


def key_source(litellm: ModuleType, settings: Settings) -> str:
    """Where the model's API key comes from, in a few words (never its value): the settings,
    the editor's environment (the shared daemon's clients), or the server's own."""
    if settings.api_key is not None:
        return "from the settings (apiKey)"
    if model_presets.keyless(settings.model, settings.api_base):
        return "none sent (a server on this machine: set apiKey for one that wants a key)"
    try:
        provider = litellm.get_llm_provider(settings.model, api_base=settings.api_base)[1]
    except Exception:  # a model litellm cannot place: nothing to name
        return "not set"
    name = _KEY_VARIABLE.get(provider, f"{provider.upper()}_API_KEY")
    if settings.provider_keys is not None:
        if name in settings.provider_keys:
            return f"from the editor's environment ({name})"
        return f"not set (the editor's environment has no {name})"
    if os.environ.get(name):
        return f"from the server's environment ({name})"
    return f"not set (no {name} in the environment)"


def _keys_missing(litellm: ModuleType, settings: Settings) -> bool:
    """No key for the model's provider in the environment either (OPENAI_API_KEY, ...)."""
    try:
        found = litellm.validate_environment(model=settings.model, api_base=settings.api_base)
    except Exception:  # a model litellm cannot place: let the call itself say what is wrong
        return False
    return any(key.endswith("_API_KEY") for key in found.get("missing_keys") or ())


NO_MODEL = ("No model is configured. Choose one in the oi settings (model): for example "
            "gpt-4o-mini with an OpenAI API key, or ollama_chat/llama3.1 for a local Ollama. "
            "Or set OI_MODEL in the environment.")


def describe_error(exc: Exception, settings: Settings, no_key_sent: bool = False) -> ModelError:
    """A clear, key-free sentence about a failed model call, and which failure it is."""
    status = _status(exc)
    text = _redact(str(exc), settings)
    where = f" at {settings.api_base}" if settings.api_base else ""
    name = type(exc).__name__
    first = text.splitlines()[0] if text else name
    if "Missing credentials" in text or "api_key client option must be set" in text \
            or (status == 401 and no_key_sent):
        return ModelError("noApiKey", f"No API key is set for the model {settings.model}{where}. "
                          "Set one in the oi settings (apiKey), or in the environment (for "
                          "example OPENAI_API_KEY for OpenAI).")
    if status in (401, 403):
        return ModelError("authFailed", f"The model{where} refused the API key ({status}): "
                          "check your API key (is it right, and still valid?).")
    if status == 429:
        return ModelError("rateLimited", f"The model{where} is rate limiting requests (429): "
                          "wait a little and try again, or check your plan's limits.")
    if status in (503, 529) or "overloaded" in text.lower():
        return ModelError("overloaded", f"The model{where} is overloaded"
                          f"{f' ({status})' if status else ''}: try again in a little while, "
                          "or choose another model.")
    if "ContextWindowExceeded" in name or "context length" in text.lower() \
            or "context_length_exceeded" in text:
        return ModelError("contextTooLong", f"The conversation is too long for the model "
                          f"{settings.model}: start a new conversation, or set a smaller "
                          "contextWindow so older messages are trimmed.")
    if status == 404:
        return ModelError("modelError", f"Model {settings.model!r} was not found{where} (404): "
                          "check the model name.")
    if "Connection" in name or "Timeout" in name or "connect" in text.lower():
        return ModelError("unreachable", f"Could not reach the model{where}: {_plain(first)}. "
                          "Check that the server is running and the address is right.")
    return ModelError("modelError", f"The model{where} failed"
                      f"{f' ({status})' if status else ''}: {_plain(first)}")


def _busy(exc: Exception, settings: Settings) -> str:
    """Why a call is tried again, in a few words."""
    status = _status(exc)
    where = f" at {settings.api_base}" if settings.api_base else ""
    if status == 429:
        return f"The model{where} is rate limiting requests (429)"
    if status in (503, 529):
        return f"The model{where} is overloaded ({status})"
    return f"The model{where} failed ({status})"


def _status(exc: Exception) -> int | None:
    """The provider's own HTTP status: litellm maps some (Anthropic's 529 overloaded) to 500
    and keeps the original as provider_status_code; Gemini's 503 arrives as a 500 that names
    it."""
    status = getattr(exc, "provider_status_code", None) or getattr(exc, "status_code", None)
    if status == 500 and "UNAVAILABLE" in str(exc):  # Gemini's 503, by its status name
        return 503
    return status if isinstance(status, int) else None


def _redact(text: str, settings: Settings) -> str:
    """Every key the server knows, by value (a server may echo the Authorization header),
    and anything shaped like an OpenAI key."""
    known = [settings.api_key.get_secret_value()] if settings.api_key is not None else []
    known += [key.get_secret_value() for key in (settings.provider_keys or {}).values()]
    text = keys.mask(text, known)
    return re.sub(r"(sk-|key-)[A-Za-z0-9_\-]{6,}", r"\1***", text)


def _plain(text: str) -> str:
    """An error's first line without litellm's class prefixes and markdown marks."""
    text = re.sub(r"^(?:litellm\.)?\w+(?:Error|Exception): (?:\w+(?:Error|Exception)(?: - |: ))*",
                  "", text)
    return text.replace("`", "").strip()


# Fenced code blocks (for models that answer with Markdown instead of tool calls) ---------------

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*\n(?P<code>.*?)"
                    r"^(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)


def code_blocks(text: str, runnable: set[str]) -> list[tuple[str, str]]:
    """(language, code) of each complete fenced block whose language can be run."""
    blocks = []
    for match in _FENCE.finditer(text):
        lang = match["lang"].lower()
        code = match["code"]
        if lang in runnable and code.strip():
            blocks.append((lang, code.rstrip("\n")))
    return blocks
