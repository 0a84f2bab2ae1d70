"""A ``turn/start`` the engine projects into is decoded once and encoded once.

One steady turn (the session open, an engine whose assembly adds a message
each turn, so the thread gets a delta tail in ``additionalContext``, no
rebuild) through a real ``Proxy`` with the lifecycle in front of the fake
app-server: the relay parses the envelope, the params are decoded once (the
router's gate check, the hooks, the projection and the pending request share
them) and the request is encoded once, with every change (projection, an
aliased id), as it leaves for the child. Fields the sidecar does not know
reach Codex unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from engines import AssembleResult, UserMessage
from tests.support.codec_count import counted
from tests.support.lifecycle import make_engine, sidecar, wait_until

MARKER = "traced-7f3c9a"


def tail_engine(hold: dict[str, trio.Event]):
    """Assembles the history plus one retrieved note a turn (a delta tail);
    a thread named in ``hold`` waits in assemble until its event is set."""

    async def assemble(p: Any) -> AssembleResult:
        event = hold.get(p.session_id)
        if event is not None:
            await event.wait()
        note = UserMessage(content=f"retrieved note {len(p.messages)}", timestamp=0)
        return AssembleResult(messages=[*p.messages, note], estimated_tokens=10)

    engine = make_engine()
    engine.set_result("assemble", assemble)
    return engine


async def traced_turn(tmp_path, *, client_id: Any = None, gated: bool = False):
    """The thread's second turn, counted; ``gated``: while another thread's
    turn/start is held (the router then checks every request's thread)."""
    hold: dict[str, trio.Event] = {}
    async with sidecar(tmp_path, tail_engine(hold), mode="auto") as run:
        thread_id = await run.start_thread()
        await run.turn(thread_id, "the first turn opens the session")
        other_rid = None
        if gated:
            other = await run.start_thread()
            await run.turn(other, "open the other session too")
            hold[other] = trio.Event()
            other_rid, other_line = run.turn_start_line(other, "held while the traced turn passes")
            await run.send(other_line)
            await wait_until(lambda: run.lifecycle.proxy.router.gates.gated(other), what="the other thread gated")
        rid = client_id if client_id is not None else run.new_id()
        rid, line = run.turn_start_line(thread_id, f"the {MARKER} turn", rid=rid, clientOnlyField={"kept": [1, "two"]})
        with counted(MARKER.encode()) as counts:
            await run.send(line)
            await wait_until(lambda: len(run.child_turn_starts(thread_id)) == 2, what="the traced turn/start at the child")
        await run.finish_turn(thread_id, rid)
        if gated:
            hold[next(iter(hold))].set()
            await run.finish_turn(other, other_rid)
        sent = run.child_turn_starts(thread_id)[-1]
        assert run.session(thread_id).rebuilds == 0
    return counts, sent, json.loads(line)


def assert_once(counts) -> None:
    assert len(counts.decodes) == 1, str(counts)
    assert len(counts.encodes) == 1, str(counts)
    assert len(counts.parses) == 1, str(counts)


async def test_a_projected_turn_start_is_decoded_once_and_encoded_once(tmp_path):
    counts, sent, original = await traced_turn(tmp_path)
    assert_once(counts)
    assert "openclaw_context" in sent["params"]["additionalContext"], "the delta tail was projected"
    assert sent["params"]["clientOnlyField"] == {"kept": [1, "two"]}, "a field the sidecar does not know passes"
    assert sent["params"]["input"] == original["params"]["input"]


async def test_an_aliased_turn_start_behind_another_threads_gate_is_still_decoded_once(tmp_path):
    """The worst case without a rebuild: the router looks for the request's
    thread (another thread's turn/start is held) and the client's id lies in
    the sidecar's id space (it travels under an alias)."""
    counts, sent, original = await traced_turn(tmp_path, client_id="codex-sidecar:7", gated=True)
    assert_once(counts)
    assert sent["id"] != "codex-sidecar:7" and sent["id"].startswith("codex-sidecar:"), "the alias went to codex"
    assert "openclaw_context" in sent["params"]["additionalContext"]
    assert sent["params"]["clientOnlyField"] == {"kept": [1, "two"]}
