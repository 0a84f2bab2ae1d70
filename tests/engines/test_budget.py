"""``engines.tokens`` and the ``transcript-budget`` engine, with the real tokenizer."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import (
    AfterTurnParams,
    AssembleParams,
    AssistantMessage,
    CompactionSummaryMessage,
    CompactParams,
    ImageBlock,
    IngestBatchParams,
    IngestParams,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    implements,
    tokens,
    validate_engine,
)
from engines.budget import TRANSCRIPT_BUDGET_ENGINE_ID, TranscriptBudgetEngine, select_within_budget
from engines.tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    approx_tokens,
    count_tokens,
    estimate_message_tokens,
    estimate_messages_tokens,
    tokenizer_name,
)

# ---------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------


def test_the_real_o200k_tokenizer_is_used():
    # bpe-openai is a test dependency: without it these budget tests would be
    # testing chars/4, so insist on the real thing.
    assert tokenizer_name() == "o200k_base"
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    # chars/4 would say 3 for this and 1 for "hello" x1; o200k knows better.
    cjk = "你好世界" * 50
    assert count_tokens(cjk) != approx_tokens(cjk)
    assert count_tokens("<|endoftext|>") > 1  # counted as text, never as a special token


def test_long_texts_are_counted_in_chunks_without_error():
    import bpe_openai

    encoding = bpe_openai.get_encoding("o200k_base")
    prose = "The quick brown fox jumps over the lazy dog.\n" * 4000  # 180,000 chars, several chunks
    assert count_tokens(prose) == len(encoding.encode_ordinary(prose))
    huge = "word " * 400_000  # 2,000,000 chars: bpe-openai refuses this in one call
    assert count_tokens(huge) == 400_001  # "word" + 399,999 x " word" + " ", as in one call
    no_spaces = "\u4e00" * 1_200_000  # no whitespace to cut at
    assert count_tokens(no_spaces) > 0


def test_the_tokenizer_loads_without_bpe_openai_s_compatibility_tables():
    """Counting needs only bpe-openai's Rust tokenizer: a fresh process loads
    it without running the package (whose import decodes three vocabularies
    in Python), and counts as the package's public API does."""
    import subprocess
    import sys

    probe = (
        "import sys, json\n"
        "from engines.tokens import count_tokens, tokenizer_name\n"
        "n = count_tokens('hello world')\n"
        "print(json.dumps([tokenizer_name(), n, 'bpe_openai' in sys.modules, 'bpe_openai.compat' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == ["o200k_base", 2, False, False]


_text = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from(["\ud800", " ", "\n", "😀"]), max_size=60)
    | st.sampled_from(["<|endoftext|>", "    def f(x):\n", "日本語"]),
    max_size=8,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_the_fast_path_counts_exactly_what_bpe_openai_s_api_counts(text):
    import bpe_openai

    fast = tokens._get_encoding()
    assert isinstance(fast, tokens._RustO200k)
    public = bpe_openai.get_encoding("o200k_base")
    assert fast.encode_ordinary(text) == public.encode_ordinary(text)


def test_an_unknown_bpe_openai_layout_falls_back_to_its_public_api(monkeypatch):
    monkeypatch.setattr(tokens, "_rust_backend", lambda: None)
    encoding = tokens._load_encoding()
    assert not isinstance(encoding, tokens._RustO200k)
    assert len(encoding.encode_ordinary("hello world")) == 2

    def broken() -> object:
        raise ImportError("not this build")

    monkeypatch.setattr(tokens, "_rust_backend", broken)
    assert not isinstance(tokens._load_encoding(), tokens._RustO200k)


def test_a_missing_tokenizer_is_a_clear_error_not_a_chars_over_4_guess(monkeypatch):
    def missing() -> object:
        raise ImportError("No module named 'bpe_openai'")

    monkeypatch.setattr(tokens, "_load_encoding", missing)
    monkeypatch.setattr(tokens, "_loaded", False)
    monkeypatch.setattr(tokens, "_encoding", None)
    with pytest.raises(tokens.TokenizerUnavailable, match="bpe-openai") as caught:
        count_tokens("abcdefghi")
    assert "No module named 'bpe_openai'" in str(caught.value)
    with pytest.raises(tokens.TokenizerUnavailable):
        tokenizer_name()
    with pytest.raises(tokens.TokenizerUnavailable):
        estimate_message_tokens(UserMessage(content="hello", timestamp=0))
    assert count_tokens("") == 0  # nothing to count needs no tokenizer


def test_approx_tokens_is_the_explicit_chars_over_4_estimate():
    assert approx_tokens("abcd") == 1 and approx_tokens("abcde") == 2 and approx_tokens("") == 0


