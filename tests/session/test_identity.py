"""sidecar.thread.planner: a message is what the model sees of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engines import (
    AssistantMessage,
    CompactionSummaryMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from sidecar.thread.planner import fingerprint, fingerprints, message_chars

USAGE = Usage(input=10, output=2, cache_read=0, cache_write=0, total_tokens=12)


def test_timestamps_usage_and_provider_metadata_do_not_change_identity():
    stored = AssistantMessage(
        content=[TextBlock(text="done", text_signature="sig"), ToolCallBlock(id="c1", name="shell", arguments={"b": 1, "a": [2]})],
        timestamp=1,
        model="gpt-5.5",
        usage=USAGE,
        stop_reason="toolUse",
        provider="openai",
        response_id="resp_1",
    )
    rebuilt = AssistantMessage(
        content=[TextBlock(text="done"), ToolCallBlock(id="c1", name="shell", arguments={"a": [2], "b": 1})],
        timestamp=99,
    )
    assert fingerprint(stored) == fingerprint(rebuilt)


def test_thinking_is_not_part_of_identity():
    with_thinking = AssistantMessage(content=[ThinkingBlock(thinking="hmm", thinking_signature="s"), TextBlock(text="ok")], timestamp=1)
    assert fingerprint(with_thinking) == fingerprint(AssistantMessage(content=[TextBlock(text="ok")], timestamp=2))


def test_every_model_visible_field_changes_identity():
    call = ToolCallBlock(id="c1", name="shell", arguments={"cmd": "ls"})
    base = AssistantMessage(content=[TextBlock(text="t"), call], timestamp=1)
    variants = [
        AssistantMessage(content=[TextBlock(text="T"), call], timestamp=1),
        AssistantMessage(content=[TextBlock(text="t"), ToolCallBlock(id="c2", name="shell", arguments={"cmd": "ls"})], timestamp=1),
        AssistantMessage(content=[TextBlock(text="t"), ToolCallBlock(id="c1", name="read", arguments={"cmd": "ls"})], timestamp=1),
        AssistantMessage(content=[TextBlock(text="t"), ToolCallBlock(id="c1", name="shell", arguments={"cmd": "pwd"})], timestamp=1),
        AssistantMessage(content=[call, TextBlock(text="t")], timestamp=1),
    ]
    assert len({fingerprint(m) for m in [base, *variants]}) == len(variants) + 1
    result = ToolResultMessage(tool_call_id="c1", tool_name="shell", content=[TextBlock(text="out")], is_error=False, timestamp=1)
    results = [
        result,
        ToolResultMessage(tool_call_id="c2", tool_name="shell", content=[TextBlock(text="out")], is_error=False, timestamp=1),
        ToolResultMessage(tool_call_id="c1", tool_name="shell", content=[TextBlock(text="OUT")], is_error=False, timestamp=1),
        ToolResultMessage(tool_call_id="c1", tool_name="shell", content=[TextBlock(text="out")], is_error=True, timestamp=1),
    ]
    assert len({fingerprint(m) for m in results}) == len(results)
    images = [
        UserMessage(content=[ImageBlock(data="AAAA", mime_type="image/png")], timestamp=1),
        UserMessage(content=[ImageBlock(data="AAAB", mime_type="image/png")], timestamp=1),
        UserMessage(content=[ImageBlock(data="AAAA", mime_type="image/jpeg")], timestamp=1),
    ]
    assert len({fingerprint(m) for m in images}) == len(images)


def test_roles_with_the_same_text_differ():
    user = UserMessage(content="same", timestamp=1)
    summary = CompactionSummaryMessage(summary="same", tokens_before=10, timestamp=1)
    assistant = AssistantMessage(content=[TextBlock(text="same")], timestamp=1)
    assert len({fingerprint(user), fingerprint(summary), fingerprint(assistant)}) == 3


def test_a_summary_s_token_counts_are_not_identity():
    a = CompactionSummaryMessage(summary="s", tokens_before=10, tokens_after=2, timestamp=1)
    b = CompactionSummaryMessage(summary="s", tokens_before=99, timestamp=5)
    assert fingerprint(a) == fingerprint(b)


@given(st.text(), st.integers(min_value=0, max_value=2**53), st.integers(min_value=0, max_value=2**53))
def test_user_text_identity_ignores_the_clock(text, t1, t2):
    assert fingerprint(UserMessage(content=text, timestamp=t1)) == fingerprint(UserMessage(content=text, timestamp=t2))


def test_fingerprints_note_each_message_s_size():
    sizes: dict[str, int] = {}
    msgs = [UserMessage(content="abc", timestamp=1), AssistantMessage(content=[TextBlock(text="hello")], timestamp=2)]
    fps = fingerprints(sizes, msgs)
    assert [sizes[f] for f in fps] == [3, 5] == [message_chars(m) for m in msgs]


def test_the_cache_hashes_a_message_object_once_and_stays_bounded(monkeypatch):
    import sidecar.thread.planner as planner

    calls = []
    real = planner.fingerprint
    monkeypatch.setattr(planner, "fingerprint", lambda m: calls.append(m) or real(m))
    cache = planner.FingerprintCache()
    msgs = [UserMessage(content=f"m{i}", timestamp=i) for i in range(100)]
    sizes: dict[str, int] = {}
    first = fingerprints(sizes, msgs, cache)
    again = fingerprints(sizes, msgs, cache)
    assert first == again == [real(m) for m in msgs]
    assert len(calls) == 100, "the second turn hashed nothing"
    # An equal message in a new object is hashed, and gets the same fingerprint.
    assert fingerprints(sizes, [UserMessage(content="m5", timestamp=99)], cache) == [first[5]]
    for n in range(20):  # many turns of fresh objects: the cache does not keep them all
        fingerprints(sizes, [UserMessage(content=f"x{n}-{i}", timestamp=i) for i in range(500)], cache)
    assert len(cache._by_object) + len(cache._previous) <= 4 * 1024
