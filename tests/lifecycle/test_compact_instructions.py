"""`sidecar/compact` with instructions (issue 33): the engine's `compact` gets
them as `custom_instructions`; Codex's `thread/compact/start` carries only a
thread id, so neither Codex nor a client's own compaction request has any to give."""

from __future__ import annotations

from tests.support.lifecycle import make_engine

KEEP = "Keep the locker code and the trip dates; drop the small talk."


async def test_the_control_method_s_instructions_reach_the_engine_s_compact(tmp_path, sidecar):
    engine = make_engine(owns_compaction=True)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "My locker code is 4711.")
        resp = await run.request("sidecar/compact", {"threadId": tid, "instructions": KEEP})
        (native,) = run.received("thread/compact/start")

    assert "result" in resp
    (call,) = engine.calls_to("compact")
    assert call.params.custom_instructions == KEEP
    assert call.params.force is True
    assert native["params"] == {"threadId": tid}  # Codex takes none: they stay with the engine


async def test_without_instructions_and_on_a_client_s_own_compaction_the_engine_gets_none(tmp_path, sidecar):
    engine = make_engine(owns_compaction=True)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "Hello.")
        await run.request("sidecar/compact", {"threadId": tid})
        await run.request("sidecar/compact", {"threadId": tid, "instructions": ""})
        await run.request("thread/compact/start", {"threadId": tid})

    assert [c.params.custom_instructions for c in engine.calls_to("compact")] == [None, None, None]


async def test_instructions_that_are_not_a_string_are_refused_before_anything_compacts(tmp_path, sidecar):
    engine = make_engine(owns_compaction=True)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        resp = await run.request("sidecar/compact", {"threadId": tid, "instructions": ["keep", "this"]})

    assert resp["error"]["code"] == -32602
    assert engine.calls_to("compact") == []
