"""How `oi-lsp chat` shows things in a terminal: streamed markdown, code, output, history.

rich renders. The model's text streams as markdown: each finished block (a paragraph, a list,
a fenced code block) is printed once for good, and only the block still being written is
redrawn (a rich Live), so a long answer never redraws more than a few lines. Run output is
written raw as it arrives, so a loop's prints appear at once. A reasoning model's thinking
streams dim, its last lines only, and folds into one summary line when it ends.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.control import strip_control_codes
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.segment import Segment
from rich.syntax import Syntax
from rich.text import Text

from ..common import languages

HISTORY_SHOWN = 6  # messages of a continued conversation shown at start
REDRAW_INTERVAL = 1 / 15  # seconds between redraws of the block being written
THINKING_LINES = 3  # lines of the reasoning shown while it streams
MAX_TAIL = 400  # characters of an unfinished output line written again after a question

# Every control character but tab and newline (C0, DEL, C1), and the bidirectional overrides
# that make a line show other than it is (Trojan Source).
_UNSAFE = dict.fromkeys([*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0),
                         *range(0x202a, 0x202f), *range(0x2066, 0x206a)])


def safe(text: str) -> str:
    """Untrusted text (model text, code, output, names) as plain text: nothing reaches the
    terminal that it would obey. Character by character, so an escape split across two chunks
    cannot join either."""
    return strip_control_codes(text.replace("\r\n", "\n"), _UNSAFE)


def safe_output(text: str) -> str:
    """A run's output: as `safe`, a carriage return (progress bars) starting a new line."""
    return safe(text.replace("\r\n", "\n").replace("\r", "\n"))


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")

def split_finished(text: str) -> tuple[str, str]:
    """(finished blocks, the block still being written) of streamed markdown.

    A block is finished when a blank line outside a code fence is followed by a line that
    starts at the margin: then nothing later can change how it renders (an indented line
    could still belong to a list item above).
    """
    lines = text.split("\n")
    fence: str | None = None
    cut = 0  # index of the first line of the unfinished part
    offset = 0
    blank_before = False
    for line in lines[:-1]:  # the last line may still grow
        match = _FENCE.match(line)
        if fence is None and blank_before and line[:1] not in ("", " ", "\t"):
            cut = offset
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence) and not line.strip()[len(marker):].strip():
                fence = None
        blank_before = fence is None and not line.strip()
        offset += len(line) + 1
    return text[:cut], text[cut:]


class Block:
    """One markdown block as rich draws it, without the blank lines rich puts above some
    elements (lists): the renderer spaces blocks itself, one blank line apart."""

    def __init__(self, text: str) -> None:
        self.markdown = Markdown(text)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.markdown, options, pad=False)
        while lines and not "".join(seg.text for seg in lines[0]).strip():
            lines.pop(0)
        for line in lines:
            yield from line
            yield Segment.line()


