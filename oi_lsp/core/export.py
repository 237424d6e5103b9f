"""A conversation as JSON, Markdown or a Jupyter notebook (messages as markdown cells, code that
ran and its output as code cells)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from ..protocol import Message

Format = Literal["json", "markdown", "ipynb"]
SUFFIX: dict[str, str] = {"json": ".json", "markdown": ".md", "ipynb": ".ipynb"}

# Cell magics that make a notebook's non-Python cells run in IPython as they ran here.
_CELL_MAGIC = {"shell": "bash", "bash": "bash", "sh": "sh", "zsh": "bash", "ruby": "ruby"}
_PYTHON = {"python", "py", "python3", "ipython"}


def render(messages: list[Message], fmt: Format, title: str = "") -> str:
    if fmt == "json":
        return to_json(messages)
    if fmt == "markdown":
        return to_markdown(messages, title)
    return to_ipynb(messages, title)


def to_json(messages: list[Message]) -> str:
    """The messages as a JSON list (what `%load_message` reads back)."""
    return json.dumps([m.wire() for m in messages], indent=2, ensure_ascii=False) + "\n"


def _groups(messages: list[Message]) -> list[tuple[str, Message, list[Message]]]:
    """('text', message, []), ('thought', reasoning, []), ('code', code that ran, its outputs)
    or ('skipped', code, []),
    in order. A proposal counts as skipped until the code that ran follows it."""
    groups: list[tuple[str, Message, list[Message]]] = []
    for m in messages:
        if (m.role in ("user", "assistant") and m.type == "message") or m.type == "error":
            groups.append(("text", m, []))
        elif m.type == "reasoning" and m.content.strip():
            groups.append(("thought", m, []))
        elif m.role == "user" and m.type == "code":  # the user's own run
            groups.append(("code", m, []))
        elif m.role == "assistant" and m.type == "code" and m.format != "text":
            groups.append(("skipped", m, []))
        elif m.type == "confirmation":  # what actually ran (approved or edited)
            if groups and groups[-1][0] == "skipped":
                groups.pop()
            groups.append(("code", m, []))
        elif m.role == "computer" and groups and groups[-1][0] == "code":
            groups[-1][2].append(m)
    return groups


def _speaker(m: Message) -> str:
    return "Error" if m.type == "error" else m.role.capitalize()


def _thought(m: Message) -> str:
    """The model's reasoning folded, as the editors show it (Markdown viewers and Jupyter
    render <details>)."""
    return f"<details><summary>Thinking</summary>\n\n{m.content.strip()}\n\n</details>"


def fence(text: str) -> str:
    """A backtick fence longer than any run of backticks inside `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def to_markdown(messages: list[Message], title: str = "") -> str:
    parts = [f"# {title}"] if title else []
    for kind, m, outputs in _groups(messages):
        if kind == "text":
            parts.append(f"**{_speaker(m)}:**\n\n{m.content}")
            continue
        if kind == "thought":
            parts.append(_thought(m))
            continue
        bar = fence(m.content)
        note = " *(proposed, not run)*" if kind == "skipped" else ""
        parts.append(f"{bar}{m.format or ''}\n{m.content}\n{bar}{note}")
        for out in outputs:
            if out.type == "image":
                mime = "image/svg+xml" if out.format == "svg" else (
                    "image/jpeg" if out.format == "base64.jpeg" else "image/png")
                parts.append(f"![output](data:{mime};base64,{out.content})"
                             if out.format != "svg" else out.content)
            elif out.content:
                bar = fence(out.content)
                parts.append(f"{bar}text\n{out.content.rstrip()}\n{bar}")
    return "\n\n".join(parts) + "\n"


def to_ipynb(messages: list[Message], title: str = "") -> str:
    """An nbformat 4 notebook, validated before it is returned."""
    import nbformat
    from nbformat import v4

    cells: list[Any] = [v4.new_markdown_cell(f"# {title}")] if title else []
    for kind, m, outputs in _groups(messages):
        if kind == "text":
            cells.append(v4.new_markdown_cell(f"**{_speaker(m)}:**\n\n{m.content}"))
            continue
        if kind == "thought":
            cells.append(v4.new_markdown_cell(_thought(m)))
            continue
        if kind == "skipped":
            bar = fence(m.content)
            cells.append(v4.new_markdown_cell(
                f"*Proposed, not run:*\n\n{bar}{m.format or ''}\n{m.content}\n{bar}"))
            continue
        language = (m.format or "python").lower()
        source = m.content
        if language not in _PYTHON and language in _CELL_MAGIC:
            source = f"%%{_CELL_MAGIC[language]}\n{source}"
        cell = v4.new_code_cell(source)
        if language not in _PYTHON:
            cell.metadata["language"] = language
        for out in outputs:
            if out.type == "image":
                mime = {"base64.jpeg": "image/jpeg", "svg": "image/svg+xml"}.get(
                    out.format or "", "image/png")
                cell.outputs.append(v4.new_output("display_data", data={mime: out.content}))
            elif out.type == "code" and out.format == "html":
                cell.outputs.append(v4.new_output("display_data",
                                                  data={"text/html": out.content}))
            elif out.content:
                cell.outputs.append(v4.new_output("stream", name="stdout", text=out.content))
        cells.append(cell)
    nb = v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return str(nbformat.writes(nb))
