"""A live transcript of a workspace's open conversation, as a Markdown file any editor can show.

Plain LSP clients render no `oi/stream`: the transcript is where they read the model's text, the
code with its fate and what it printed. It is rewritten (in a thread, atomically) a moment after
each change, with the block that is still streaming (model text, a run's output) at its end.
Images a run displayed are written as files beside it and linked.

Layout: `<data dir>/sessions/<workspace hash>/transcripts/<conversation id>.md`, its images in
`<conversation id>.files/` next to it, one file per image, named by its content.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import protocol
from ..common.files import atomic_write
from ..protocol import Message
from .aio import to_disk
from .conversation import Conversation
from .export import fence
from .run_output import NO_OUTPUT

log = logging.getLogger(__name__)

INTERVAL = 0.2  # seconds a burst of chunks is gathered into one write
HEAD_LINES = 40  # an output longer than HEAD_LINES + TAIL_LINES is shown as its start ...
TAIL_LINES = 10  # ... and its end, with the count of the lines between
LIVE_KEEP = 100_000  # characters kept at each end of a block that is still streaming

_IMAGE_SUFFIX = {"base64.png": ".png", "base64.jpeg": ".jpeg", "svg": ".svg"}
_FATES = {"ran": "ran", "edited": "ran as edited", "autoRan": "ran without asking (autoRun)",
          "skipped": "skipped", "stopped": "stopped", "timedOut": "timed out",
          "error": "ran, failed", "expired": "not answered (the server stopped)"}
_STATES = {"idle": "idle", "thinking": "the model is thinking",
           "waiting": "waiting for your approval", "running": "running code"}


@dataclass
class Live:
    """The block that is still streaming: its kind and text (start and end kept)."""

    role: str
    type: str
    format: str | None
    text: str = ""
    dropped_lines: int = 0  # lines cut from the middle of a long block

    def add(self, content: str) -> None:
        self.text += content
        if len(self.text) > 3 * LIVE_KEEP:  # keep memory flat during a flood
            middle = self.text[LIVE_KEEP:-LIVE_KEEP]
            self.dropped_lines += middle.count("\n")
            self.text = self.text[:LIVE_KEEP] + self.text[-LIVE_KEEP:]


@dataclass
class Snapshot:
    """What one write renders: copied on the event loop, rendered and written in a thread."""

    path: Path
    title: str
    workspace: str
    messages: list[Message]
    live: Live | None
    state: str
    images: dict[str, bytes] = field(default_factory=dict)  # file name -> its bytes
    earlier: int = 0  # messages before the first of `messages`, not shown


class Transcript:
    """The transcript of one workspace; off until a front end turns it on (plain clients)."""

    def __init__(self, conversation: Conversation, workspace: str) -> None:
        self.conversation = conversation
        self.workspace = workspace
        self.enabled = False
        self._live: Live | None = None
        self._state = "idle"
        self._dirty = False
        self._writing: asyncio.Task[None] | None = None
        self.lines = 0  # of the file as last written (an editor may scroll to its end)

    def path(self) -> Path:
        conversation = self.conversation
        return conversation.store.folder(self.workspace) / "transcripts" / f"{conversation.id}.md"

    def saw(self, method: str, params: dict[str, Any]) -> None:
        """A notification the workspace sent: follow the stream, write again soon."""
        if not self.enabled or method != protocol.STREAM:
            return
        kind = params.get("type")
        if kind == "status":
            self._state = params.get("format") or "idle"
        elif kind == "console" and params.get("format") == "active_line":
            return
        elif params.get("start"):
            self._live = Live(params["role"], kind or "", params.get("format"))
        elif params.get("end"):
            self._live = None  # the conversation records the whole block
        elif self._live is not None and params.get("content"):
            self._live.add(params["content"])
        self.update()

    def update(self) -> None:
        """Write the transcript again, a moment from now (one writer; the newest state wins)."""
        if not self.enabled:
            return
        self._dirty = True
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._write_loop())

    async def flush(self) -> Path:
        """Turn it on and wait until the file holds the conversation as it is now."""
        self.enabled = True
        self.update()
        if self._writing is not None:
            await self._writing
        return self.path()

    async def _write_loop(self) -> None:
        while self._dirty:
            await asyncio.sleep(INTERVAL)
            self._dirty = False
            live = self._live
            snapshot = Snapshot(self.path(), self.conversation.title,
                                self.workspace, list(self.conversation.messages),
                                Live(live.role, live.type, live.format, live.text,
                                     live.dropped_lines) if live else None, self._state,
                                earlier=self.conversation.base)
            try:
                self.lines = await to_disk(write, snapshot)
            except OSError:
                log.exception("could not write the transcript %s", snapshot.path)


def write(snapshot: Snapshot) -> int:
    """Render the snapshot and write it, with the images it links (each written once);
    returns its number of lines."""
    body = render(snapshot)
    files = snapshot.path.with_suffix(".files")
    for name, data in snapshot.images.items():
        if not (files / name).exists():
            atomic_write(files / name, data)
    atomic_write(snapshot.path, body.encode())
    return body.count("\n")


def render(snapshot: Snapshot) -> str:
    """The transcript as Markdown; the images it links are added to `snapshot.images`."""
    folder = snapshot.workspace.removeprefix("file://")
    state = _STATES.get(snapshot.state, snapshot.state)
    parts = [f"# Open Interpreter: {snapshot.title or 'new conversation'}",
             f"_{folder} · {state} · updated {time.strftime('%H:%M:%S')}_"]
    if snapshot.earlier:
        parts.append(f"_{snapshot.earlier:,} earlier messages are not shown here: the "
                     "conversation keeps them (export it to read them all)._")
    speaker = ""
    proposals: dict[str, Message] = {}  # tool call id / turn -> the code it asked to run
    for m in snapshot.messages:
        heading = _heading(m)
        if heading and (heading != speaker or heading == "## Run"):  # each run its own
            parts.append(heading)
        speaker = heading or speaker
        parts.extend(_message(m, snapshot, proposals))
    if snapshot.live is not None:
        parts.extend(_live(snapshot.live, speaker))
    return "\n\n".join(p for p in parts if p) + "\n"


def _heading(m: Message) -> str:
    if m.role == "user":
        return "## Run" if m.type == "code" else "## You"
    if m.role == "assistant":
        return "## Open Interpreter"
    return ""


def _message(m: Message, snapshot: Snapshot, proposals: dict[str, Message]) -> list[str]:
    """The Markdown of one message (nothing for the ones the transcript folds away)."""
    if m.type == "message":
        return [m.content, _context(m)]
    if m.type == "reasoning":
        return [_thought(m.content)] if m.content.strip() else []
    if m.type == "error":
        return ["> **Error:** " + m.content.replace("\n", "\n> ")]
    if m.type == "code" and m.role in ("user", "assistant") and m.format != "text":
        proposals[m.tool_call_id or m.turn_id or ""] = m
        return [_code(m.content, m.format), _fate(m, snapshot.state)]
    if m.type == "confirmation":
        asked = proposals.get(m.tool_call_id or m.turn_id or "")
        if asked is not None and asked.content != m.content:
            return ["What ran (edited):", _code(m.content, m.format)]
        return []
    if m.type == "console":
        if m.content.strip() in ("", NO_OUTPUT):
            return ["_(no output)_"] if m.content.strip() else []
        return [_output(m.content)]
    if m.type == "image":
        return [_image(m, snapshot)]
    if m.type == "code" and m.format == "html":
        return [f"_(HTML output, {len(m.content):,} characters, not shown here)_"]
    return []


def _thought(text: str, streaming: bool = False) -> str:
    """The model's reasoning as a quoted block under a label, apart from its answer."""
    quoted = "\n".join(f"> {line}" if line else ">" for line in text.strip().split("\n"))
    return f"> _Thinking{'…' if streaming else ''}_\n>\n{quoted}"


