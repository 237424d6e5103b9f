"""One proposal shown as an ACP tool call: its code, its output (trimmed head and tail as the
model sees it), the images it displayed, and its final status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp import image_block, start_tool_call, text_block, tool_content, update_tool_call
from acp.schema import ToolCallLocation, ToolCallUpdate

from ..core.run_output import trim
from ..protocol import CodeOutcome, Message, Proposal

_IMAGE_TYPES = {"base64.png": "image/png", "base64.jpeg": "image/jpeg"}
_DONE: set[CodeOutcome] = {"ran", "edited", "autoRan"}


def title(language: str, code: str, risk: str = "") -> str:
    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
    if len(first) > 80:
        first = first[:79] + "…"
    shown = f"{language}: {first}"
    return f"{shown} [{risk}]" if risk else shown


def status_of(outcome: CodeOutcome | None) -> Any:
    return "completed" if outcome in _DONE else "failed"


@dataclass
class Call:
    id: str
    language: str
    code: str
    output: str = ""
    images: list[tuple[str, str]] = field(default_factory=list)  # (mime type, data)
    image: tuple[str, list[str]] | None = None  # an image still streaming: format, pieces
    ran: bool = False  # its code started (a confirmation came)
    # Its code as the conversation keeps it: the outcome the core sets there is its status.
    message: Message | None = None
    locations: list[ToolCallLocation] = field(default_factory=list)  # files the code names

    def status(self) -> Any:
        return status_of(self.message.outcome if self.message is not None else None)

    def start(self, proposal: Proposal, status: Any) -> Any:
        risk = proposal.risk.summary()
        content = [tool_content(text_block(f"```{self.language}\n{self.code}\n```"))]
        if risk:
            content.insert(0, tool_content(text_block(f"⚠ {risk}")))
        return start_tool_call(self.id, title(self.language, self.code, risk), kind="execute",
                               status=status, content=content,
                               locations=self.locations or None,
                               raw_input={"language": self.language, "code": self.code})

    def permission(self, start: Any) -> ToolCallUpdate:
        """The tool call as session/request_permission names it."""
        return ToolCallUpdate(tool_call_id=self.id, title=start.title, kind="execute",
                              status="pending", content=start.content,
                              locations=start.locations, raw_input=start.raw_input)

    def add_image(self, fmt: str | None, content: str | None, start: bool, end: bool) -> None:
        if start or self.image is None:
            self.image = (fmt or "", [])
        if content:
            self.image[1].append(content)
        if end and self.image is not None:
            mime = _IMAGE_TYPES.get(self.image[0])
            if mime:  # SVG and HTML are not ACP image content: a note says they were shown
                self.images.append((mime, "".join(self.image[1])))
            else:
                self.output += f"\n[{self.image[0]} output displayed]\n"
            self.image = None

    def progress(self, limit: int, status: Any = None,
                 locations: list[ToolCallLocation] | None = None) -> Any:
        """An update of its content; `locations` when they changed (files the run made)."""
        content = [tool_content(text_block(f"```{self.language}\n{self.code}\n```"))]
        if self.output:
            content.append(tool_content(text_block(f"```\n{trim(self.output, limit)}\n```")))
        content += [tool_content(image_block(data, mime)) for mime, data in self.images]
        return update_tool_call(self.id, status=status, content=content, locations=locations)
