"""The engine contract: OpenClaw JSON shapes, tagging, optional methods, testkit.

The OpenClaw-shaped fixtures below are written by hand in camelCase, as
OpenClaw stores them, so a round trip proves the mapping and not merely that
msgspec can read what it wrote.
"""

from __future__ import annotations

import copy
import json
import os

import msgspec
import pytest
import trio

import engines
from engines import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    AssistantMessage,
    BaseContextEngine,
    BootstrapParams,
    CompactionDetails,
    CompactionSummaryMessage,
    CompactParams,
    CompactResult,
    EngineInfo,
    ImageBlock,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    LegacyEngine,
    MaintainParams,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from engines.testkit import Call, RecordingEngine

# ---------------------------------------------------------------------------
# OpenClaw-shaped samples (camelCase, optional fields absent rather than null)
# ---------------------------------------------------------------------------

USER_STRING = {"role": "user", "content": "hello there", "timestamp": 1700000000000}

USER_BLOCKS = {
    "role": "user",
    "content": [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    ],
    "timestamp": 1700000000001,
}

ASSISTANT_FULL = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "let me look", "thinkingSignature": "sig-abc"},
        {"type": "text", "text": "I will list the files.", "textSignature": "ts-1"},
        {
            "type": "toolCall",
            "id": "call_1",
            "name": "shell",
            "arguments": {"command": ["ls", "-la"], "timeout": 5, "nested": {"a": None}},
        },
    ],
    "model": "gpt-5-codex",
    "usage": {
        "input": 1200,
        "output": 80,
        "cacheRead": 1000,
        "cacheWrite": 0,
        "totalTokens": 1280,
        "cost": {"input": 0.01, "output": 0.002, "cacheRead": 0.001, "cacheWrite": 0.0, "total": 0.013},
    },
    "stopReason": "toolUse",
    "timestamp": 1700000000002,
    "api": "openai-responses",
    "provider": "openai",
    "responseId": "resp_1",
}

ASSISTANT_MINIMAL = {
    "role": "assistant",
    "content": [{"type": "text", "text": "done"}],
    "timestamp": 1700000000003,
}

ASSISTANT_ERROR = {
    "role": "assistant",
    "content": [{"type": "thinking", "thinking": "", "redacted": True}],
    "stopReason": "error",
    "timestamp": 1700000000004,
    "errorMessage": "upstream 500",
}

TOOL_RESULT = {
    "role": "toolResult",
    "toolCallId": "call_1",
    "toolName": "shell",
    "content": [
        {"type": "text", "text": "total 0"},
        {"type": "image", "data": "R0lGODlh", "mimeType": "image/gif"},
    ],
    "isError": False,
    "timestamp": 1700000000005,
    "details": {"exitCode": 0},
}

TOOL_RESULT_ERROR = {
    "role": "toolResult",
    "toolCallId": "call_2",
    "toolName": "read",
    "content": [{"type": "text", "text": "ENOENT"}],
    "isError": True,
    "timestamp": 1700000000006,
}

COMPACTION = {
    "role": "compactionSummary",
    "summary": "The user asked about files.",
    "tokensBefore": 50000,
    "tokensAfter": 1200,
    "timestamp": 1700000000007,
}

COMPACTION_NO_AFTER = {
    "role": "compactionSummary",
    "summary": "s",
    "tokensBefore": 10,
    "timestamp": 1700000000008,
}

