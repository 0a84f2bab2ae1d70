"""protocol.codex against the real protocol: the generated schema and real frames.

The schema part generates ``codex app-server generate-json-schema
--experimental`` once per session and checks, for every Struct:

* each field's wire name is a property of the schema object it models;
* each tag is the ``type`` of the schema union member it models;
* everything the schema allows for a field (its JSON types, ``null``
  included, array items too) is accepted by the field's annotation, and a
  field without a default is one the schema requires, so any message the
  schema allows decodes;
* the method registries point at the schema's params/result types;
* the sample frames used by the tests are valid instances of the schema.

The decoding part needs no binary: every sample and every recorded fixture
frame decodes, unknown or ill-fitting items fall back instead of raising,
and errors never quote message content.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codex
from tests.support import codex_samples as samples
from tests.support.codex import CODEX_BIN
from tests.support.harness import ROOT

# Which Struct types which method's params or result (the tests' own table:
# the sidecar decodes by Struct, with codex.decode_as).
NOTIFICATIONS: dict[str, type[msgspec.Struct]] = {
    "thread/started": codex.ThreadStartedNotification,
    "turn/started": codex.TurnStartedNotification,
    "turn/completed": codex.TurnCompletedNotification,
    "item/started": codex.ItemStartedNotification,
    "item/completed": codex.ItemCompletedNotification,
    "thread/tokenUsage/updated": codex.ThreadTokenUsageUpdatedNotification,
}
REQUEST_PARAMS: dict[str, type[msgspec.Struct]] = {
    "thread/start": codex.ThreadStartParams,
    "thread/resume": codex.ThreadResumeParams,
    "thread/fork": codex.ThreadForkParams,
    "thread/compact/start": codex.ThreadCompactStartParams,
    "turn/start": codex.TurnStartParams,
}
RESULTS: dict[str, type[msgspec.Struct]] = {
    "thread/start": codex.ThreadResult,
    "thread/resume": codex.ThreadResult,
    "thread/fork": codex.ThreadResult,
    "turn/start": codex.TurnStartResult,
}


def decode_notification(method: str, params: Any) -> Any | None:
    cls = NOTIFICATIONS.get(method)
    return None if cls is None else codex.decode_as(cls, params)


def decode_params(method: str, params: Any) -> Any | None:
    cls = REQUEST_PARAMS.get(method)
    return None if cls is None else codex.decode_as(cls, params)


def decode_result(method: str, result: Any) -> Any | None:
    cls = RESULTS.get(method)
    return None if cls is None else codex.decode_as(cls, result)

FIXTURES = sorted((ROOT / "fixtures").glob("*.jsonl"))

ANY = "any"

# Struct -> the schema object it models: a definition name, (union, tag) for a
# tagged union member, ("*", union) for a Struct merging every member of a
# union, or a list of names when one Struct reads several identical shapes.
SCHEMA_MAP: dict[type, Any] = {
    codex.ByteRange: "ByteRange",
    codex.TextElement: "TextElement",
    codex.TextInput: ("UserInput", "text"),
    codex.ImageInput: ("UserInput", "image"),
    codex.LocalImageInput: ("UserInput", "localImage"),
    codex.SkillInput: ("UserInput", "skill"),
    codex.MentionInput: ("UserInput", "mention"),
    codex.UserMessageItem: ("ThreadItem", "userMessage"),
    codex.AgentMessageItem: ("ThreadItem", "agentMessage"),
    codex.ReasoningItem: ("ThreadItem", "reasoning"),
    codex.CommandExecutionItem: ("ThreadItem", "commandExecution"),
    codex.FileUpdateChange: "FileUpdateChange",
    codex.FileChangeItem: ("ThreadItem", "fileChange"),
    codex.McpToolCallResult: "McpToolCallResult",
    codex.McpToolCallError: "McpToolCallError",
    codex.McpToolCallItem: ("ThreadItem", "mcpToolCall"),
    codex.DynamicToolCallItem: ("ThreadItem", "dynamicToolCall"),
    codex.WebSearchItem: ("ThreadItem", "webSearch"),
    codex.ContextCompactionItem: ("ThreadItem", "contextCompaction"),
    codex.PlanItem: ("ThreadItem", "plan"),
    codex.DynamicToolNamespaceTool: ("*", "DynamicToolNamespaceTool"),
    codex.DynamicToolSpec: ("*", "DynamicToolSpec"),
    codex.ThreadStartParams: "ThreadStartParams",
    codex.ThreadResumeParams: "ThreadResumeParams",
    codex.ThreadForkParams: "ThreadForkParams",
    codex.ThreadCompactStartParams: "ThreadCompactStartParams",
    codex.AdditionalContextEntry: "AdditionalContextEntry",
    codex.TurnStartParams: "TurnStartParams",
    codex.TurnError: "TurnError",
    codex.Turn: "Turn",
    codex.Thread: "Thread",
    codex.ThreadResult: ["ThreadStartResponse", "ThreadResumeResponse", "ThreadForkResponse"],
    codex.TurnStartResult: "TurnStartResponse",
    codex.ThreadStartedNotification: "ThreadStartedNotification",
    codex.TurnStartedNotification: "TurnStartedNotification",
    codex.TurnCompletedNotification: "TurnCompletedNotification",
    codex.ItemStartedNotification: "ItemStartedNotification",
    codex.ItemCompletedNotification: "ItemCompletedNotification",
    codex.TokenUsageBreakdown: "TokenUsageBreakdown",
    codex.ThreadTokenUsage: "ThreadTokenUsage",
    codex.ThreadTokenUsageUpdatedNotification: "ThreadTokenUsageUpdatedNotification",
}
# Fallbacks have no schema counterpart by design.
UNMAPPED = {codex.UnknownItem, codex.UnknownInput}


def _module_structs() -> list[type]:
    return [
        obj
        for name, obj in vars(codex).items()
        if isinstance(obj, type)
        and issubclass(obj, msgspec.Struct)
        and obj.__module__ == codex.__name__
        and not name.startswith("_")
    ]


# --------------------------------------------------------------------------
# The schema (generated once per session)
# --------------------------------------------------------------------------


class Schema:
    def __init__(self, root: Path) -> None:
        self.defs: dict[str, Any] = {}
        self.roots: dict[str, Any] = {}
        for path in sorted(root.rglob("*.json")):
            doc = json.loads(path.read_text())
            self.roots[path.stem] = doc
            for name, sub in (doc.get("definitions") or {}).items():
                self.defs.setdefault(name, sub)
        for name, doc in self.roots.items():
            self.defs.setdefault(name, {k: v for k, v in doc.items() if k != "definitions"})

    def resolve(self, schema: Any) -> Any:
        while isinstance(schema, dict):
            if "$ref" in schema:
                schema = self.defs[schema["$ref"].rsplit("/", 1)[-1]]
            elif "allOf" in schema and len(schema["allOf"]) == 1 and "properties" not in schema:
                schema = schema["allOf"][0]
            else:
                break
        return schema

    def ref_name(self, schema: Any) -> str | None:
        """The definition a property points at (directly, or as ``X | null``)."""
        if not isinstance(schema, dict):
            return None
        if "$ref" in schema:
            return schema["$ref"].rsplit("/", 1)[-1]
        for key in ("allOf", "anyOf", "oneOf"):
            refs = [self.ref_name(alt) for alt in schema.get(key, [])]
            refs = [r for r in refs if r]
            if len(refs) == 1:
                return refs[0]
        return None

    def union_members(self, union: str) -> list[dict]:
        return [self.resolve(alt) for alt in self.resolve(self.defs[union]).get("oneOf", [])]

    @staticmethod
    def member_tag(member: dict) -> str | None:
        enum = ((member.get("properties") or {}).get("type") or {}).get("enum")
        return enum[0] if enum and len(enum) == 1 else None

    def _object(self, schema: Any) -> tuple[dict[str, Any], set[str]]:
        schema = self.resolve(schema)
        props = dict(schema.get("properties") or {})
        required = set(schema.get("required") or ())
        for key in ("anyOf", "oneOf"):
            for alt in schema.get(key, []):
                alt = self.resolve(alt)
                for name, prop in (alt.get("properties") or {}).items():
                    props.setdefault(name, prop)
        return props, required

    def objects_for(self, spec: Any) -> list[tuple[str, dict[str, Any], set[str]]]:
        """[(label, properties, required)] of the schema object(s) a Struct models."""
        if isinstance(spec, list):
            return [obj for name in spec for obj in self.objects_for(name)]
        if isinstance(spec, tuple) and spec[0] == "*":
            members = self.union_members(spec[1])
            props: dict[str, Any] = {}
            required: set[str] | None = None
            for member in members:
                p, r = self._object(member)
                for name, prop in p.items():
                    props.setdefault(name, prop)
                required = r if required is None else required & r
            return [(f"{spec[1]}[*]", props, required or set())]
        if isinstance(spec, tuple):
            union, tag = spec
            found = [m for m in self.union_members(union) if self.member_tag(m) == tag]
            assert found, f"schema union {union} has no member tagged {tag!r}"
            return [(f"{union}[{tag}]", *self._object(found[0]))]
        assert spec in self.defs, f"schema has no definition {spec}"
        return [(spec, *self._object(self.defs[spec]))]

    def json_types(self, schema: Any) -> set[str] | str:
        if schema is True:
            return ANY
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return ANY
        types: set[str] = set()
        declared = schema.get("type")
        if declared:
            types |= {declared} if isinstance(declared, str) else set(declared)
        for value in schema.get("enum", ()):
            types.add(_json_type_of(value))
        for key in ("anyOf", "oneOf", "allOf"):
            for alt in schema.get(key, []):
                sub = self.json_types(alt)
                if sub == ANY:
                    if key == "allOf" or declared:
                        continue
                    return ANY
                types |= sub
        if not types and "properties" in schema:
            types.add("object")
        return types or ANY


def _json_type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _our_types(t: mi.Type) -> set[str] | str:
    if isinstance(t, mi.AnyType):
        return ANY
    if isinstance(t, mi.UnionType):
        out: set[str] = set()
        for sub in t.types:
            s = _our_types(sub)
            if s == ANY:
                return ANY
            out |= s
        return out
    if isinstance(t, mi.NoneType):
        return {"null"}
    if isinstance(t, mi.StrType):
        return {"string"}
    if isinstance(t, mi.BoolType):
        return {"boolean"}
    if isinstance(t, mi.IntType):
        return {"integer"}
    if isinstance(t, mi.FloatType):
        return {"integer", "number"}
    if isinstance(t, (mi.ListType, mi.TupleType, mi.VarTupleType)):
        return {"array"}
    if isinstance(t, (mi.DictType, mi.StructType)):
        return {"object"}
    if isinstance(t, mi.LiteralType):
        return {_json_type_of(v) for v in t.values}
    raise AssertionError(f"annotation kind not handled by the test: {t!r}")


def _members(t: mi.Type, kind: type) -> list:
    if isinstance(t, mi.UnionType):
        return [m for m in t.types if isinstance(m, kind)]
    return [t] if isinstance(t, kind) else []


def _check_type(schema: Schema, ours: mi.Type, prop: Any, where: str) -> list[str]:
    problems: list[str] = []
    theirs = schema.json_types(prop)
    mine = _our_types(ours)
    if mine == ANY:
        return problems
    if theirs == ANY:
        return [f"{where}: the schema allows any JSON value, the annotation only {sorted(mine)}"]
    if not theirs <= mine:
        return [f"{where}: the schema allows {sorted(theirs)}, the annotation only {sorted(mine)}"]
    resolved = schema.resolve(prop)
    alternatives = [resolved] + [schema.resolve(a) for k in ("anyOf", "oneOf") for a in resolved.get(k, [])]
    for lst in _members(ours, mi.ListType):
        for alt in alternatives:
            if isinstance(alt, dict) and "items" in alt:
                problems += _check_type(schema, lst.item_type, alt["items"], f"{where}[]")
    for dct in _members(ours, mi.DictType):
        for alt in alternatives:
            if isinstance(alt, dict) and isinstance(alt.get("additionalProperties"), dict):
                problems += _check_type(schema, dct.value_type, alt["additionalProperties"], f"{where}{{}}")
    for struct in _members(ours, mi.StructType):
        ref = schema.ref_name(prop)
        mapped = SCHEMA_MAP.get(struct.cls)
        if ref and isinstance(mapped, str) and mapped != ref:
            problems.append(f"{where}: is {struct.cls.__name__} (mapped to {mapped}) but the schema says {ref}")
    return problems


@pytest.fixture(scope="session")
def schema(tmp_path_factory) -> Schema:
    if CODEX_BIN is None:
        pytest.skip(
            "real codex not installed (run `make setup` or set CODEX_SIDECAR_TEST_CODEX_BIN): "
            "cannot generate the protocol schema to check protocol.codex against"
        )
    out = tmp_path_factory.mktemp("codex-schema")
    proc = subprocess.run(
        [CODEX_BIN, "app-server", "generate-json-schema", "--experimental", "--out", str(out)],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return Schema(out)


# --------------------------------------------------------------------------
# Structs against the schema
# --------------------------------------------------------------------------


def test_every_struct_is_mapped_to_the_schema():
    structs = set(_module_structs())
    assert structs - UNMAPPED == set(SCHEMA_MAP), "add new Structs to SCHEMA_MAP (or UNMAPPED)"


@pytest.mark.parametrize("cls", list(SCHEMA_MAP), ids=lambda c: c.__name__)
def test_struct_fields_match_schema(schema, cls):
    info = mi.type_info(cls)
    problems: list[str] = []
    for label, props, required in schema.objects_for(SCHEMA_MAP[cls]):
        for field in info.fields:
            where = f"{cls.__name__}.{field.name} ({label}.{field.encode_name})"
            if field.encode_name not in props:
                problems.append(f"{where}: no such property in the schema")
                continue
            if field.required and field.encode_name not in required:
                problems.append(f"{where}: has no default but the schema does not require it")
            problems += _check_type(schema, field.type, props[field.encode_name], where)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("cls", list(SCHEMA_MAP), ids=lambda c: c.__name__)
def test_struct_tags_match_schema(schema, cls):
    spec = SCHEMA_MAP[cls]
    tag = cls.__struct_config__.tag
    if isinstance(spec, tuple) and spec[0] != "*":
        assert cls.__struct_config__.tag_field == "type"
        assert tag == spec[1] == cls.type
    else:
        assert tag is None, f"{cls.__name__} is tagged but models a plain object"


def test_dispatch_tables_cover_known_members_only(schema):
    item_tags = {schema.member_tag(m) for m in schema.union_members("ThreadItem")}
    input_tags = {schema.member_tag(m) for m in schema.union_members("UserInput")}
    assert set(codex.ITEM_TYPES) <= item_tags
    assert set(codex.USER_INPUT_TYPES) <= input_tags
    # The brief's item types are all modelled; the rest fall back to UnknownItem.
    assert {
        "userMessage", "agentMessage", "reasoning", "commandExecution", "fileChange",
        "mcpToolCall", "dynamicToolCall", "webSearch", "contextCompaction", "plan",
    } <= set(codex.ITEM_TYPES)
    unmodelled = sorted(item_tags - set(codex.ITEM_TYPES))
    logging.getLogger(__name__).info("ThreadItem types decoded as UnknownItem: %s", unmodelled)
    for tag in unmodelled:
        assert isinstance(codex.thread_item({"type": tag, "id": "x"}), codex.UnknownItem)


def _method_params(schema: Schema, union_file: str) -> dict[str, str]:
    out = {}
    for variant in schema.roots[union_file]["oneOf"]:
        method = variant["properties"]["method"]["enum"][0]
        ref = schema.ref_name(variant["properties"].get("params", {}))
        out[method] = ref
    return out


def test_registries_match_schema_methods(schema):
    notifications = _method_params(schema, "ServerNotification")
    requests = _method_params(schema, "ClientRequest")
    for method, cls in NOTIFICATIONS.items():
        assert notifications.get(method) == SCHEMA_MAP[cls], method
    for method, cls in REQUEST_PARAMS.items():
        assert requests.get(method) == SCHEMA_MAP[cls], method
    for method, cls in RESULTS.items():
        response = requests[method].removesuffix("Params") + "Response"
        mapped = SCHEMA_MAP[cls]
        assert response in (mapped if isinstance(mapped, list) else [mapped]), method


def _validator(schema: Schema, name: str):
    jsonschema = pytest.importorskip("jsonschema")
    doc = {"$ref": f"#/definitions/{name}", "definitions": schema.defs}
    return jsonschema.Draft7Validator(doc)


@pytest.mark.parametrize("name", sorted(samples.ALL))
def test_sample_frames_are_schema_valid(schema, name):
    frame = samples.frame(name)
    method = frame["method"]
    if "id" in frame:
        params_def = _method_params(schema, "ClientRequest")[method]
    else:
        params_def = _method_params(schema, "ServerNotification")[method]
    errors = sorted(_validator(schema, params_def).iter_errors(frame["params"]), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


# --------------------------------------------------------------------------
# Decoding samples (no binary needed)
# --------------------------------------------------------------------------

EXPECTED_ITEM_CLASS = {
    "userMessage": codex.UserMessageItem,
    "userMessage_image": codex.UserMessageItem,
    "userMessage_inputs": codex.UserMessageItem,
    "agentMessage": codex.AgentMessageItem,
    "reasoning": codex.ReasoningItem,
    "commandExecution": codex.CommandExecutionItem,
    "commandExecution_failed": codex.CommandExecutionItem,
    "fileChange": codex.FileChangeItem,
    "mcpToolCall": codex.McpToolCallItem,
    "mcpToolCall_error": codex.McpToolCallItem,
    "dynamicToolCall": codex.DynamicToolCallItem,
    "dynamicToolCall_failed": codex.DynamicToolCallItem,
    "webSearch": codex.WebSearchItem,
    "contextCompaction": codex.ContextCompactionItem,
    "plan": codex.PlanItem,
    "imageView": codex.UnknownItem,
}


def test_expected_item_classes_cover_every_item_sample():
    assert set(EXPECTED_ITEM_CLASS) == set(samples.item_frames())


@pytest.mark.parametrize("name", sorted(EXPECTED_ITEM_CLASS))
@pytest.mark.parametrize("form", ["bytes", "str", "raw", "builtins"])
def test_item_notifications_decode_in_every_input_form(name, form):
    frame = samples.frame(name)
    encoded = json.dumps(frame["params"])
    data = {
        "bytes": encoded.encode(),
        "str": encoded,
        "raw": msgspec.Raw(encoded.encode()),
        "builtins": frame["params"],
    }[form]
    note = decode_notification("item/completed", data)
    assert isinstance(note, codex.ItemCompletedNotification)
    raw_item = frame["params"]["item"]
    assert note.thread_id == frame["params"]["threadId"]
    assert note.turn_id == frame["params"]["turnId"]
    assert note.completed_at_ms == frame["params"]["completedAtMs"]
    assert type(note.item) is EXPECTED_ITEM_CLASS[name]
    assert note.item.id == raw_item["id"]
    assert note.item.type == raw_item["type"]


def test_real_item_fields():
    cmd = codex.thread_item(samples.item("commandExecution_failed"))
    assert isinstance(cmd, codex.CommandExecutionItem)
    assert (cmd.status, cmd.exit_code, cmd.aggregated_output) == ("failed", 3, "oops\n")
    assert cmd.command == "/bin/bash -lc 'echo oops; exit 3'"
    patch = codex.thread_item(samples.item("fileChange"))
    assert [(c.path.rsplit("/", 1)[-1], c.kind_type, c.diff) for c in patch.changes] == [
        ("hello.txt", "add", "hello world\n")
    ]
    reasoning = codex.thread_item(samples.item("reasoning"))
    assert reasoning.summary == ["**Plan**\n\nI should check.", "Second part."]
    assert reasoning.content == ["raw thoughts"]
    search = codex.thread_item(samples.item("webSearch"))
    assert (search.query, search.action["type"]) == ("weather paris", "search")
    tool = codex.thread_item(samples.item("dynamicToolCall"))
    assert (tool.tool, tool.arguments, tool.success) == ("get_weather", {"city": "Paris"}, True)
    assert tool.content_items == [{"type": "inputText", "text": "Paris: 21C and sunny"}]
    mcp = codex.thread_item(samples.item("mcpToolCall"))
    assert (mcp.server, mcp.tool, mcp.result.content[0]["text"]) == ("docs", "search", "Nurseries own tasks.")
    user = codex.thread_item(samples.item("userMessage_inputs"))
    kinds = [type(x).__name__ for x in user.content]
    assert kinds == [
        "TextInput", "ImageInput", "ImageInput", "LocalImageInput", "SkillInput", "MentionInput", "UnknownInput",
    ]
    assert user.content[0].text_elements[0].byte_range == codex.ByteRange(start=4, end=11)
    assert user.content[2].file_id == "file_123"
    assert user.content[6].type == "localAudio" and user.content[6].raw["path"] == "/tmp/a.wav"


def test_turn_notifications_and_usage():
    done = decode_notification("turn/completed", samples.frame("turn/completed:completed")["params"])
    assert isinstance(done, codex.TurnCompletedNotification)
    assert done.turn.status == codex.TURN_COMPLETED and done.turn.items_view == "summary"
    assert [type(i) for i in done.turn.items] == [codex.AgentMessageItem]
    failed = decode_notification("turn/completed", samples.frame("turn/completed:failed")["params"])
    assert failed.turn.status == codex.TURN_FAILED
    assert failed.turn.error.message.endswith("scenario model failure")
    interrupted = decode_notification("turn/completed", samples.frame("turn/completed:interrupted")["params"])
    assert interrupted.turn.status == codex.TURN_INTERRUPTED and interrupted.turn.error is None
    started = decode_notification("turn/started", samples.frame("turn/started")["params"])
    assert started.turn.status == codex.TURN_IN_PROGRESS
    usage = decode_notification("thread/tokenUsage/updated", samples.frame("thread/tokenUsage/updated")["params"])
    raw = samples.frame("thread/tokenUsage/updated")["params"]["tokenUsage"]
    assert usage.token_usage.last.input_tokens == raw["last"]["inputTokens"]
    assert usage.token_usage.total.total_tokens == raw["total"]["totalTokens"]
    assert usage.token_usage.model_context_window == raw["modelContextWindow"]


def test_request_params_decode_into_typed_structs():
    start = decode_params("thread/start", samples.frame("thread/start")["params"])
    assert start.developer_instructions == "Scenario developer instructions: answer briefly."
    assert start.dynamic_tool_names() == ["get_weather"]
    turn = decode_params("turn/start", samples.frame("turn/start")["params"])
    assert [type(i) for i in turn.inputs()] == [codex.TextInput]
    assert turn.input == samples.frame("turn/start")["params"]["input"], "the items as decoded, every field kept"
    projected = decode_params("turn/start", samples.frame("turn/start_projected")["params"])
    assert projected.additional_context["openclaw"] == codex.AdditionalContextEntry(kind="application", value="ctx")
    assert (projected.model, projected.cwd) == ("gpt-test", "/w")
    resume = decode_params("thread/resume", samples.frame("thread/resume")["params"])
    assert resume.thread_id.startswith("01a20130") and resume.history is None
    compact = decode_params("thread/compact/start", samples.frame("thread/compact/start")["params"])
    assert compact.thread_id.startswith("01a20130")
    spec = codex.DynamicToolSpec(
        name="ns", type="namespace", tools=[codex.DynamicToolNamespaceTool(name="a"), codex.DynamicToolNamespaceTool(name="b")]
    )
    untyped = msgspec.convert({"name": "legacy_tool", "description": "d", "inputSchema": {}}, codex.DynamicToolSpec)
    assert codex.ThreadStartParams(dynamic_tools=[spec, untyped]).dynamic_tool_names() == ["a", "b", "legacy_tool"]


# --------------------------------------------------------------------------
# Tolerance and errors
# --------------------------------------------------------------------------


def test_unknown_type_and_ill_fitting_items_fall_back(caplog):
    caplog.set_level(logging.DEBUG, logger="codex_sidecar.protocol.codex")
    secret = "TOP-SECRET-PROMPT-TEXT"
    future = {"type": "hologram", "id": "h1", "text": secret}
    got = codex.thread_item(future)
    assert got == codex.UnknownItem(type="hologram", id="h1", raw=future)
    wrong = {"type": "agentMessage", "id": "a1", "text": {"nested": secret}}
    got = codex.thread_item(wrong)
    assert isinstance(got, codex.UnknownItem) and got.type == "agentMessage" and got.raw == wrong
    for value in (None, 3, "x", [], {"id": "no type"}, b"not json"):
        assert isinstance(codex.thread_item(value), codex.UnknownItem)
        assert isinstance(codex.user_input(value), codex.UnknownInput)
    logged = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert "hologram" in logged and "h1" in logged
    assert secret not in logged


def test_new_fields_and_missing_optional_fields_are_tolerated():
    item = samples.item("commandExecution")
    item["brandNewField"] = {"deep": [1, 2, 3]}
    item["commandActions"].append({"type": "teleport", "command": "x"})
    for optional in ("aggregatedOutput", "exitCode", "durationMs", "processId", "cwd", "source"):
        item.pop(optional)
    got = codex.thread_item(item)
    assert isinstance(got, codex.CommandExecutionItem)
    assert got.exit_code is None and got.aggregated_output is None
    note = samples.frame("turn/completed:completed")["params"]
    note["turn"]["status"] = "someNewStatus"
    note["turn"]["items"].append({"type": "hologram", "id": "h"})
    decoded = decode_notification("turn/completed", note)
    assert decoded.turn.status == "someNewStatus"
    assert isinstance(decoded.turn.items[-1], codex.UnknownItem)


def test_invalid_messages_raise_without_quoting_content():
    secret = "TOP-SECRET-PROMPT-TEXT"
    cases = [
        b"",
        msgspec.Raw(b""),
        b"[1, 2]",
        b"{not json",
        {"turn": {"id": "t"}},  # no threadId
        {"threadId": 7, "turn": {"id": "t"}},
        {"threadId": secret, "turn": {"id": 5, "status": secret}},
        {"threadId": "t", "turn": secret},
    ]
    for data in cases:
        with pytest.raises(codex.CodexDecodeError) as info:
            decode_notification("turn/completed", data)
        assert secret not in str(info.value)
        assert "TurnCompletedNotification" in str(info.value)


_json_leaf = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
_json = st.recursive(
    _json_leaf,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
_item_names = sorted(EXPECTED_ITEM_CLASS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_item_names), extra=st.dictionaries(st.text(min_size=1, max_size=10), _json, max_size=4))
def test_extra_fields_never_change_the_decoded_item(name, extra):
    item = samples.item(name)
    baseline = codex.thread_item(item)
    known = {f.encode_name for f in msgspec.structs.fields(type(baseline))} | {"type", "id"}
    item.update({k: v for k, v in extra.items() if k not in known})
    got = codex.thread_item(item)
    assert type(got) is type(baseline)
    if not isinstance(got, codex.UnknownItem):
        assert got == baseline


@settings(max_examples=300, deadline=None)
@given(value=_json, kind=st.sampled_from(sorted(codex.ITEM_TYPES) + ["nope", ""]))
def test_thread_item_never_raises(value, kind):
    data = value if not isinstance(value, dict) else {**value, "type": kind}
    got = codex.thread_item(data)
    assert isinstance(got, (codex.UnknownItem, *codex.ITEM_TYPES.values()))
    codex.user_input(data)


# --------------------------------------------------------------------------
# Recorded fixtures (tests/tools/test_replay.py's files), when present
# --------------------------------------------------------------------------


def _fixture_records(path: Path):
    from sidecar.record import read_recording

    for rec in read_recording(path):
        line = rec.line()
        if line is None:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            yield rec.dir, msg


@pytest.mark.skipif(not FIXTURES, reason="no recorded fixtures in fixtures/ (run `make fixtures`)")
@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_recorded_frames_decode(fixture):
    pending: dict[tuple[str, Any], str] = {}
    decoded = 0
    for direction, msg in _fixture_records(fixture):
        method = msg.get("method")
        source, _, target = direction.partition(">")
        if method is not None and "id" in msg:
            pending[(target + ">" + source, msg["id"])] = method
            if source in ("client", "sidecar"):
                typed = decode_params(method, msg.get("params"))
                decoded += typed is not None
        elif method is not None:
            typed = decode_notification(method, msg.get("params"))
            if typed is not None:
                decoded += 1
                item = getattr(typed, "item", None)
                if item is not None and msg["params"]["item"].get("type") in codex.ITEM_TYPES:
                    assert not isinstance(item, codex.UnknownItem), msg["params"]["item"].get("type")
        elif "result" in msg:
            request = pending.pop((direction, msg.get("id")), None)
            if request is not None:
                typed = decode_result(request, msg["result"])
                decoded += typed is not None
    assert decoded > 0