def test_estimate_message_tokens():
    user = UserMessage(content="hello world", timestamp=1)
    assert estimate_message_tokens(user) == MESSAGE_OVERHEAD_TOKENS + 2
    later = msgspec.structs.replace(user, timestamp=10**12)
    assert estimate_message_tokens(later) == estimate_message_tokens(user)  # metadata is not input

    with_image = UserMessage(content=[TextBlock(text="hello world"), ImageBlock(data="QUJD" * 1000, mime_type="image/png")], timestamp=1)
    assert estimate_message_tokens(with_image) == MESSAGE_OVERHEAD_TOKENS + 2 + IMAGE_TOKENS

    a = AssistantMessage(
        content=[
            TextBlock(text="hello world"),
            ThinkingBlock(thinking="hello world"),
            ToolCallBlock(id="x", name="read", arguments={"b": 1, "a": "hello"}),
        ],
        timestamp=1,
    )
    reordered = AssistantMessage(
        content=[
            TextBlock(text="hello world"),
            ThinkingBlock(thinking="hello world"),
            ToolCallBlock(id="y", name="read", arguments={"a": "hello", "b": 1}),
        ],
        timestamp=2,
    )
    expected = MESSAGE_OVERHEAD_TOKENS + 2 + 2 + count_tokens("read") + count_tokens('{"a":"hello","b":1}')
    assert estimate_message_tokens(a) == expected == estimate_message_tokens(reordered)

    result = ToolResultMessage(
        tool_call_id="x", tool_name="read", content=[TextBlock(text="hello world")], is_error=False, timestamp=1
    )
    assert estimate_message_tokens(result) == MESSAGE_OVERHEAD_TOKENS + count_tokens("read") + 2
    summary = CompactionSummaryMessage(summary="hello world", tokens_before=5, timestamp=1)
    assert estimate_message_tokens(summary) == MESSAGE_OVERHEAD_TOKENS + 2
    assert estimate_messages_tokens([user, summary]) == 2 * (MESSAGE_OVERHEAD_TOKENS + 2)
    assert estimate_message_tokens(object()) == MESSAGE_OVERHEAD_TOKENS


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "你好", "{\"k\": [1, 2]}", "naïve", "🙂", "\n"]


def say(i: int, words: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))


def user(i: int, words: int = 20) -> UserMessage:
    return UserMessage(content=f"u{i} " + say(i, words), timestamp=i)


def reply(i: int, words: int = 20) -> AssistantMessage:
    return AssistantMessage(content=[TextBlock(text=f"a{i} " + say(i, words))], timestamp=i)


def call(i: int, *ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=[TextBlock(text=f"calling {i}")]
        + [ToolCallBlock(id=cid, name="shell", arguments={"cmd": say(i, 15)}) for cid in ids],
        timestamp=i,
    )


def result(i: int, cid: str, words: int = 40) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=cid, tool_name="shell", content=[TextBlock(text=say(i, words))], is_error=False, timestamp=i
    )


def params(messages, budget=None, **extra) -> AssembleParams:
    return AssembleParams(session_id="s", session_key="k", messages=list(messages), token_budget=budget, **extra)


def cost(messages) -> int:
    return sum(estimate_message_tokens(m) for m in messages)


def tool_pairs(messages) -> list[tuple[int, int]]:
    pairs = []
    last: dict[str, int] = {}
    for j, m in enumerate(messages):
        if isinstance(m, ToolResultMessage) and m.tool_call_id in last:
            pairs.append((last[m.tool_call_id], j))
        elif isinstance(m, AssistantMessage):
            for b in m.content:
                if isinstance(b, ToolCallBlock):
                    last[b.id] = j
    return pairs


# ---------------------------------------------------------------------------
# assemble
# ---------------------------------------------------------------------------


async def test_budget_is_respected_and_oldest_go_first():
    messages = [m for i in range(30) for m in (user(i), reply(i))]
    engine = TranscriptBudgetEngine({})
    budget = cost(messages[-7:]) + 3  # room for exactly 7 newest messages
    out = await engine.assemble(params(messages, budget))
    assert out.messages == messages[-7:]
    assert all(a is b for a, b in zip(out.messages, messages[-7:]))  # the same objects, in order
    assert out.estimated_tokens == cost(messages[-7:]) <= budget
    assert cost(messages[-8:]) > budget  # maximal: one more would not fit
    assert out.system_prompt_addition is None


async def test_no_budget_returns_everything():
    messages = [user(i) for i in range(5)]
    out = await TranscriptBudgetEngine({}).assemble(params(messages))
    assert out.messages == messages and out.estimated_tokens == cost(messages)
    empty = await TranscriptBudgetEngine({"token_budget": 10}).assemble(params([]))
    assert empty.messages == [] and empty.estimated_tokens == 0