SAMPLES = {
    "user_string": (USER_STRING, UserMessage),
    "user_blocks": (USER_BLOCKS, UserMessage),
    "assistant_full": (ASSISTANT_FULL, AssistantMessage),
    "assistant_minimal": (ASSISTANT_MINIMAL, AssistantMessage),
    "assistant_error": (ASSISTANT_ERROR, AssistantMessage),
    "tool_result": (TOOL_RESULT, ToolResultMessage),
    "tool_result_error": (TOOL_RESULT_ERROR, ToolResultMessage),
    "compaction": (COMPACTION, CompactionSummaryMessage),
    "compaction_no_after": (COMPACTION_NO_AFTER, CompactionSummaryMessage),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_message_round_trips_through_openclaw_builtins(name):
    sample, cls = SAMPLES[name]
    original = copy.deepcopy(sample)
    message = engines.from_openclaw(sample)
    assert type(message) is cls
    assert engines.to_openclaw(message) == original
    assert sample == original, "decoding must not mutate the input"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_message_round_trips_through_openclaw_json(name):
    sample, cls = SAMPLES[name]
    raw = json.dumps(sample).encode()
    message = engines.decode_openclaw(raw)
    assert type(message) is cls
    assert json.loads(engines.encode_openclaw(message)) == sample
    # and the decoded Struct equals one built from builtins
    assert message == engines.from_openclaw(sample)


def test_camel_case_fields_map_to_snake_case_attributes():
    full = engines.from_openclaw(ASSISTANT_FULL)
    thinking, text, call = full.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking_signature == "sig-abc"
    assert isinstance(text, TextBlock) and text.text_signature == "ts-1"
    assert isinstance(call, ToolCallBlock)
    assert (call.id, call.name, call.arguments["command"]) == ("call_1", "shell", ["ls", "-la"])
    assert full.stop_reason == "toolUse"
    assert full.model == "gpt-5-codex"
    assert full.response_id == "resp_1"
    assert full.usage == Usage(
        input=1200,
        output=80,
        cache_read=1000,
        cache_write=0,
        total_tokens=1280,
        cost=ASSISTANT_FULL["usage"]["cost"],
    )

    image = engines.from_openclaw(USER_BLOCKS).content[1]
    assert isinstance(image, ImageBlock) and image.mime_type == "image/png"

    result = engines.from_openclaw(TOOL_RESULT)
    assert (result.tool_call_id, result.tool_name, result.is_error) == ("call_1", "shell", False)

    summary = engines.from_openclaw(COMPACTION)
    assert (summary.tokens_before, summary.tokens_after) == (50000, 1200)

    redacted = engines.from_openclaw(ASSISTANT_ERROR)
    assert redacted.error_message == "upstream 500"
    assert redacted.content[0].redacted is True
    assert redacted.content[0].thinking_signature is None


def test_encoding_built_messages_produces_openclaw_shape():
    """Python-built messages encode with OpenClaw names and without None fields."""
    msg = ToolResultMessage(
        tool_call_id="c9",
        tool_name="read",
        content=[TextBlock(text="x")],
        is_error=False,
        timestamp=5,
    )
    assert engines.to_openclaw(msg) == {
        "role": "toolResult",
        "toolCallId": "c9",
        "toolName": "read",
        "content": [{"type": "text", "text": "x"}],
        "isError": False,  # required by OpenClaw: written even though falsy
        "timestamp": 5,
    }
    usage = Usage(input=0, output=0, cache_read=0, cache_write=0, total_tokens=0)
    assert engines.to_openclaw(usage) == {
        "input": 0,
        "output": 0,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 0,
    }
    block = ThinkingBlock(thinking="hm")
    assert engines.to_openclaw(block) == {"type": "thinking", "thinking": "hm"}
    block = ThinkingBlock(thinking="hm", thinking_signature="s")
    assert engines.to_openclaw(block) == {"type": "thinking", "thinking": "hm", "thinkingSignature": "s"}


@pytest.mark.parametrize(
    "block, expected",
    [
        (TextBlock(text="t"), {"type": "text", "text": "t"}),
        (ImageBlock(data="AA==", mime_type="image/jpeg"), {"type": "image", "data": "AA==", "mimeType": "image/jpeg"}),
        (
            ThinkingBlock(thinking="r", thinking_signature="sig"),
            {"type": "thinking", "thinking": "r", "thinkingSignature": "sig"},
        ),
        (
            ToolCallBlock(id="i", name="n", arguments={"k": [1, 2]}),
            {"type": "toolCall", "id": "i", "name": "n", "arguments": {"k": [1, 2]}},
        ),
    ],
    ids=lambda value: getattr(value, "type", None) if not isinstance(value, dict) else "",
)
def test_block_round_trips(block, expected):
    assert engines.to_openclaw(block) == expected
    assert engines.from_openclaw(expected, engines.ContentBlock) == block
    assert engines.decode_openclaw(json.dumps(expected), engines.ContentBlock) == block


def test_tagged_decoding_picks_the_class_from_role():
    items = [USER_STRING, ASSISTANT_FULL, TOOL_RESULT, COMPACTION]
    decoded = engines.decode_openclaw(json.dumps(items), list[engines.AgentMessage])
    assert [type(m) for m in decoded] == [UserMessage, AssistantMessage, ToolResultMessage, CompactionSummaryMessage]
    assert [m.role for m in decoded] == ["user", "assistant", "toolResult", "compactionSummary"]


def test_role_and_type_are_exposed_on_instances_and_classes():
    for cls, role in [
        (UserMessage, "user"),
        (AssistantMessage, "assistant"),
        (ToolResultMessage, "toolResult"),
        (CompactionSummaryMessage, "compactionSummary"),
    ]:
        assert cls.role == role
        # the class attribute and the msgspec tag must never drift apart
        assert cls.__struct_config__.tag == role
        assert cls.__struct_config__.tag_field == "role"
    assert engines.AGENT_MESSAGE_ROLES == {"user", "assistant", "toolResult", "compactionSummary"}
    for cls, kind in [(TextBlock, "text"), (ImageBlock, "image"), (ThinkingBlock, "thinking"), (ToolCallBlock, "toolCall")]:
        assert cls.type == kind
        assert cls.__struct_config__.tag == kind
    assert engines.from_openclaw(COMPACTION).role == "compactionSummary"
    assert engines.from_openclaw(USER_BLOCKS).content[1].type == "image"


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "bashExecution", "command": "ls", "timestamp": 1},
        {"content": "no role", "timestamp": 1},
        {"role": "user", "content": [{"type": "toolCall", "id": "x", "name": "n", "arguments": {}}], "timestamp": 1},
        {"role": "user", "content": [{"type": "video", "url": "x"}], "timestamp": 1},
        {"role": "toolResult", "toolCallId": "c", "toolName": "t", "content": [], "timestamp": 1},  # no isError
        {"role": "user", "content": "x"},  # no timestamp
        {"role": "user", "content": "x", "timestamp": "yesterday"},
    ],
)
def test_invalid_messages_are_rejected(bad):
    with pytest.raises(msgspec.ValidationError):
        engines.from_openclaw(bad)


