"""The engine-tools hooks on their own: a stub relay records what they send."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engines import RuntimeContext, ToolCallResult, ToolSpec
from protocol import Kind, encode_notification, encode_request, encode_response, parse
from sidecar.host.engine_tools import EngineTools
from sidecar.host.offered import OfferedTools
from sidecar.relay import HANDLED, Message, PendingRequest
from sidecar.session.context import LifecycleContext
from sidecar.session.options import LifecycleOptions
from sidecar.session.state import ThreadSession, new_session

THREAD = "01a20132-6799-70b2-9e11-b6afa40528ac"
GREP = ToolSpec(name="lcm_grep", description="search", input_schema={"type": "object"})


class Relay:
    def __init__(self) -> None:
        self.spawned: list[tuple[Any, tuple[Any, ...]]] = []
        self.to_child: list[bytes] = []

    @property
    def router(self) -> Relay:
        """The fake relay routes too (``proxy.router.send_to_child``)."""
        return self

    def spawn(self, fn: Any, *args: Any) -> None:
        self.spawned.append((fn, args))

    def send_to_child(self, line: bytes, direction: str = "sidecar>codex", *, raw: bool = False) -> bool:
        self.to_child.append(line)
        return True

    async def run_spawned(self) -> None:
        while self.spawned:
            fn, args = self.spawned.pop(0)
            await fn(*args)


class Engine:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[Any] = []

    async def call_tool(self, params: Any) -> Any:
        self.calls.append(params)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def make(tmp_path: Path, answer: Any = None) -> tuple[EngineTools, Relay, Engine, dict[str, ThreadSession]]:
    relay, engine = Relay(), Engine(answer if answer is not None else ToolCallResult(text="3 hits"))
    sessions: dict[str, ThreadSession] = {}
    ctx = LifecycleContext(relay, sessions, LifecycleOptions(engine_deadline=5.0), tmp_path)  # type: ignore[arg-type]
    tools = EngineTools(ctx, engine, [GREP], OfferedTools(tmp_path), lambda s: RuntimeContext())
    return tools, relay, engine, sessions


def msg(line: bytes) -> Message:
    """A frame as the router hands it to hooks: a client request with its pending entry."""
    env = parse(line)
    if env.kind is Kind.REQUEST:
        return Message(env, line, request=PendingRequest(env.id, env.method, env.id))  # type: ignore[arg-type]
    return Message(env, line)


def changed(hook: Any, m: Message, *args: Any) -> bytes:
    """What a hook that changes ``m`` (and forwards it) makes of it on the wire."""
    line = m.line
    assert hook(m, *args) is None
    out = m.wire()
    assert out != line, "the hook changed the message"
    return out


async def _start(tools: EngineTools, relay: Relay, sessions: dict[str, ThreadSession], client_tools: list[dict]) -> bytes:
    line = encode_request(7, "thread/start", {"cwd": "/w", "dynamicTools": client_tools})
    start = msg(line)
    assert tools.on_thread_start(start) is None
    rewritten = start.wire()
    assert rewritten != line
    params = json.loads(rewritten)["params"]
    sessions[THREAD] = new_session(THREAD, "key", Path("/dev/null"))
    answer = encode_response(7, {"thread": {"id": THREAD}})
    assert start.request is not None
    assert tools.on_started(msg(answer), start.request) is None
    await relay.run_spawned()  # the record is written
    return rewritten


async def test_a_started_thread_is_offered_the_tools_and_remembers_them(tmp_path):
    tools, relay, _, sessions = make(tmp_path)
    weather = {"type": "function", "name": "get_weather", "description": "", "inputSchema": {}}
    rewritten = await _start(tools, relay, sessions, [weather])
    assert [t["name"] for t in json.loads(rewritten)["params"]["dynamicTools"]] == ["get_weather", "lcm_grep"]
    assert OfferedTools(tmp_path).get(THREAD) == {"lcm_grep"}
    # (assemble's available_tools stay the client's own: tests/host/test_host.py.)


async def test_the_engines_call_is_answered_from_the_engine_and_held_from_the_client(tmp_path):
    tools, relay, engine, sessions = make(tmp_path)
    await _start(tools, relay, sessions, [])
    call = encode_request(0, "item/tool/call", {"threadId": THREAD, "turnId": "t", "callId": "c1", "namespace": None, "tool": "lcm_grep", "arguments": {"query": "x"}})
    assert tools.on_tool_call(msg(call)) is HANDLED
    await relay.run_spawned()
    assert json.loads(relay.to_child[-1]) == {"id": 0, "result": {"contentItems": [{"type": "inputText", "text": "3 hits"}], "success": True}}
    (params,) = engine.calls
    assert (params.session_id, params.session_key, params.call_id, params.arguments) == (THREAD, "key", "c1", {"query": "x"})
    resolved = encode_notification("serverRequest/resolved", {"threadId": THREAD, "requestId": 0})
    assert tools.on_resolved(msg(resolved)) is HANDLED
    assert tools.on_resolved(msg(encode_notification("serverRequest/resolved", {"threadId": THREAD, "requestId": 9}))) is None
    other = encode_request(1, "item/tool/call", {"threadId": THREAD, "turnId": "t", "callId": "c2", "namespace": None, "tool": "get_weather", "arguments": {}})
    assert tools.on_tool_call(msg(other)) is None  # the client's


@pytest.mark.parametrize(
    ("answer", "arguments", "says"),
    [
        (RuntimeError("secret"), {"query": "x"}, "RuntimeError"),
        (SystemExit("secret"), {"query": "x"}, "SystemExit"),
        (BaseExceptionGroup("secret", [GeneratorExit()]), {"query": "x"}, "BaseExceptionGroup"),
        ("not a result", {"query": "x"}, "no answer"),
        (ToolCallResult(text="3 hits"), "not an object", "JSON object"),
    ],
)
async def test_a_failing_call_gives_an_error_result_the_model_reads(tmp_path, answer, arguments, says):
    tools, relay, _, sessions = make(tmp_path, answer)
    await _start(tools, relay, sessions, [])
    call = encode_request(3, "item/tool/call", {"threadId": THREAD, "turnId": "t", "callId": "c", "namespace": None, "tool": "lcm_grep", "arguments": arguments})
    assert tools.on_tool_call(msg(call)) is HANDLED
    await relay.run_spawned()
    result = json.loads(relay.to_child[-1])["result"]
    assert result["success"] is False
    assert says in result["contentItems"][0]["text"] and "secret" not in result["contentItems"][0]["text"]
    assert tools.status()["errors"] == 1


async def test_the_engines_items_are_dropped_and_stripped_from_reads(tmp_path):
    tools, relay, _, sessions = make(tmp_path)
    await _start(tools, relay, sessions, [])
    mine = {"type": "dynamicToolCall", "id": "c1", "namespace": None, "tool": "lcm_grep", "arguments": {}}
    theirs = {"type": "dynamicToolCall", "id": "c2", "namespace": None, "tool": "get_weather", "arguments": {}}
    assert tools.on_item(msg(encode_notification("item/completed", {"threadId": THREAD, "turnId": "t", "item": mine}))) is HANDLED
    assert tools.on_item(msg(encode_notification("item/started", {"threadId": THREAD, "turnId": "t", "item": theirs}))) is None
    completed = encode_notification("turn/completed", {"threadId": THREAD, "turn": {"id": "t", "items": [mine, theirs]}})
    assert json.loads(changed(tools.on_turn_completed, msg(completed)))["params"]["turn"]["items"] == [theirs]
    listing = encode_request(11, "thread/items/list", {"threadId": THREAD})
    listed = msg(listing)
    assert tools.on_list(listed) is None
    page = encode_response(11, {"data": [{"item": mine, "turnId": "t"}, {"item": theirs, "turnId": "t"}], "nextCursor": None})
    stripped = changed(tools.on_read_response, msg(page), listed.request)
    assert [e["item"]["id"] for e in json.loads(stripped)["result"]["data"]] == ["c2"]
    plain = encode_response(12, {"thread": {"id": THREAD, "turns": [{"id": "t", "items": [theirs]}]}})
    assert tools.on_read_response(msg(plain), PendingRequest(12, "thread/read", 12)) is None


async def test_a_fork_inherits_its_parents_engine_tools(tmp_path):
    tools, relay, _, sessions = make(tmp_path)
    await _start(tools, relay, sessions, [])
    child = "01a20132-7ebc-77b0-b0eb-acc03048d214"
    mine = {"type": "dynamicToolCall", "id": "c1", "namespace": None, "tool": "lcm_grep", "arguments": {}}
    fork = msg(encode_request(20, "thread/fork", {"threadId": THREAD}))
    assert tools.on_fork(fork) is None
    forked = encode_response(20, {"thread": {"id": child, "turns": [{"id": "t", "items": [mine]}]}})
    stripped = changed(tools.on_read_response, msg(forked), fork.request)
    assert json.loads(stripped)["result"]["thread"]["turns"][0]["items"] == []
    await relay.run_spawned()
    assert OfferedTools(tmp_path).get(child) == {"lcm_grep"}
