"""Magic commands: a chat message that starts with `%` is a command for the server, as in Open
Interpreter. It is answered here and never reaches the model."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import TypeAdapter, ValidationError

from .. import __version__
from ..common.files import write_in
from ..executors.base import RunResult
from ..protocol import Message
from . import context_window, export, llm
from .aio import in_thread, to_disk
from .prompt import to_model_messages
from .settings import Settings, SettingsError
from .situation import Situation
from .turn import Outcome

if TYPE_CHECKING:
    from .conversation import Conversation
    from .repls import Repls

HELP = """\
Magic commands (typed as the chat message; they never reach the model):
  %% <command>          run a shell command in the workspace's shell
  %reset                start a new conversation and restart the REPLs (the old one is kept)
  %undo                 remove your last message and everything after it
  %verbose [true|false] log what is sent to the model in the server log (no value: true)
  %auto_run [true|false] run proposals without asking (no value: true; not in an untrusted
                        workspace)
  %tokens [prompt]      tokens and estimated cost of the current context (plus `prompt`)
  %info                 model, settings, conversation and REPLs of this workspace
  %save_message [path]  save the conversation as JSON (default messages.json in the workspace)
  %load_message [path]  load a conversation from JSON (default messages.json in the workspace)
  %markdown [path]      export the conversation as Markdown into the workspace
  %jupyter [path]       export the conversation as a Jupyter notebook into the workspace
  %help                 this help
"""

_MESSAGES = TypeAdapter(list[Message])


class Host(Protocol):
    """What the commands need from the workspace they run in (inside its turn slot: nothing
    else runs meanwhile)."""

    folder: Path
    conversation: Conversation
    repls: Repls

    def settings(self) -> Settings: ...

    async def configure(self, values: dict[str, Any]) -> tuple[Settings, list[str]]: ...

    async def situation(self) -> Situation: ...


@dataclass(slots=True)
class Console:
    """Where a command writes: `say` streams text to the chat; `shell` runs a command in the
    workspace's shell REPL, streaming its output."""

    say: Callable[[str], None]
    shell: Callable[[str], Awaitable[RunResult]]


class MagicError(Exception):
    """A command that cannot be done; the message says why."""


def is_command(message: str) -> bool:
    """Only a message whose first line is a command is one: `%% <command>`, a known `%name`,
    or a lone line shaped like one (answered as unknown). A pasted notebook cell (`%%bash`
    and its lines) or `%matplotlib inline` above a question goes to the model."""
    first, _, rest = message.strip().partition("\n")
    name, _ = split(first)
    if name == "%%":
        return first == "%%" or first[2:3].isspace()
    return name in COMMANDS or (not rest.strip() and re.fullmatch(r"%[a-z_]+", name) is not None)


def split(line: str) -> tuple[str, str]:
    """('%%', command) or ('%name', argument) of a command line."""
    text = line.strip()
    if text.startswith("%%"):
        return "%%", text[2:].strip()
    name, _, arg = text.partition(" ")
    return name.lower(), arg.strip()


async def run(message: str, host: Host, console: Console) -> Outcome:
    """Run the command on the message's first line; the lines after it are not run."""
    first, _, rest = message.strip().partition("\n")
    name, arg = split(first)
    if rest.strip():
        console.say("Only the first line of a message is a command: the lines after it were "
                    "not run.\n")
    command = COMMANDS.get(name)
    if command is None:
        console.say(f"Unknown command {name}.\n\n{HELP}")
        return Outcome("done")
    try:
        await command(host, console, arg)
    except MagicError as exc:
        console.say(f"{exc}\n")
        return Outcome("error", str(exc))
    return Outcome("done")


# Commands ------------------------------------------------------------------------------------

async def _shell(host: Host, console: Console, arg: str) -> None:
    if not arg:
        raise MagicError("Usage: %% <shell command>")
    result = await console.shell(arg)
    if result.status == "error" and result.error and result.exit_code is None:
        raise MagicError(result.error)


async def _reset(host: Host, console: Console, arg: str) -> None:
    await host.conversation.begin([])
    await host.repls.restart_all()
    console.say("Started a new conversation and restarted the REPLs "
                "(the previous conversation is kept: see the saved conversations).\n")


