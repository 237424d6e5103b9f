"""How `oi-lsp chat` shows things in a terminal: streamed markdown, code, output, history.

rich does the rendering. The model's text is re-rendered as markdown while it streams (a Live
display, so a half-written list or code fence looks right as soon as it is complete); run output
is written raw as it arrives, so a long-running loop's prints appear at once.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

HISTORY_SHOWN = 6  # messages of a continued conversation shown at start


class Renderer:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._text = ""
        self._line_start = True  # raw output ended with a newline (or none was written)

    # oi/stream chunks --------------------------------------------------------------------------

    def chunk(self, params: dict[str, Any]) -> None:
        type_ = params.get("type")
        content = params.get("content") or ""
        if type_ == "message":
            if params.get("start"):
                self.finish()
            if content:
                self._message(content)
            if params.get("end"):
                self.finish()
        elif type_ == "console":
            self.finish()
            if content:
                self.raw(content)
            if params.get("end"):
                self.newline()
        elif type_ == "image" and content:
            self.finish()
            size = len(content) * 3 // 4 if params.get("format", "").startswith("base64") \
                else len(content)
            self.note(f"[image output: {params.get('format')}, {size // 1024 + 1} KB]")
        elif type_ == "code" and content:
            self.finish()
            self.note(f"[HTML output: {len(content)} characters]")
        # `status` and `confirmation` are shown by the app (it knows what was proposed).

    def _message(self, content: str) -> None:
        self._text += content
        if self._live is None:
            self._live = Live(Markdown(self._text), console=self.console,
                              refresh_per_second=8, vertical_overflow="visible",
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        else:
            self._live.update(Markdown(self._text))

    def finish(self) -> None:
        """End the streamed message: its last render stays on the screen."""
        if self._live is not None:
            self._live.update(Markdown(self._text))
            self._live.stop()
            self._live = None
        self._text = ""

    def raw(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()
        self._line_start = text.endswith("\n")

    def newline(self) -> None:
        if not self._line_start:
            self.raw("\n")

    # Whole things ------------------------------------------------------------------------------

    def code(self, language: str, code: str, title: str) -> None:
        self.finish()
        self.newline()
        self.console.print(Panel(Syntax(code.rstrip("\n"), _lexer(language),
                                        theme="monokai", word_wrap=True),
                                 title=title, title_align="left", border_style="cyan"))

    def note(self, text: str, style: str = "dim") -> None:
        self.finish()
        self.newline()
        self.console.print(Text(text, style=style), soft_wrap=True)

    def error(self, text: str) -> None:
        self.note(text, "bold red")

    def history(self, messages: list[dict[str, Any]]) -> None:
        """The end of a continued conversation, one line per message."""
        if not messages:
            return
        shown = messages[-HISTORY_SHOWN:]
        self.note(f"Continuing this folder's conversation ({len(messages)} messages). "
                  "The last ones:")
        width = max(40, self.console.width - 4)
        for message in shown:
            label = _label(message)
            line = " ".join(str(message.get("content") or "").split())
            if len(label) + len(line) + 2 > width:
                line = line[:max(0, width - len(label) - 3)] + "…"
            text = Text("  ")
            text.append(f"{label}: ", style="bold dim")
            text.append(line, style="dim")
            self.console.print(text)
        self.console.print()


def _label(message: dict[str, Any]) -> str:
    role, type_ = message.get("role"), message.get("type")
    if role == "user":
        return "you"
    if role == "assistant":
        return "assistant" if type_ == "message" else f"proposed {message.get('format')}"
    if type_ == "confirmation":
        return f"ran {message.get('format')}"
    if type_ == "console":
        return "output"
    return str(type_)


def _lexer(language: str) -> str:
    return {"shell": "bash", "sh": "bash", "js": "javascript"}.get(language, language)
