"""Units: <think> tags split from streamed content, thinking blocks put together, what the
model is sent back of its reasoning, and the cache marks."""

from __future__ import annotations

import pytest

from oi_lsp.core import caching
from oi_lsp.core.prompt import to_model_messages
from oi_lsp.core.reasoning import ThinkingBlocks, ThinkTags
from oi_lsp.core.settings import Settings
from oi_lsp.protocol import Message


def split(pieces: list[str]) -> list[tuple[str, str]]:
    """Feed the pieces; merge what came out by kind, in order."""
    tags = ThinkTags()
    out: list[tuple[str, str]] = []
    for piece in [*pieces, None]:
        for kind, text in (tags.feed(piece) if piece is not None else tags.flush()):
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + text)
            else:
                out.append((kind, text))
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_think_tags_split_however_the_stream_cuts_them(size: int) -> None:
    content = "\n<think>\nThe user wants 2+2.\nThat is 4.</think>\n\nIt is **4**."
    pieces = [content[i:i + size] for i in range(0, len(content), size)]
    assert split(pieces) == [("reasoning", "\nThe user wants 2+2.\nThat is 4."),
                             ("text", "It is **4**.")]


def test_think_tags_only_open_the_content() -> None:
    assert split(["Use a ", "<think>", " tag"]) == [("text", "Use a <think> tag")]
    assert split(["<thi", "nk but not", " a tag"]) == [("text", "<think but not a tag")]
    assert split(["plain"]) == [("text", "plain")]
    # A reasoning that never closed (a stop, a cut stream) stays reasoning.
    assert split(["<think>still going </thi"]) == [("reasoning", "still going </thi")]
    # A closing tag inside the answer is the answer's.
    assert split(["<think>a</think>b</think>"]) == [("reasoning", "a"), ("text", "b</think>")]


def test_thinking_blocks_from_streamed_pieces() -> None:
    blocks = ThinkingBlocks()
    blocks.add([{"type": "thinking", "thinking": "Let me ", "signature": None}])
    blocks.add([{"type": "thinking", "thinking": "think.", "signature": None}])
    blocks.add([{"type": "thinking", "thinking": "", "signature": "sig-1"}])
    blocks.add([{"type": "redacted_thinking", "data": "opaque"}])
    blocks.add([{"type": "thinking", "thinking": "Again.", "signature": "sig-2"}])
    assert blocks.blocks == [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "thinking", "thinking": "Again.", "signature": "sig-2"}]


def conversation(blocks: list[dict[str, str]] | None) -> list[Message]:
    return [
        Message(role="user", type="message", content="count", turn_id="t1"),
        Message(role="assistant", type="reasoning", content="I should count.", turn_id="t1",
                thinking_blocks=blocks),
        Message(role="assistant", type="code", format="python", content="print(3)",
                turn_id="t1", tool_call_id="call_1"),
        Message(role="computer", type="confirmation", format="python", content="print(3)",
                turn_id="t1", tool_call_id="call_1"),
        Message(role="computer", type="console", format="output", content="3", turn_id="t1",
                tool_call_id="call_1"),
        Message(role="assistant", type="reasoning", content="Done.", turn_id="t1"),
        Message(role="assistant", type="message", content="It is 3.", turn_id="t1"),
    ]


def test_signed_thinking_goes_back_with_its_tool_call_and_plain_reasoning_never() -> None:
    signed = [{"type": "thinking", "thinking": "I should count.", "signature": "sig"}]
    sent = to_model_messages(conversation(signed), Settings())
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant"]
    assert sent[2]["thinking_blocks"] == signed and sent[2]["tool_calls"]
    # Reasoning without blocks (DeepSeek's, <think> tags) is the model's own: not sent back.
    assert "thinking_blocks" not in sent[4] and "reasoning_content" not in sent[4]
    assert all("I should count" not in str(m.get("content")) for m in sent)
    # A block a stop cut short has no signature: the provider would refuse it.
    unsigned = [{"type": "thinking", "thinking": "I should"}]
    assert "thinking_blocks" not in to_model_messages(conversation(unsigned), Settings())[2]


def test_cache_marks_the_system_message_and_the_newest_two() -> None:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "x", "content": "out"}]
    marked = caching.mark(messages)
    assert marked[0]["content"] == [{"type": "text", "text": "sys",
                                     "cache_control": {"type": "ephemeral"}}]
    assert marked[5]["cache_control"] == {"type": "ephemeral"}
    assert marked[3]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert marked[1] is messages[1] and marked[2] is messages[2]  # unchanged, not copied
    assert messages[0]["content"] == "sys"  # the caller's messages are left as they were


def test_model_options_are_checked() -> None:
    from oi_lsp.core.settings import SettingsError, check
    check({"modelOptions": {"top_p": 0.5, "extra_headers": {"X-Team": "a"}}})
    with pytest.raises(SettingsError, match=r"modelOptions.*'messages' is set by oi-lsp"):
        check({"modelOptions": {"messages": []}})
    with pytest.raises(SettingsError, match="use the setting apiKey"):
        check({"modelOptions": {"api_key": "sk-x"}})
    with pytest.raises(SettingsError, match=r"modelOptions.*valid dictionary"):
        check({"modelOptions": "top_p=1"})
    with pytest.raises(SettingsError, match="'top p' is not a litellm argument"):
        check({"modelOptions": {"top p": 1}})
    with pytest.raises(SettingsError, match="reasoningEffort"):
        check({"reasoningEffort": "extreme"})
    shown = Settings(model_options={"extra_headers": {"Authorization": "Bearer s"}}).public()
    assert shown["modelOptions"]["extra_headers"] == {"Authorization": "********"}


def test_the_transcript_quotes_reasoning_and_exports_fold_it(tmp_path: object) -> None:
    from pathlib import Path

    from oi_lsp.core import export, transcript
    messages = conversation(None)
    snapshot = transcript.Snapshot(Path("/tmp/t.md"), "count", "file:///w", messages,
                                   transcript.Live("assistant", "reasoning", None,
                                                   "Still think\ning"), "thinking")
    text = transcript.render(snapshot)
    assert "> _Thinking_\n>\n> I should count." in text
    assert "> _Thinking_\n>\n> Done." in text
    assert "> _Thinking…_\n>\n> Still think\n> ing" in text  # the one streaming now
    assert text.index("I should count.") < text.index("print(3)")
    markdown = export.to_markdown(messages)
    assert "<details><summary>Thinking</summary>\n\nI should count.\n\n</details>" in markdown
    import json
    cells = json.loads(export.to_ipynb(messages))["cells"]
    assert any("<summary>Thinking</summary>" in "".join(c["source"]) for c in cells)


def test_auto_caching_follows_litellms_model_map() -> None:
    import os
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    auto = Settings(model="anthropic/claude-sonnet-4-5")
    assert caching.wanted(litellm, auto)
    assert not caching.wanted(litellm, auto.model_copy(update={"prompt_caching": False}))
    # OpenAI caches a repeated prefix by itself: no marks, even when asked.
    assert not caching.wanted(litellm, Settings(model="openai/gpt-4o", prompt_caching=True))
    assert caching.wanted(litellm, Settings(model="openrouter/some/model", prompt_caching=True))