def test_messages_from_openclaw_skips_only_unknown_roles_when_asked():
    custom = {"role": "custom", "customType": "note", "content": "x", "timestamp": 3}
    items = [USER_STRING, custom, ASSISTANT_MINIMAL]
    with pytest.raises(msgspec.ValidationError):
        engines.messages_from_openclaw(items)
    kept = engines.messages_from_openclaw(items, skip_unknown=True)
    assert [m.role for m in kept] == ["user", "assistant"]
    broken_known = {"role": "assistant", "content": "not a list", "timestamp": 1}
    with pytest.raises(msgspec.ValidationError):
        engines.messages_from_openclaw([broken_known], skip_unknown=True)


# ---------------------------------------------------------------------------
# Contract names (ENGINE_API.md is binding; tests/docs/test_engine_api_doc.py reads the file itself)
# ---------------------------------------------------------------------------

CONTRACT_FIELDS = {
    "TextBlock": ["text"],
    "ImageBlock": ["data", "mime_type"],
    "ThinkingBlock": ["thinking", "thinking_signature"],
    "ToolCallBlock": ["id", "name", "arguments"],
    "UserMessage": ["content", "timestamp"],
    "AssistantMessage": ["content", "model", "usage", "stop_reason", "timestamp"],
    "ToolResultMessage": ["tool_call_id", "tool_name", "content", "is_error", "timestamp"],
    "CompactionSummaryMessage": ["summary", "tokens_before", "tokens_after", "timestamp"],
    "Usage": ["input", "output", "cache_read", "cache_write", "total_tokens"],
    "PromptCacheInfo": ["cached_input_tokens", "input_tokens"],
    "RuntimeContext": [
        "cwd",
        "model",
        "token_budget",
        "current_token_count",
        "context_window",
        "last_usage",
        "prompt_cache",
    ],
    "EngineInfo": ["id", "name", "version", "owns_compaction", "turn_maintenance_mode"],
    "ContextProjection": ["mode", "epoch", "fingerprint"],
    "BootstrapParams": ["session_file", "runtime_context"],
    "IngestParams": ["message", "is_heartbeat", "turn_trigger"],
    "IngestBatchParams": ["messages", "is_heartbeat", "turn_trigger"],
    "AssembleParams": [
        "messages",
        "token_budget",
        "available_tools",
        "citations_mode",
        "model",
        "prompt",
        "runtime_context",
    ],
    "AfterTurnParams": [
        "session_file",
        "messages",
        "pre_prompt_message_count",
        "token_budget",
        "is_heartbeat",
        "turn_trigger",
        "runtime_context",
    ],
    "MaintainParams": ["session_file", "reason", "runtime_context"],
    "CompactParams": [
        "token_budget",
        "force",
        "current_token_count",
        "compaction_target",
        "custom_instructions",
        "runtime_context",
    ],
    "BootstrapResult": ["bootstrapped", "imported_messages", "reason"],
    "IngestResult": ["ingested"],
    "IngestBatchResult": ["ingested_count"],
    "AssembleResult": ["messages", "estimated_tokens", "system_prompt_addition", "context_projection"],
    "MaintainResult": ["changed", "bytes_freed", "rewritten_entries", "reason"],
    "CompactResult": ["ok", "compacted", "reason", "result"],
    "CompactionDetails": ["summary", "first_kept_entry_id", "tokens_before", "tokens_after", "details"],
}