def _context(m: Message) -> str:
    context = m.context
    if context is None or not context.uri:
        return ""
    where = Path(context.uri.removeprefix("file://")).name
    if context.range is not None:
        where += f", lines {context.range.start.line + 1}–{context.range.end.line + 1}"
    return f"_(context: {where})_"


def _code(text: str, language: str | None) -> str:
    bar = fence(text)
    return f"{bar}{language or ''}\n{text.rstrip()}\n{bar}"


def _fate(m: Message, state: str) -> str:
    pending = "waiting for your approval" if state == "waiting" else "running"
    fate = _FATES.get(m.outcome or "", pending)
    risk = m.risk.summary() if m.risk is not None else ""
    return f"_→ {fate}_" + (f" · _{risk}_" if risk else "")


def _output(text: str, dropped: int = 0, running: bool = False) -> str:
    """A run's output, trimmed to its first and last lines, with the count of its lines."""
    lines = text.rstrip("\n").split("\n")
    total = len(lines) + dropped
    if len(lines) > HEAD_LINES + TAIL_LINES:
        hidden = len(lines) - HEAD_LINES - TAIL_LINES + dropped
        lines = [*lines[:HEAD_LINES], f"[... {hidden:,} lines not shown ...]",
                 *lines[-TAIL_LINES:]]
    elif dropped:
        lines.insert(len(lines) // 2, f"[... {dropped:,} lines not shown ...]")
    body = "\n".join(lines)
    label = f"Output ({total:,} line{'s' if total != 1 else ''}" + (
        ", still running):" if running else "):")
    return f"{label}\n\n{_code(body, 'text')}"


def _image(m: Message, snapshot: Snapshot) -> str:
    suffix = _IMAGE_SUFFIX.get(m.format or "")
    try:
        data = m.content.encode() if m.format == "svg" else base64.b64decode(m.content,
                                                                            validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if suffix is None or not data:
        return "_(an image was shown here)_"
    name = hashlib.sha256(data).hexdigest()[:32] + suffix
    snapshot.images[name] = data
    return f"![output]({snapshot.path.stem}.files/{name})"


def _live(live: Live, speaker: str) -> list[str]:
    """The block still streaming: the model's text so far, or the output of a run."""
    if live.role == "assistant" and live.type == "message":
        heading = "## Open Interpreter"
        return [heading if heading != speaker else "", live.text + " …"]
    if live.role == "assistant" and live.type == "reasoning":
        heading = "## Open Interpreter"
        return [heading if heading != speaker else "", _thought(live.text, streaming=True)]
    if live.type == "console":
        return [_output(live.text, live.dropped_lines, running=True)] if live.text else []
    return []