async def test_a_session_s_next_assemble_counts_only_its_new_messages(monkeypatch):
    import engines.budget

    counted: list[object] = []

    def counting(message):
        counted.append(message)
        return estimate_message_tokens(message)

    monkeypatch.setattr(engines.budget, "estimate_message_tokens", counting)
    engine = TranscriptBudgetEngine({})
    messages = [m for i in range(20) for m in (user(i), reply(i))]
    first = await engine.assemble(params(messages, 100_000))
    assert len(counted) == len(messages)
    counted.clear()
    grown = [*messages, user(20), reply(20)]
    second = await engine.assemble(params(grown, 100_000))
    assert [id(m) for m in counted] == [id(grown[-1]), id(grown[-2])]  # the new ones only, newest first
    assert second.estimated_tokens == first.estimated_tokens + cost(grown[-2:]) == cost(grown)
    counted.clear()
    changed = [*grown[:-1], reply(21)]  # the newest replaced by another object: counted afresh
    third = await engine.assemble(params(changed, 100_000))
    assert [id(m) for m in counted] == [id(changed[-1])] and third.estimated_tokens == cost(changed)
    counted.clear()
    await engine.assemble(AssembleParams(session_id="other", session_key="k", messages=list(grown)))
    assert len(counted) == len(grown)  # another session keeps estimates of its own


async def test_smaller_of_call_and_configured_budget_applies():
    messages = [user(i) for i in range(20)]
    each = estimate_message_tokens(messages[-1])
    configured = TranscriptBudgetEngine({"token_budget": cost(messages[-3:])})
    assert len((await configured.assemble(params(messages))).messages) == 3
    assert len((await configured.assemble(params(messages, budget=10**6))).messages) == 3
    assert len((await configured.assemble(params(messages, budget=cost(messages[-2:])))).messages) == 2
    assert configured.effective_budget(None) == cost(messages[-3:])
    assert TranscriptBudgetEngine({}).effective_budget(None) is None
    assert each > 0


async def test_tool_call_and_result_are_kept_together():
    messages = [
        user(0),
        call(1, "c1", "c2"),
        result(2, "c1"),
        result(3, "c2"),
        reply(4),
        user(5),
    ]
    engine = TranscriptBudgetEngine({})
    # Room for everything from the second result on: cutting there would
    # orphan a result, so the whole call group goes.
    budget = cost(messages[3:]) + 1
    assert budget < cost(messages[1:])
    out = await engine.assemble(params(messages, budget))
    assert out.messages == messages[4:]
    # With room for the whole group, it is kept whole.
    out = await engine.assemble(params(messages, cost(messages[1:])))
    assert out.messages == messages[1:]


async def test_newest_message_is_always_kept_with_the_call_it_answers():
    messages = [user(0), reply(1), call(2, "c9"), result(3, "c9", words=400)]
    out = await TranscriptBudgetEngine({}).assemble(params(messages, budget=5))
    assert out.messages == messages[2:]  # over budget, but never empty and never orphaned
    assert out.estimated_tokens == cost(messages[2:]) > 5
    single = await TranscriptBudgetEngine({}).assemble(params([user(0, words=500)], budget=1))
    assert len(single.messages) == 1


async def test_results_without_their_call_and_calls_without_results_do_not_block():
    messages = [result(0, "gone"), user(1), call(2, "pending"), user(3)]
    engine = TranscriptBudgetEngine({})
    out = await engine.assemble(params(messages, cost(messages[1:])))
    assert out.messages == messages[1:]
    out = await engine.assemble(params(messages, cost(messages[3:])))
    assert out.messages == messages[3:]


async def test_system_prompt_addition_is_passed_through_and_charged():
    addition = "Answer in one sentence. Cite file paths."
    messages = [user(i) for i in range(10)]
    engine = TranscriptBudgetEngine({"system_prompt_addition": addition})
    budget = cost(messages[-4:]) + count_tokens(addition)
    out = await engine.assemble(params(messages, budget))
    assert out.system_prompt_addition == addition
    assert out.messages == messages[-4:]
    assert out.estimated_tokens == cost(messages[-4:]) + count_tokens(addition) <= budget
    # One token less and a message has to go to make room for the addition.
    out = await engine.assemble(params(messages, budget - 1))
    assert out.messages == messages[-3:]
    blank = TranscriptBudgetEngine({"system_prompt_addition": "   "})
    assert (await blank.assemble(params(messages))).system_prompt_addition is None


