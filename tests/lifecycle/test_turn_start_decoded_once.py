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


def rebuilding_twice():
    """Summaries that rebuild the thread twice (a revert, then a switch onto
    its spare), then plain deltas on the switched thread."""
    from engines import CompactionSummaryMessage
    from tests.support.modes import scripted_engine, summary_text

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        cut = 4 if len(messages) >= 8 else 2 if len(messages) >= 4 else 0
        if cut:
            messages = [CompactionSummaryMessage(summary=summary_text(cut), tokens_before=cut * 10, timestamp=0), *messages[cut:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    return scripted_engine(assemble)


async def test_a_turn_start_on_a_switched_thread_is_mapped_on_its_decoded_params_and_encoded_once(tmp_path):
    """After a rebuild moved the client's thread onto a spare Codex thread,
    the edge maps the request's thread id on the params the hooks decoded:
    no byte-level pass, one encode."""
    from tests.support.fresh import SCRIPT, fresh
    from tests.support.modes import modes_sidecar

    async with modes_sidecar(tmp_path, rebuilding_twice(), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        alias = None
        for n in range(8):
            await run.turn_ok(tid, f"turn {n}")
            alias = run.lifecycle.backing.aliases.get(tid)
            if alias is not None and alias.current != tid:
                break
        assert alias is not None and alias.current != tid, "the thread was switched onto its spare"
        rebuilds = run.session(tid).rebuilds
        rid, line = run.turn_start_line(tid, f"the {MARKER} turn", clientOnlyField=1)
        with counted(MARKER.encode()) as counts:
            await run.send(line)
            await wait_until(lambda: any(MARKER in json.dumps(m) for m in run.child_turn_starts(alias.current)), what="the traced turn/start")
        await run.finish_turn(tid, rid)
        assert run.session(tid).rebuilds == rebuilds, "no rebuild on the traced turn"
    assert_once(counts)
    [sent] = [m for m in run.child_turn_starts(alias.current) if MARKER in json.dumps(m)]
    assert sent["params"]["threadId"] == alias.current and sent["params"]["clientOnlyField"] == 1
