"""Engine tools as Codex dynamic tools: the pure decisions (sidecar.host.tools)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines import ToolCallResult, ToolSpec
from sidecar.host.offered import OfferedTools
from sidecar.host.tools import (
    client_tool_names,
    engine_call,
    failed_answer,
    is_engine_item,
    merge_tools,
    tool_answer,
    usable_specs,
    without_engine_items,
)

ROOT = Path(__file__).resolve().parents[2]
GREP = ToolSpec(name="lcm_grep", description="search", input_schema={"type": "object", "properties": {"query": {"type": "string"}}})
EXPAND = ToolSpec(name="lcm_expand", description="expand", input_schema={"type": "object"})
WEATHER = {"type": "function", "name": "get_weather", "description": "w", "inputSchema": {"type": "object"}}


def fixture_frames(name: str) -> list[dict]:
    return [json.loads(line)["frame"] for line in (ROOT / "fixtures" / name).read_text().splitlines()]


def test_engine_tools_follow_the_clients_own_in_dynamic_tools():
    merged, names = merge_tools({"cwd": "/w", "dynamicTools": [WEATHER]}, [GREP, EXPAND])
    assert names == ("lcm_grep", "lcm_expand")
    assert merged["cwd"] == "/w"
    assert merged["dynamicTools"][0] is WEATHER
    assert merged["dynamicTools"][1:] == [
        {"type": "function", "name": "lcm_grep", "description": "search", "inputSchema": GREP.input_schema},
        {"type": "function", "name": "lcm_expand", "description": "expand", "inputSchema": {"type": "object"}},
    ]


def test_engine_tools_are_added_to_a_start_without_dynamic_tools():
    merged, names = merge_tools({"cwd": "/w"}, [GREP])
    assert names == ("lcm_grep",)
    assert [t["name"] for t in merged["dynamicTools"]] == ["lcm_grep"]


def test_a_name_the_client_declares_stays_the_clients():
    own = {"type": "function", "name": "lcm_grep", "description": "the client's", "inputSchema": {}}
    merged, names = merge_tools({"dynamicTools": [own]}, [GREP, EXPAND])
    assert names == ("lcm_expand",)
    assert merged["dynamicTools"] == [own, {"type": "function", "name": "lcm_expand", "description": "expand", "inputSchema": {"type": "object"}}]


def test_nothing_changes_when_the_client_declares_every_name_or_the_engine_has_none():
    own = [{"name": "lcm_grep", "description": "", "inputSchema": {}}]
    assert merge_tools({"dynamicTools": own}, [GREP]) == (None, ())
    assert merge_tools({"dynamicTools": own}, []) == (None, ())
    assert merge_tools({"dynamicTools": "not a list"}, [GREP]) == (None, ())


def test_a_namespace_member_does_not_clash_with_a_top_level_engine_tool():
    namespace = {"type": "namespace", "name": "mem", "description": "", "tools": [{"name": "lcm_grep"}]}
    assert client_tool_names([namespace, WEATHER, "junk"]) == {"get_weather"}
    _, names = merge_tools({"dynamicTools": [namespace]}, [GREP])
    assert names == ("lcm_grep",)


def test_unusable_specs_are_left_out():
    dup = ToolSpec(name="lcm_grep", description="again", input_schema={})
    nameless = ToolSpec(name="", description="x", input_schema={})
    assert usable_specs([GREP, dup, nameless, "not a spec", EXPAND]) == [GREP, EXPAND]


def test_a_call_is_the_engines_only_for_a_name_it_was_given_on_that_thread():
    request = next(f for f in fixture_frames("dynamic_tool_call.jsonl") if f.get("method") == "item/tool/call")
    params = dict(request["params"])
    offered = {params["threadId"]: frozenset({"lcm_grep"})}

    def names(thread_id: str) -> frozenset[str]:
        return offered.get(thread_id, frozenset())

    assert not engine_call(params, names)  # get_weather: the client's
    assert engine_call({**params, "tool": "lcm_grep"}, names)
    assert not engine_call({**params, "tool": "lcm_grep", "namespace": "mem"}, names)
    assert not engine_call({**params, "tool": "lcm_grep", "threadId": "another"}, names)
    assert not engine_call(None, names)


def test_the_answer_has_the_shape_codex_took_from_a_client():
    answer = next(f for f in fixture_frames("dynamic_tool_call.jsonl") if f.get("dir") is None and "result" in f and "contentItems" in f["result"])
    text = answer["result"]["contentItems"][0]["text"]
    assert tool_answer(ToolCallResult(text=text)) == answer["result"]
    assert tool_answer(ToolCallResult(text="no such id", is_error=True)) == {"contentItems": [{"type": "inputText", "text": "no such id"}], "success": False}
    failed = failed_answer("lcm_grep", "the engine raised RuntimeError")
    assert failed["success"] is False and "lcm_grep" in failed["contentItems"][0]["text"]


def _tool_item(tool: str, namespace: str | None = None) -> dict:
    return {"type": "dynamicToolCall", "id": f"call_{tool}", "namespace": namespace, "tool": tool, "arguments": {}, "status": "completed"}


def test_reads_lose_the_engines_items_and_keep_everything_else():
    user = {"type": "userMessage", "id": "u1", "content": []}
    reply = {"type": "agentMessage", "id": "m1", "text": "lcm_grep is a word here"}
    client_call = _tool_item("get_weather")
    read = {"thread": {"id": "t", "turns": [{"id": "turn1", "items": [user, _tool_item("lcm_grep"), client_call, reply]}, {"id": "turn2", "items": [user]}]}}
    names = frozenset({"lcm_grep"})
    stripped = without_engine_items(read, names)
    assert stripped["thread"]["turns"][0]["items"] == [user, client_call, reply]
    assert stripped["thread"]["turns"][1] is read["thread"]["turns"][1]
    assert read["thread"]["turns"][0]["items"][1]["tool"] == "lcm_grep"  # the original is not changed


def test_item_listing_entries_lose_the_engines_items():
    entries = {"data": [{"item": _tool_item("lcm_grep"), "turnId": "x"}, {"item": _tool_item("lcm_grep", "ns"), "turnId": "x"}], "nextCursor": None}
    stripped = without_engine_items(entries, frozenset({"lcm_grep"}))
    assert stripped["data"] == [entries["data"][1]]  # a namespaced call is the client's


def test_a_read_without_engine_items_is_returned_as_is():
    read = {"thread": {"id": "t", "turns": [{"id": "turn1", "items": [_tool_item("get_weather")]}]}}
    assert without_engine_items(read, frozenset({"lcm_grep"})) is read
    assert without_engine_items(read, frozenset()) is read
    assert is_engine_item(_tool_item("lcm_grep"), frozenset({"lcm_grep"}))
    assert not is_engine_item({"type": "agentMessage", "tool": "lcm_grep"}, frozenset({"lcm_grep"}))


def test_offered_names_survive_a_restart(tmp_path):
    thread = "01a20132-6799-70b2-9e11-b6afa40528ac"
    first = OfferedTools(tmp_path)
    first.note(thread, frozenset({"lcm_grep", "lcm_expand"}))
    assert first.get(thread) == {"lcm_grep", "lcm_expand"}
    first.write(thread, frozenset({"lcm_grep", "lcm_expand"}))
    assert OfferedTools(tmp_path).get(thread) == {"lcm_grep", "lcm_expand"}
    assert OfferedTools(tmp_path).get("01a20132-0000-70b2-9e11-b6afa40528ac") == frozenset()


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"names": "lcm_grep"}'])
def test_an_unreadable_record_offers_nothing(tmp_path, content):
    thread = "01a20132-6799-70b2-9e11-b6afa40528ac"
    (tmp_path / "engine-tools").mkdir()
    (tmp_path / "engine-tools" / f"{thread}.json").write_bytes(content)
    assert OfferedTools(tmp_path).get(thread) == frozenset()


def test_a_thread_id_that_is_no_file_name_is_never_written(tmp_path):
    offered = OfferedTools(tmp_path)
    offered.write("../escape", frozenset({"lcm_grep"}))
    assert not (tmp_path / "escape.json").exists() and not (tmp_path / "engine-tools").exists()
    assert offered.get("../escape") == frozenset()
