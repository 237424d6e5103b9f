"""What the model sees of a run's output: the start and the end, within a character budget."""

from __future__ import annotations


def trim(text: str, limit: int) -> str:
    """Keep the first and last parts of `text` within `limit` characters, saying what was cut."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"