PARAMS = ["BootstrapParams", "IngestParams", "IngestBatchParams", "AssembleParams", "AfterTurnParams", "MaintainParams", "CompactParams"]


@pytest.mark.parametrize("type_name", sorted(CONTRACT_FIELDS))
def test_contract_fields_exist_with_contract_names(type_name):
    cls = getattr(engines, type_name)
    names = [f.name for f in msgspec.structs.fields(cls)]
    expected = CONTRACT_FIELDS[type_name] + (["session_id", "session_key"] if type_name in PARAMS else [])
    missing = [name for name in expected if name not in names]
    assert not missing, f"{type_name} lacks contract fields {missing}"
    for field in msgspec.structs.fields(cls):
        camel = field.name.split("_")[0] + "".join(p.title() for p in field.name.split("_")[1:])
        assert field.encode_name == camel


def test_every_contract_name_is_exported_from_the_package():
    names = set(CONTRACT_FIELDS) | {
        "AgentMessage",
        "ContextEngine",
        "BaseContextEngine",
        "EngineLoadError",
        "LegacyEngine",
        "list_engines",
        "load_engine",
        "load_engine_or_legacy",
    }
    for name in names:
        assert name in engines.__all__, name
        assert getattr(engines, name) is not None


def test_params_and_results_round_trip_with_camel_case_keys():
    message = engines.from_openclaw(USER_STRING)
    params = AssembleParams(
        session_id="s1",
        session_key="agent:main:s1",
        messages=[message, engines.from_openclaw(ASSISTANT_FULL)],
        token_budget=8000,
        available_tools=frozenset({"shell", "read"}),
        citations_mode="off",
        model="gpt-5-codex",
        prompt="next?",
        runtime_context=engines.RuntimeContext(
            cwd="/tmp",
            context_window=272000,
            last_usage=Usage(input=1, output=2, cache_read=0, cache_write=0, total_tokens=3),
            prompt_cache=engines.PromptCacheInfo(cached_input_tokens=1, input_tokens=1),
        ),
    )
    raw = engines.to_openclaw(params)
    assert {"sessionId", "sessionKey", "tokenBudget", "availableTools", "citationsMode", "runtimeContext"} <= raw.keys()
    assert raw["runtimeContext"]["lastUsage"]["cacheRead"] == 0
    assert raw["runtimeContext"]["promptCache"] == {"cachedInputTokens": 1, "inputTokens": 1}
    assert engines.decode_openclaw(engines.encode_openclaw(params), AssembleParams) == params

    result = CompactResult(
        ok=True,
        compacted=True,
        result=CompactionDetails(summary="s", first_kept_entry_id="e7", tokens_before=9000, tokens_after=100, details={"k": 1}),
    )
    raw = engines.to_openclaw(result)
    assert raw["result"]["firstKeptEntryId"] == "e7"
    assert raw["result"]["tokensBefore"] == 9000
    assert engines.from_openclaw(raw, CompactResult) == result

    assembled = AssembleResult(
        messages=[message],
        estimated_tokens=12,
        system_prompt_addition="be brief",
        context_projection=engines.ContextProjection(mode="thread_bootstrap", epoch="e1", fingerprint="f"),
    )
    raw = engines.to_openclaw(assembled)
    assert raw["systemPromptAddition"] == "be brief"
    assert raw["contextProjection"] == {"mode": "thread_bootstrap", "epoch": "e1", "fingerprint": "f"}
    assert engines.from_openclaw(raw, AssembleResult) == assembled


def test_defaults_match_the_contract():
    info = EngineInfo(id="x", name="X", version="1")
    assert info.owns_compaction is False and info.turn_maintenance_mode == "foreground"
    assert IngestParams(session_id="s", session_key="k", message=engines.from_openclaw(USER_STRING)).is_heartbeat is False
    assert engines.MaintainResult(changed=False).bytes_freed == 0
    assert engines.MaintainResult(changed=False).rewritten_entries == 0
    assert AssembleResult(messages=[], estimated_tokens=0).system_prompt_addition is None
    assert CompactResult(ok=True, compacted=False).result is None
    with pytest.raises(msgspec.ValidationError):
        engines.from_openclaw({"id": "x", "name": "X", "version": "1", "turnMaintenanceMode": "sometimes"}, EngineInfo)