# Random transcripts with tool pairs, checked against the rules directly.
@st.composite
def transcripts(draw):
    out = []
    n = draw(st.integers(0, 25))
    next_id = 0
    for i in range(n):
        kind = draw(st.sampled_from(["user", "reply", "call", "orphan"]))
        if kind == "user":
            out.append(user(i, draw(st.integers(0, 60))))
        elif kind == "reply":
            out.append(reply(i, draw(st.integers(0, 60))))
        elif kind == "orphan":
            out.append(result(i, "nobody", draw(st.integers(0, 30))))
        else:
            ids = [f"c{next_id + k}" for k in range(draw(st.integers(1, 3)))]
            next_id += len(ids)
            out.append(call(i, *ids))
            answered = draw(st.lists(st.sampled_from(ids), unique=True))
            for cid in answered:
                if draw(st.booleans()):
                    out.append(user(i, 3))  # something in between
                out.append(result(i, cid, draw(st.integers(0, 80))))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts(), st.one_of(st.none(), st.integers(0, 1500)), st.integers(0, 50))
def test_selection_rules_hold_for_random_transcripts(messages, budget, reserved):
    kept, estimate = select_within_budget(messages, budget, reserved_tokens=reserved)
    n, k = len(messages), len(kept)
    assert kept == messages[n - k :]  # a suffix, in order
    assert estimate == cost(kept)
    if not messages:
        assert kept == []
        return
    assert kept, "the newest message is always kept"
    cut = n - k
    for i, j in tool_pairs(messages):
        assert not (i < cut <= j), f"cut {cut} splits the tool pair ({i}, {j})"
    if budget is None:
        assert k == n
        return
    # The smallest valid suffix containing the newest message.
    floor = max(c for c in range(n) if all(not (i < c <= j) for i, j in tool_pairs(messages)))
    if cut < floor:
        assert estimate <= budget - reserved
    else:
        assert cut == floor
    # Maximal: no older valid cut fits.
    for c in range(cut):
        if all(not (i < c <= j) for i, j in tool_pairs(messages)):
            assert cost(messages[c:]) > budget - reserved


# ---------------------------------------------------------------------------
# The rest of the engine
# ---------------------------------------------------------------------------


async def test_engine_keeps_nothing_and_declines_compaction():
    engine = TranscriptBudgetEngine({})
    assert validate_engine(engine, expected_id=TRANSCRIPT_BUDGET_ENGINE_ID) is engine
    assert engine.info.id == "transcript-budget"
    assert engine.info.name and isinstance(engine.info.version, str)
    assert engine.info.owns_compaction is False
    assert (await engine.ingest(IngestParams(session_id="s", session_key="k", message=user(0)))).ingested is False
    batch = await engine.ingest_batch(IngestBatchParams(session_id="s", session_key="k", messages=[user(0), user(1)]))
    assert batch.ingested_count == 0
    after = AfterTurnParams(session_id="s", session_key="k", session_file="/nonexistent", messages=[user(0)], pre_prompt_message_count=0)
    assert await engine.after_turn(after) is None
    compacted = await engine.compact(CompactParams(session_id="s", session_key="k"))
    assert compacted.ok is True and compacted.compacted is False and compacted.reason
    # after_turn is really implemented (so the sidecar does not fall back to
    # ingest); bootstrap and maintain are the base class's stand-ins.
    assert implements(engine, "after_turn") and implements(engine, "ingest_batch")
    assert not implements(engine, "bootstrap") and not implements(engine, "maintain")


@pytest.mark.parametrize(
    "config",
    [
        {"token_budget": 0},
        {"token_budget": -5},
        {"token_budget": "100"},
        {"token_budget": True},
        {"token_budget": 1.5},
        {"system_prompt_addition": 3},
        {"tokenBudget": 100},
    ],
)
def test_bad_config_is_refused(config):
    with pytest.raises(ValueError):
        TranscriptBudgetEngine(config)


def test_config_is_copied():
    config = {"token_budget": 100}
    engine = TranscriptBudgetEngine(config)
    config["token_budget"] = 1
    assert engine.token_budget == 100


def test_the_engine_loads_the_tokenizer_before_its_first_assemble():
    """A fresh process: constructing the engine starts the tokenizer load in
    the background, so the first turn's assemble does not wait for it."""
    import subprocess
    import sys

    code = (
        "import time\n"
        "from engines import tokens\n"
        "from engines.budget import TranscriptBudgetEngine\n"
        "assert not tokens._loaded\n"
        "TranscriptBudgetEngine({})\n"
        "deadline = time.monotonic() + 60\n"
        "while not tokens._loaded and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(tokens._loaded, tokens.tokenizer_name())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", tokens.tokenizer_name()]
