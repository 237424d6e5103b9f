"""A conversation as JSON, Markdown or a Jupyter notebook (messages as markdown cells, code and
its outputs as code cells)."""

from __future__ import annotations

import json
from typing import Any, Literal

from .protocol import Message

Format = Literal["json", "markdown", "ipynb"]


def render(messages: list[Message], fmt: Format) -> str:
    if fmt == "json":
        return to_json(messages)
    if fmt == "markdown":
        return to_markdown(messages)
    return to_ipynb(messages)


def to_json(messages: list[Message]) -> str:
    return json.dumps([m.wire() for m in messages], indent=2, ensure_ascii=False)


def _code_groups(messages: list[Message]) -> list[tuple[str, Message, list[Message]]]:
    """('text', message, []) or ('code', code that ran, its outputs), in order."""
    groups: list[tuple[str, Message, list[Message]]] = []
    for m in messages:
        if m.role in ("user", "assistant") and m.type == "message":
            groups.append(("text", m, []))
        elif m.type == "confirmation":  # what actually ran (approved or edited)
            groups.append(("code", m, []))
        elif m.role == "computer" and m.type in ("console", "image", "code") and groups \
                and groups[-1][0] == "code":
            groups[-1][2].append(m)
    return groups


def to_markdown(messages: list[Message]) -> str:
    parts = []
    for kind, m, outputs in _code_groups(messages):
        if kind == "text":
            parts.append(f"**{m.role}:**\n\n{m.content}")
            continue
        parts.append(f"```{m.format or ''}\n{m.content}\n```")
        for out in outputs:
            if out.type == "console":
                parts.append(f"```text\n{out.content}\n```")
            elif out.type == "image":
                parts.append("*(an image was displayed)*")
            else:
                parts.append(f"*({out.format} was displayed)*")
    return "\n\n".join(parts) + "\n"


def to_ipynb(messages: list[Message]) -> str:
    import nbformat
    from nbformat import v4

    cells: list[Any] = []
    for kind, m, outputs in _code_groups(messages):
        if kind == "text":
            cells.append(v4.new_markdown_cell(f"**{m.role}:** {m.content}"))
            continue
        cell = v4.new_code_cell(m.content)
        if m.format and m.format not in ("python", "py", "python3"):
            cell.metadata["language"] = m.format
        for out in outputs:
            if out.type == "console":
                cell.outputs.append(v4.new_output("stream", name="stdout", text=out.content))
            elif out.type == "image":
                mime = {"base64.jpeg": "image/jpeg", "svg": "image/svg+xml"}.get(
                    out.format or "", "image/png")
                cell.outputs.append(v4.new_output("display_data", data={mime: out.content}))
            else:
                cell.outputs.append(v4.new_output("display_data",
                                                  data={"text/html": out.content}))
        cells.append(cell)
    nb = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return str(nbformat.writes(nb))