def test_fields_are_keyword_only():
    with pytest.raises(TypeError):
        TextBlock("positional")  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Optional methods: detection and the post-turn fallback
# ---------------------------------------------------------------------------


class MinimalEngine(BaseContextEngine):
    """Implements only the required methods; records ingests."""

    info = EngineInfo(id="minimal", name="Minimal", version="1")

    def __init__(self, config=None):
        super().__init__(config)
        self.ingested = []

    async def ingest(self, params):
        self.ingested.append(params)
        return IngestResult(ingested=params.message.role != "compactionSummary")

    async def assemble(self, params):
        return AssembleResult(messages=params.messages, estimated_tokens=0)

    async def compact(self, params):
        return CompactResult(ok=True, compacted=False)


class WithAfterTurn(MinimalEngine):
    async def after_turn(self, params):
        self.after = params


class DuckEngine:
    """Not a subclass: the sidecar must accept any object with the shape."""

    info = EngineInfo(id="duck", name="Duck", version="1")
    maintain = None

    async def ingest(self, params):
        return IngestResult(ingested=True)

    async def assemble(self, params):
        return AssembleResult(messages=params.messages, estimated_tokens=0)

    async def compact(self, params):
        return CompactResult(ok=True, compacted=False)

    async def ingest_batch(self, params):
        return IngestBatchResult(ingested_count=len(params.messages))


def test_base_class_defaults_count_as_not_implemented():
    engine = MinimalEngine()
    for name in engines.OPTIONAL_METHODS:
        assert engines.optional_method(engine, name) is None, name
        assert not engines.implements(engine, name)
    for name in engines.REQUIRED_METHODS:
        assert engines.implements(engine, name)
    assert isinstance(engine, engines.ContextEngine)


def test_overrides_count_as_implemented():
    engine = WithAfterTurn()
    assert engines.optional_method(engine, "after_turn") == engine.after_turn
    assert engines.implements(engine, "after_turn")
    assert not engines.implements(engine, "ingest_batch")


def test_duck_typed_engine_detection():
    duck = DuckEngine()
    assert isinstance(duck, engines.ContextEngine)
    assert engines.implements(duck, "ingest_batch")
    assert not engines.implements(duck, "after_turn")  # no attribute
    assert not engines.implements(duck, "maintain")  # attribute is None
    assert not engines.implements(duck, "dispose")


def test_non_callable_optional_attribute_counts_as_absent():
    class Odd(DuckEngine):
        after_turn = "not a method"

    assert engines.optional_method(Odd(), "after_turn") is None


def test_optional_method_rejects_unknown_names():
    with pytest.raises(ValueError):
        engines.optional_method(MinimalEngine(), "afterTurn")
    with pytest.raises(ValueError):
        engines.optional_method(MinimalEngine(), "ingest")


def test_base_class_cannot_be_instantiated_without_required_methods():
    class Incomplete(BaseContextEngine):
        info = EngineInfo(id="i", name="I", version="1")

        async def ingest(self, params):
            return IngestResult(ingested=True)

    with pytest.raises(TypeError):
        Incomplete()


def _history(n):
    return [UserMessage(content=f"m{i}", timestamp=i) for i in range(n)]


def _after_turn_params(messages, pre, heartbeat=False):
    return AfterTurnParams(
        session_id="s",
        session_key="k",
        session_file="/tmp/s.jsonl",
        messages=messages,
        pre_prompt_message_count=pre,
        token_budget=1000,
        is_heartbeat=heartbeat,
    )


async def test_fallback_prefers_after_turn():
    engine = RecordingEngine()
    params = _after_turn_params(_history(4), 2)
    assert await engines.after_turn_with_fallback(engine, params) == "after_turn"
    assert engine.calls == [Call("after_turn", params)]


async def test_fallback_uses_ingest_batch_with_only_new_messages():
    engine = RecordingEngine(omit=["after_turn"])
    history = _history(5)
    assert await engines.after_turn_with_fallback(engine, _after_turn_params(history, 3, heartbeat=True)) == "ingest_batch"
    assert engine.method_names == ["ingest_batch"]
    batch = engine.calls[0].params
    assert batch.messages == history[3:]
    assert (batch.session_id, batch.session_key, batch.is_heartbeat) == ("s", "k", True)


