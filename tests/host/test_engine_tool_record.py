"""An engine tool call the sidecar answered is kept for the turn's
inspection record (``codex-sidecar view`` shows it; the transcript never
holds it): the tool, its arguments, the answer (bounded) and its outcome."""

from __future__ import annotations

import json
from pathlib import Path

from engines import RuntimeContext, ToolCallResult, ToolSpec
from protocol import encode_request, parse
from sidecar.host.engine_tools import TOOL_TEXT_KEPT, EngineTools
from sidecar.host.offered import OfferedTools
from sidecar.relay import Message
from sidecar.session.context import LifecycleContext
from sidecar.session.options import LifecycleOptions
from sidecar.session.state import ThreadSession, TurnState, new_session

THREAD = "01a20132-6799-70b2-9e11-b6afa40528ac"


class Relay:
    def __init__(self) -> None:
        self.spawned: list = []

    @property
    def router(self) -> Relay:
        """The fake relay routes too (``proxy.router.send_to_child``)."""
        return self

    def spawn(self, fn, *args) -> None:
        self.spawned.append((fn, args))

    def send_to_child(self, line: bytes, direction: str = "sidecar>codex", *, raw: bool = False) -> bool:
        return True


class Engine:
    def __init__(self, text: str) -> None:
        self.text = text

    async def call_tool(self, params):
        return ToolCallResult(text=self.text)


async def _call(tmp_path: Path, answer: str, session: ThreadSession) -> None:
    relay = Relay()
    ctx = LifecycleContext(relay, {THREAD: session}, LifecycleOptions(engine_deadline=5.0), tmp_path)  # type: ignore[arg-type]
    tools = EngineTools(ctx, Engine(answer), [ToolSpec(name="lcm_grep", description="", input_schema={})], OfferedTools(tmp_path), lambda s: RuntimeContext())
    tools.offered.note(THREAD, frozenset({"lcm_grep"}))
    line = encode_request(3, "item/tool/call", {"threadId": THREAD, "turnId": "t", "callId": "c1", "namespace": None, "tool": "lcm_grep", "arguments": {"query": "hotel"}})
    tools.on_tool_call(Message(parse(line), line))
    for fn, args in relay.spawned:
        await fn(*args)


async def test_a_call_in_a_turn_is_kept_on_the_turn_with_its_answer_bounded(tmp_path):
    session = new_session(THREAD, "key", Path("/dev/null"))
    session.current = TurnState(client_id=1, original_input=None)
    await _call(tmp_path, "h" * (TOOL_TEXT_KEPT + 5), session)
    (kept,) = session.current.engine_tools
    assert json.loads(json.dumps(kept)) == {**kept, "result": "h" * TOOL_TEXT_KEPT}
    assert (kept["tool"], kept["arguments"], kept["success"]) == ("lcm_grep", {"query": "hotel"}, True)


async def test_a_call_outside_a_turn_is_answered_and_kept_nowhere(tmp_path):
    session = new_session(THREAD, "key", Path("/dev/null"))
    await _call(tmp_path, "3 hits", session)
    assert session.current is None
