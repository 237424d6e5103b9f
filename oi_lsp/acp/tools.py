"""The MCP tool calls of a run (oi/tool) as ACP tool calls of their own: started when the
code calls the tool, completed or failed when it returns, and the question a tool that asks
first puts to the user."""

from __future__ import annotations

import json
from typing import Any

from acp import start_tool_call, text_block, tool_content, update_tool_call
from acp.schema import PermissionOption, ToolCallUpdate

from ..protocol import ToolCall

OPTIONS = [PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
           PermissionOption(option_id="reject_once", name="Deny", kind="reject_once")]


def call_id(call: ToolCall) -> str:
    return f"mcp-{call.call_id}"


def _title(call: ToolCall) -> str:
    return f"{call.server}.{call.tool}"


def _kind(call: ToolCall) -> Any:
    return "edit" if call.destructive else "other"


def start(call: ToolCall) -> Any:
    return start_tool_call(call_id(call), _title(call), kind=_kind(call), status="in_progress",
                           raw_input=call.arguments)


def end(call: ToolCall) -> Any:
    """Its end: completed (with how long it took) or failed (with why)."""
    if call.status == "done":
        said = f"{_title(call)} returned in {call.seconds or 0:.2f} s"
        return update_tool_call(call_id(call), status="completed",
                                content=[tool_content(text_block(said))],
                                raw_output={"seconds": call.seconds})
    said = f"{_title(call)}: {call.error or call.status}"
    return update_tool_call(call_id(call), status="failed",
                            content=[tool_content(text_block(said))],
                            raw_output={"error": call.error, "status": call.status})


def permission(call: ToolCall, question: str) -> ToolCallUpdate:
    """The call as session/request_permission names it, the question and arguments shown."""
    shown = json.dumps(call.arguments, ensure_ascii=False, indent=2)
    return ToolCallUpdate(tool_call_id=call_id(call), title=_title(call), kind=_kind(call),
                          status="pending", raw_input=call.arguments,
                          content=[tool_content(text_block(f"{question}\n\n```json\n{shown}\n```"))])