async def test_fallback_ingests_new_messages_one_by_one_in_order():
    engine = RecordingEngine(omit=["after_turn", "ingest_batch"])
    history = _history(5)
    assert await engines.after_turn_with_fallback(engine, _after_turn_params(history, 2)) == "ingest"
    assert engine.method_names == ["ingest", "ingest", "ingest"]
    assert [c.params.message for c in engine.calls] == history[2:]


async def test_fallback_with_nothing_new_calls_nothing():
    engine = RecordingEngine(omit=["after_turn"])
    assert await engines.after_turn_with_fallback(engine, _after_turn_params(_history(2), 2)) == "none"
    assert engine.calls == []


async def test_fallback_propagates_engine_errors():
    engine = RecordingEngine()
    engine.fail("after_turn", RuntimeError("disk full"))
    with pytest.raises(RuntimeError, match="disk full"):
        await engines.after_turn_with_fallback(engine, _after_turn_params(_history(1), 0))


async def test_base_defaults_are_safe_to_call_blindly():
    engine = MinimalEngine()
    history = _history(3) + [CompactionSummaryMessage(summary="s", tokens_before=5, timestamp=9)]
    # after_turn stand-in performs the spec fallback: ingest per new message
    await engine.after_turn(_after_turn_params(history, 1))
    assert [p.message for p in engine.ingested] == history[1:]
    engine.ingested.clear()
    result = await engine.ingest_batch(IngestBatchParams(session_id="s", session_key="k", messages=history))
    assert result == IngestBatchResult(ingested_count=3)  # the summary was not ingested
    assert len(engine.ingested) == 4
    boot = await engine.bootstrap(BootstrapParams(session_id="s", session_key="k", session_file="f"))
    assert boot.bootstrapped is False
    maintained = await engine.maintain(MaintainParams(session_id="s", session_key="k", session_file="f", reason="turn"))
    assert maintained.changed is False
    assert await engine.dispose() is None


def test_base_keeps_a_private_copy_of_config():
    config = {"a": 1}
    engine = MinimalEngine(config)
    config["a"] = 2
    assert engine.config == {"a": 1}


# ---------------------------------------------------------------------------
# Legacy engine
# ---------------------------------------------------------------------------


async def test_legacy_engine_is_a_pass_through():
    engine = LegacyEngine()
    assert engine.info.id == "legacy"
    assert engines.is_legacy(engine)
    assert not engines.is_legacy(RecordingEngine())
    assert not engines.is_legacy(MinimalEngine())
    messages = engines.messages_from_openclaw([USER_STRING, ASSISTANT_FULL, TOOL_RESULT])
    result = await engine.assemble(AssembleParams(session_id="s", session_key="k", messages=messages, prompt="p"))
    assert result.messages == messages
    assert result.messages is not messages  # caller's list is not handed back for mutation
    assert result.system_prompt_addition is None and result.context_projection is None
    ingested = await engine.ingest(IngestParams(session_id="s", session_key="k", message=messages[0]))
    assert ingested.ingested is False
    compacted = await engine.compact(CompactParams(session_id="s", session_key="k"))
    assert compacted.ok is True and compacted.compacted is False
    assert engine.info.owns_compaction is False
    engines.validate_engine(engine, "legacy")


def test_an_engine_reporting_id_legacy_is_treated_as_legacy():
    engine = RecordingEngine(info=EngineInfo(id="legacy", name="x", version="1"))
    assert engines.is_legacy(engine)


# ---------------------------------------------------------------------------
# Testkit
# ---------------------------------------------------------------------------


# A deadlock guard only, never a speed assertion: if recording broke,
# wait_for_call would otherwise block the whole test run forever.
DEADLOCK_GUARD_S = 30


def _ingest(i=0):
    return IngestParams(session_id="s", session_key="k", message=UserMessage(content=str(i), timestamp=i))


async def test_recording_engine_records_every_call_in_order():
    engine = RecordingEngine()
    boot = BootstrapParams(session_id="s", session_key="k", session_file="f")
    assemble = AssembleParams(session_id="s", session_key="k", messages=_history(2))
    await engine.bootstrap(boot)
    result = await engine.assemble(assemble)
    await engine.ingest(_ingest())
    await engine.dispose()
    assert engine.method_names == ["bootstrap", "assemble", "ingest", "dispose"]
    assert engine.calls[0] == Call("bootstrap", boot)
    assert engine.calls[1].params is assemble
    assert engine.calls[3] == Call("dispose", None)
    assert result.messages == assemble.messages
    assert engine.calls_to("ingest") == [engine.calls[2]]
    engines.validate_engine(engine)