class Renderer:
    def __init__(self, console: Console, errors: Console | None = None) -> None:
        self.console = console
        self.errors = errors or console
        self._live: Live | None = None
        self._pending = ""  # the streamed message's text not printed for good yet
        self._blocks = 0  # blocks of the current message printed for good
        self._drawn = 0.0
        self._line_start = True  # raw output ended with a newline (or none was written)
        self._tail = ""  # raw output's last line so far, when it has no newline yet
        # An answer typed for a program (oi/input) the terminal showed already: taken off the
        # front of the output that echoes it.
        self.echoed = ""
        self._thought = ""  # the reasoning streaming now
        self._thought_since = 0.0
        self._thinking: Live | None = None

    # oi/stream chunks --------------------------------------------------------------------------

    def chunk(self, params: dict[str, Any]) -> None:
        type_ = params.get("type")
        content = params.get("content") or ""
        if type_ == "reasoning":
            if content:
                self._reason(safe(content))
            return
        if type_ == "status" and params.get("format") == "retrying" and content:
            self.note(str(content), "yellow")
            return
        if type_ != "status":
            self._fold_thought()
        if type_ == "message":
            if params.get("start"):
                self.finish()
            if content:
                self._message(safe(content))
            if params.get("end"):
                self.finish()
        elif type_ == "console" and params.get("format") == "active_line":
            pass  # the code is already printed above its output: no line to highlight
        elif type_ == "console":
            self.finish()
            content = self._unechoed(content)
            if content:
                self.raw(safe_output(content))
        elif type_ == "image" and content:
            fmt = safe(str(params.get("format") or ""))
            size = len(content) * 3 // 4 if fmt.startswith("base64") else len(content)
            self.note(f"[image output: {fmt}, {size // 1024 + 1} KB; open the workspace in an "
                      "editor to see it]")
        elif type_ == "code" and content:
            self.note(f"[{safe(str(params.get('format') or 'code'))} output: "
                      f"{len(content)} characters]")
        # Other statuses need no drawing; `confirmation` is shown by the app (it knows what was
        # proposed, so it shows the code again only when the user edited it).

    def _reason(self, content: str) -> None:
        if not self._thought:
            self.finish()
            self.newline()
            self._thought_since = time.monotonic()
        self._thought += content
        if not self.console.is_terminal:
            return  # summarised once it ends
        if self._thinking is None:
            # transient: the streaming lines give way to the summary line
            self._thinking = Live(console=self.console, auto_refresh=False, transient=True,
                                  redirect_stdout=False, redirect_stderr=False)
            self._thinking.start()
        now = time.monotonic()
        if now - self._drawn >= REDRAW_INTERVAL:
            self._drawn = now
            self._thinking.update(self._thinking_view(), refresh=True)

    def _thinking_view(self) -> Text:
        width = max(20, self.console.width - 2)
        lines = [line for line in self._thought.strip().split("\n") if line.strip()]
        shown = [line if len(line) <= width else "…" + line[-width + 1:]
                 for line in lines[-THINKING_LINES:]]
        return Text("thinking…\n" + "\n".join(shown), style="dim italic")

    def _fold_thought(self) -> None:
        """The reasoning ended: one dim line in its place (how long, how much, how it began)."""
        if not self._thought:
            return
        if self._thinking is not None:
            self._thinking.stop()
            self._thinking = None
        seconds = time.monotonic() - self._thought_since
        words = len(self._thought.split())
        first = " ".join(self._thought.split())
        head = f"▸ thought for {seconds:.0f} s, {words} words: " if seconds >= 1 \
            else f"▸ thought, {words} words: "
        room = max(10, self.console.width - len(head) - 1)
        self.console.print(Text(head + (first if len(first) <= room
                                        else first[:room - 1] + "…"), style="dim italic"),
                           soft_wrap=False, overflow="ellipsis", no_wrap=True)
        self._thought = ""
        self._drawn = 0.0
        self.at_line_start()

    def _unechoed(self, content: str) -> str:
        same = 0
        while same < min(len(content), len(self.echoed)) and \
                content[same] == self.echoed[same]:
            same += 1
        if same < min(len(content), len(self.echoed)):  # other output came first
            self.echoed = ""
            return content
        self.echoed = self.echoed[same:]
        return content[same:]

    def _message(self, content: str) -> None:
        if self._live is None and not self._pending:
            self.newline()
        self._pending += content
        finished, self._pending = split_finished(self._pending)
        if finished.strip():
            self._print_block(finished)
        if not self.console.is_terminal or not self._pending.strip():
            return  # without a terminal, blocks are printed once finished
        if self._live is None:
            if self._blocks:
                self.console.print()
            self._live = Live(console=self.console, auto_refresh=False,
                              vertical_overflow="visible", redirect_stdout=False,
                              redirect_stderr=False)
            self._live.start()
        now = time.monotonic()
        if now - self._drawn >= REDRAW_INTERVAL:
            self._drawn = now
            self._live.update(Block(self._pending), refresh=True)

    def _print_block(self, text: str) -> None:
        if self._live is not None:
            self._live.update(Block(text), refresh=True)
            self._live.stop()
            self._live = None
        else:
            if self._blocks:
                self.console.print()
            self.console.print(Block(text))
        self._blocks += 1

    def finish(self) -> None:
        """End the streamed message: print what is left of it for good."""
        self._fold_thought()
        if self._pending.strip():
            self._print_block(self._pending)
        elif self._live is not None:
            self._live.stop()
            self._live = None
        self._pending = ""
        self._blocks = 0
        self._drawn = 0.0

    def raw(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()
        self._line_start = text.endswith("\n")
        last = text.rfind("\n")
        self._tail = (text[last + 1:] if last >= 0 else self._tail + text)[-MAX_TAIL:]

    def partial_line(self) -> str:
        """The output line a note would cut (it has no newline yet), to write again after
        the note: a call's "⚙ server.tool(...)" whose " · 0.12 s" comes once it returns."""
        if self._line_start or not self._tail.strip():
            return ""
        return self._tail if len(self._tail) < MAX_TAIL else "…" + self._tail[-MAX_TAIL // 2:]

    @property
    def at_start(self) -> bool:
        """Whether the output so far ends a line."""
        return self._line_start

    def at_line_start(self) -> None:
        """The terminal moved to a new line by itself (it echoed an Enter)."""
        self._line_start = True
        self._tail = ""

    def newline(self) -> None:
        if not self._line_start:
            self.raw("\n")

    # Whole things ------------------------------------------------------------------------------

    def code(self, language: str, code: str, title: str, border: str = "cyan") -> None:
        self.finish()
        self.newline()
        self.console.print(Panel(Syntax(safe(code).rstrip("\n"), languages.lexer(safe(language)),
                                        theme="monokai", word_wrap=True),
                                 title=Text(safe(title)), title_align="left",
                                 border_style=border))

    def note(self, text: str, style: str = "dim") -> None:
        self.finish()
        self.newline()
        self.console.print(Text(safe(text), style=style), soft_wrap=True)

    def error(self, text: str) -> None:
        self.finish()
        self.newline()
        self.console.file.flush()
        self.errors.print(Text(safe(text), style="bold red"), soft_wrap=True)

    def history(self, messages: list[dict[str, Any]], total: int | None = None) -> None:
        """The end of a continued conversation (`messages`: its last page; `total`: how
        many it has), one line per message (reasoning left out)."""
        before = (total if total is not None else len(messages)) - len(messages)
        messages = [m for m in messages if m.get("type") != "reasoning"]
        if not messages:
            return
        shown = messages[-HISTORY_SHOWN:]
        earlier = before + len(messages) - len(shown)
        self.note("Continuing this folder's conversation"
                  + (f" ({earlier} earlier messages not shown):" if earlier else ":"))
        width = max(40, self.console.width - 4)
        for message in shown:
            label = _label(message)
            line = " ".join(safe(_shown(message)).split())
            if len(label) + len(line) + 2 > width:
                line = line[:max(0, width - len(label) - 3)] + "…"
            text = Text("  ")
            text.append(f"{safe(label)}: ", style="bold")
            text.append(line, style="dim")
            self.console.print(text, soft_wrap=True)


def usage_line(usage: dict[str, Any]) -> str:
    """A turn's tokens and cost in one line (oi/turn's usage), as the editors show it; empty
    when no model call answered."""
    prompt, completion = int(usage.get("promptTokens") or 0), int(usage.get("completionTokens")
                                                                  or 0)
    calls = int(usage.get("calls") or 0)
    if not calls or not prompt + completion:
        return ""
    cached, reasoning = usage.get("cachedTokens"), usage.get("reasoningTokens")
    into = f"{prompt:,} in" + (f", {cached:,} cached" if cached else "")
    out = f"{completion:,} out" + (f", {reasoning:,} reasoning" if reasoning else "")
    parts = [f"{prompt + completion:,} tokens ({into}{';' if cached or reasoning else ','} {out})"]
    if calls > 1:
        parts.append(f"{calls} model calls")
    if usage.get("cost") is not None:
        saved = usage.get("cacheSaved")
        parts.append(_usd(float(usage["cost"]))
                     + (f" (cache saved {_usd(float(saved))})" if saved and saved > 0 else ""))
    if usage.get("sessionCost") is not None:
        parts.append(f"session {_usd(float(usage['sessionCost']))}")
    return " · ".join(parts)


def _usd(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _label(message: dict[str, Any]) -> str:
    role, type_, fmt = message.get("role"), message.get("type"), message.get("format")
    if role == "user":
        return f"you ran {fmt}" if type_ == "code" else "you"
    if role == "assistant":
        if type_ == "message":
            return "assistant"
        outcome = message.get("outcome")
        return f"proposed {fmt}" + (f" ({_FATES.get(outcome, outcome)})" if outcome else "")
    if type_ == "confirmation":
        return f"ran {fmt}"
    if type_ == "console":
        return "output"
    if type_ in ("error", "image"):
        return str(type_)
    return f"{type_} {fmt or ''}".strip()


_FATES = {"autoRan": "ran by itself", "timedOut": "timed out", "expired": "not answered"}


def _shown(message: dict[str, Any]) -> str:
    """A message's text for a one-line summary (a picture or HTML is named, not printed)."""
    if message.get("type") == "image" or (message.get("role") == "computer"
                                          and message.get("type") == "code"):
        return f"[{message.get('format') or 'display'} shown]"
    return str(message.get("content") or "")