async def _undo(host: Host, console: Console, arg: str) -> None:
    last = next((i for i in range(len(host.conversation.messages) - 1, -1, -1)
                 if host.conversation.messages[i].role == "user"
                 and host.conversation.messages[i].type == "message"), None)
    if last is None:
        console.say("Nothing to undo.\n")
        return
    text = host.conversation.messages[last].content.strip().splitlines()[0][:60]
    after = len(host.conversation.messages) - last - 1
    host.conversation.keep(host.conversation.base + last)
    console.say(f"Removed your last message (“{text}”) and the {after} message"
                f"{'' if after == 1 else 's'} after it.\n")


def _flag(arg: str, command: str) -> bool:
    value = arg.strip().lower() or "true"
    if value in ("true", "on", "yes", "1"):
        return True
    if value in ("false", "off", "no", "0"):
        return False
    raise MagicError(f"Usage: {command} [true|false] (got {arg!r})")


async def _verbose(host: Host, console: Console, arg: str) -> None:
    on = _flag(arg, "%verbose")
    await host.configure({"verbose": on})
    console.say("Verbose mode is on: every request to the model is written to the server log.\n"
                if on else "Verbose mode is off.\n")


async def _auto_run(host: Host, console: Console, arg: str) -> None:
    on = _flag(arg, "%auto_run")
    if on and not host.settings().trusted:
        raise MagicError("This workspace is not trusted: auto-run stays off. Trust the "
                         "workspace in the editor to turn it on.")
    try:
        await host.configure({"autoRun": on})
    except SettingsError as exc:
        raise MagicError(str(exc)) from None
    console.say("Auto-run is on: proposed code runs without asking.\n" if on
                else "Auto-run is off: every proposal waits for your approval.\n")


async def _tokens(host: Host, console: Console, arg: str) -> None:
    settings = host.settings()
    litellm = await llm.warm_up()
    recent = await host.conversation.recent(context_window.reach(litellm, settings))
    messages = to_model_messages(recent, settings, await host.situation())
    if arg:
        messages.append({"role": "user", "content": arg})
    report = await in_thread(_count, litellm, settings, messages)
    console.say(report)


def _count(litellm: Any, settings: Settings, messages: list[dict[str, Any]]) -> str:
    name = settings.model or "gpt-4o-mini"
    tools = [llm.EXECUTE_TOOL] if settings.tool_calls else None
    tokens = context_window.tokens(litellm, name, messages=messages, tools=tools)
    lines = [f"The current context is {tokens:,} tokens ({len(messages)} messages, "
             f"system message included)" + ("" if settings.model else
                                           ", counted as for gpt-4o-mini: no model is set")
             + "."]
    window = settings.context_window
    if window is None:
        try:
            window = int(litellm.get_model_info(name).get("max_input_tokens") or 0) or None
        except Exception:  # litellm raises for models it does not know
            window = None
    if window:
        lines.append(f"That is {tokens / window:.1%} of the {window:,}-token context window.")
    try:
        prompt_cost, _ = litellm.cost_per_token(model=name, prompt_tokens=tokens,
                                                completion_tokens=0)
        lines.append(f"Sending it would cost about ${prompt_cost:.6f} (prompt tokens only, "
                     "from litellm's price list).")
    except Exception:
        lines.append(f"The price of {name!r} is unknown (litellm has no price for it), so "
                     "no cost can be estimated.")
    return "\n".join(lines) + "\n"


async def _info(host: Host, console: Console, arg: str) -> None:
    s = host.settings()
    conversation = host.conversation
    repls = ", ".join(f"{lang} (pid {pid})" if pid else f"{lang} (not started)"
                      for lang, pid in host.repls.started()) or "none started yet"
    lines = [
        f"oi-lsp {__version__}, Python {platform.python_version()}, {platform.platform()}",
        f"Workspace: {host.folder}",
        f"Conversation: {conversation.id} “{conversation.title or '(empty)'}”, "
        f"{conversation.count} messages",
        f"Saved in: {conversation.file()}",
        f"Model: {s.model or '(none set)'}" + (f" at {s.api_base}" if s.api_base else "")
        + f", API key {llm.key_source(await llm.warm_up(), s) if s.model else 'not needed'}",
        f"Context window: {s.context_window or 'the model’s'}, max tokens: "
        f"{s.max_tokens or 'the model’s'}, temperature: "
        f"{s.temperature if s.temperature is not None else 'the model’s'}",
        f"Auto-run: {_on(s.auto_run)}, verbose: {_on(s.verbose)}, "
        f"trusted workspace: {'yes' if s.trusted else 'no'}, tool calls: {_on(s.tool_calls)}",
        f"Max steps per turn: {s.max_steps}, output sent to the model: {s.max_output} "
        f"characters, execution timeout: "
        f"{f'{s.execution_timeout:g} s' if s.execution_timeout else 'none'}",
        f"REPLs: {repls}; Python kernel in {host.repls.python().describe()}",
        f"Server executable: {sys.executable}",
    ]
    console.say("\n".join(lines) + "\n")