async def test_recording_engine_scripted_results():
    engine = RecordingEngine(results={"ingest": IngestResult(ingested=False)})
    assert (await engine.ingest(_ingest())).ingested is False

    engine.set_result("assemble", lambda p: AssembleResult(messages=p.messages[-1:], estimated_tokens=7))
    out = await engine.assemble(AssembleParams(session_id="s", session_key="k", messages=_history(3)))
    assert out.estimated_tokens == 7 and len(out.messages) == 1

    async def compact(params):
        await trio.lowlevel.checkpoint()
        return CompactResult(ok=True, compacted=True, reason=params.custom_instructions)

    engine.set_result("compact", compact)
    out = await engine.compact(CompactParams(session_id="s", session_key="k", custom_instructions="why"))
    assert out.compacted and out.reason == "why"

    engine.reset("compact")
    assert (await engine.compact(CompactParams(session_id="s", session_key="k"))).compacted is False
    with pytest.raises(ValueError):
        engine.set_result("afterTurn", None)


async def test_recording_engine_injected_failures():
    engine = RecordingEngine()
    engine.fail("ingest", ValueError, times=2)
    for _ in range(2):
        with pytest.raises(ValueError):
            await engine.ingest(_ingest())
    assert (await engine.ingest(_ingest())).ingested is True
    assert engine.method_names == ["ingest"] * 3  # failed calls are recorded too

    boom = RuntimeError("always")
    engine.fail("maintain", boom)
    for _ in range(2):
        with pytest.raises(RuntimeError) as info:
            await engine.maintain(MaintainParams(session_id="s", session_key="k", session_file="f", reason="turn"))
        assert info.value is boom


async def test_recording_engine_hang_until_released():
    engine = RecordingEngine()
    release = trio.Event()
    engine.hang("assemble", release)
    results = []
    params = AssembleParams(session_id="s", session_key="k", messages=_history(1))

    async def call():
        results.append(await engine.assemble(params))

    with trio.fail_after(DEADLOCK_GUARD_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            seen = await engine.wait_for_call("assemble")
            assert seen.params is params
            assert results == []  # recorded, but still blocked
            release.set()
    assert len(results) == 1


async def test_recording_engine_hang_forever_is_cancellable():
    engine = RecordingEngine()
    engine.hang("after_turn")
    finished = []

    async def call(cancel_scope_holder):
        with trio.CancelScope() as scope:
            cancel_scope_holder.append(scope)
            await engine.after_turn(_after_turn_params(_history(1), 0))
            finished.append(True)

    holder = []
    with trio.fail_after(DEADLOCK_GUARD_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, holder)
            await engine.wait_for_call("after_turn")
            holder[0].cancel()
    assert finished == []
    assert engine.method_names == ["after_turn"]


async def test_wait_for_call_counts_calls():
    engine = RecordingEngine()

    async def ingest_three():
        for i in range(3):
            await engine.ingest(_ingest(i))
            await trio.lowlevel.checkpoint()

    with trio.fail_after(DEADLOCK_GUARD_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ingest_three)
            third = await engine.wait_for_call("ingest", count=3)
    assert third.params.message.content == "2"


def test_recording_engine_omitted_methods_are_really_absent():
    engine = RecordingEngine(omit=["after_turn", "dispose"])
    assert not hasattr(engine, "after_turn")
    assert getattr(engine, "dispose", None) is None
    assert engines.implements(engine, "ingest_batch")
    assert not engines.implements(engine, "after_turn")
    with pytest.raises(ValueError):
        RecordingEngine(omit=["afterTurn"])
    # omitting a required method yields an invalid engine, for loader tests
    broken = RecordingEngine(omit=["compact"])
    with pytest.raises(engines.EngineLoadError, match="compact"):
        engines.validate_engine(broken)


def test_recording_engine_config_keys():
    engine = RecordingEngine({"id": "rec", "owns_compaction": True, "omit": ["ingest_batch"]})
    assert engine.info.id == "rec" and engine.info.owns_compaction is True
    assert not engines.implements(engine, "ingest_batch")


async def test_recording_engine_subclassing():
    with pytest.raises(TypeError, match="handle_assemble"):

        class Bad(RecordingEngine):
            async def assemble(self, params):  # bypasses recording
                return None

    class Summarising(RecordingEngine):
        after_turn = None  # this engine lacks after_turn

        async def handle_assemble(self, params):
            return AssembleResult(messages=[], estimated_tokens=1, system_prompt_addition="summary")

    engine = Summarising()
    out = await engine.assemble(AssembleParams(session_id="s", session_key="k", messages=_history(2)))
    assert out.system_prompt_addition == "summary"
    assert engine.method_names == ["assemble"]
    assert not engines.implements(engine, "after_turn")
    assert await engines.after_turn_with_fallback(engine, _after_turn_params(_history(3), 1)) == "ingest_batch"


# --------------------------------------------------------------------------
# Engine tools and the host (the contract's additions)
# --------------------------------------------------------------------------


def test_tool_and_host_types_are_exported_and_use_openclaw_field_names():
    for name in ("ToolSpec", "ToolCallParams", "ToolCallResult", "CompleteParams", "CompleteResult", "EngineHost", "EngineHostError"):
        assert name in engines.__all__ and hasattr(engines, name), name
    spec = engines.ToolSpec(name="t", description="d", input_schema={"type": "object"})
    assert engines.to_openclaw(spec) == {"name": "t", "description": "d", "inputSchema": {"type": "object"}}
    assert engines.to_openclaw(engines.ToolCallResult(text="x")) == {"text": "x", "isError": False}
    params = msgspec.convert(
        {"sessionId": "s", "sessionKey": "k", "callId": "c", "name": "t", "arguments": {"a": 1}}, engines.ToolCallParams
    )
    assert params.call_id == "c" and params.runtime_context == engines.RuntimeContext()
    assert engines.CompleteParams(system="s", prompt="p").max_output_tokens is None


class ToolEngine(MinimalEngine):
    def tools(self):
        return [engines.ToolSpec(name="t", description="d", input_schema={"type": "object"})]

    async def call_tool(self, params):
        return engines.ToolCallResult(text="ok")

    async def bind(self, host):
        self.host = host


def test_tool_methods_are_optional_methods_and_base_defaults_count_as_absent():
    for name in engines.EXTENSION_METHODS:
        assert engines.optional_method(MinimalEngine(), name) is None, name
        assert engines.implements(ToolEngine(), name), name
    assert engines.validate_engine(ToolEngine()) is not None


def test_the_loader_refuses_an_async_tools_or_a_sync_call_tool():
    class AsyncTools(MinimalEngine):
        async def tools(self):
            return []

    class SyncCall(MinimalEngine):
        def call_tool(self, params):
            return None

    with pytest.raises(engines.EngineLoadError, match="tools\\(\\) must be a plain"):
        engines.validate_engine(AsyncTools())
    with pytest.raises(engines.EngineLoadError, match="call_tool\\(\\) must be async"):
        engines.validate_engine(SyncCall())


async def test_the_base_call_tool_stand_in_answers_with_an_error_result():
    result = await MinimalEngine().call_tool(
        engines.ToolCallParams(session_id="s", session_key="k", call_id="c", name="x", arguments={})
    )
    assert result.is_error and "'x'" in result.text


async def test_fake_host_answers_as_scripted_and_counts_tokens_exactly(autojump_clock):
    import trio

    from engines.testkit import HANG, FakeHost
    from engines.tokens import count_tokens

    with FakeHost(default_text="default") as host:
        assert isinstance(host, engines.EngineHost)
        assert os.path.isdir(host.state_dir)
        assert host.count_tokens("hello world") == count_tokens("hello world") == 2
        host.push("first", engines.EngineHostError("down"), HANG, engines.CompleteResult(text="fourth"))
        ask = engines.CompleteParams(system="s", prompt="p")
        assert (await host.complete(ask)).text == "first"
        with pytest.raises(engines.EngineHostError, match="down"):
            await host.complete(ask)
        with trio.move_on_after(30) as scope:
            await host.complete(ask)
        assert scope.cancelled_caught
        assert (await host.complete(ask)).text == "fourth"
        assert (await host.complete(ask)).text == "default"
        host.answer_with(lambda p: p.prompt.upper())
        assert (await host.complete(ask)).text == "P"
        host.fail_all()
        with pytest.raises(engines.EngineHostError):
            await host.complete(ask)
        assert len(host.calls) == 7
        folder = host.state_dir
    assert not os.path.exists(folder)