def _on(value: bool) -> str:
    return "on" if value else "off"


def _path(host: Host, arg: str, default: str) -> Path:
    """A path the user typed: relative ones are in the workspace."""
    text = arg.strip().strip("\"'") or default
    path = Path(text).expanduser()
    return path if path.is_absolute() else host.folder / path


def _given_absolute(arg: str) -> bool:
    """The user named the place: an absolute path, or one in a home folder (~)."""
    text = arg.strip().strip("\"'")
    return Path(text).is_absolute() or text.startswith("~")


async def _save_message(host: Host, console: Console, arg: str) -> None:
    path = _path(host, arg, "messages.json")
    _, messages = await host.conversation.read(None)
    await _write(host, path, export.to_json(messages), _given_absolute(arg))
    console.say(f"Saved {len(messages)} messages to {path}.\n")


async def _load_message(host: Host, console: Console, arg: str) -> None:
    path = _path(host, arg, "messages.json")
    try:
        raw = await in_thread(path.read_bytes)
    except OSError as exc:
        raise MagicError(f"Cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
        if isinstance(data, dict):  # a saved session file also holds its messages
            data = data.get("messages")
        messages = _MESSAGES.validate_python(data)
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise MagicError(f"{path} is not a JSON list of messages "
                         f"({{role, type, content, ...}}): {first}") from None
    kept = bool(host.conversation.count)
    await host.conversation.begin(messages)
    console.say(f"Loaded {len(messages)} messages from {path} into a new conversation"
                + (" (the previous one is kept)." if kept else ".") + "\n")


async def _export(host: Host, console: Console, arg: str, fmt: export.Format) -> None:
    title = host.conversation.title
    if arg:
        path = _path(host, arg, "")
    else:  # a new file named after the conversation; never overwrite one
        slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()[:50] or "conversation"
        path = await in_thread(_free_name, host.folder, slug, export.SUFFIX[fmt])
    _, messages = await host.conversation.read(None)
    content = await in_thread(export.render, messages, fmt, title)
    await _write(host, path, content, _given_absolute(arg))
    console.say(f"Exported the conversation to {path}.\n")


def _free_name(folder: Path, slug: str, suffix: str) -> Path:
    path, n = folder / f"{slug}{suffix}", 1
    while os.path.lexists(path):  # a link (even a dangling one) is taken too
        n += 1
        path = folder / f"{slug}-{n}{suffix}"
    return path


async def _markdown(host: Host, console: Console, arg: str) -> None:
    await _export(host, console, arg, "markdown")


async def _jupyter(host: Host, console: Console, arg: str) -> None:
    await _export(host, console, arg, "ipynb")


async def _write(host: Host, path: Path, content: str, absolute: bool) -> None:
    """Write a file the user asked for, following no symbolic link (files.write_in); a path
    not `absolute` as the user gave it must stay in the workspace (no `..`, no linked folder
    leading out)."""
    root = host.folder.resolve()

    def inside(folder: Path) -> None:
        if not absolute and not folder.resolve().is_relative_to(root):
            raise MagicError(f"Refusing to write {path}: it is outside the workspace. Give an "
                             "absolute path to write there.")

    def write() -> None:
        inside(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = path.parent.resolve()
        inside(folder)  # a folder swapped for a link meanwhile
        if (folder / path.name).is_symlink():
            raise MagicError(f"Refusing to write {path}: it is a symbolic link (to "
                             f"{os.readlink(folder / path.name)}); links are not followed.")
        write_in(folder, path.name, content.encode())

    try:
        await to_disk(write)
    except OSError as exc:
        raise MagicError(f"Cannot write {path}: {exc.strerror or exc}") from None


async def _help(host: Host, console: Console, arg: str) -> None:
    console.say(HELP)


MagicCommand = Callable[[Host, Console, str], Awaitable[None]]
COMMANDS: dict[str, MagicCommand] = {
    "%%": _shell,
    "%reset": _reset,
    "%undo": _undo,
    "%verbose": _verbose,
    "%auto_run": _auto_run,
    "%tokens": _tokens,
    "%info": _info,
    "%save_message": _save_message,
    "%load_message": _load_message,
    "%markdown": _markdown,
    "%jupyter": _jupyter,
    "%help": _help,
}
