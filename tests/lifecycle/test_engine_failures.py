"""An engine that raises anything, or overruns its deadline, in any lifecycle
call: the call fails open, the failure is logged, the turn completes and the
relay goes on serving the next one.

``SystemExit`` and friends are ``BaseException``: before
``sidecar.host.contain`` they went past every ``except Exception`` and ended
the relay.
"""

from __future__ import annotations

import logging

import pytest

from engines import CompactResult
from sidecar.lifecycle import LifecycleOptions
from tests.support.lifecycle import fields, make_engine, records_with

BASE_EXCEPTIONS = {
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": GeneratorExit,
    "BaseExceptionGroup": lambda: BaseExceptionGroup("engine tasks", [SystemExit(1)]),
}
WARNINGS = {
    "assemble": "context engine assemble failed; forwarding the original request",
    "after_turn": "codex context engine finalize failed",
    "maintain": "codex context engine maintenance failed",
}


@pytest.mark.parametrize("kind", list(BASE_EXCEPTIONS))
@pytest.mark.parametrize("method", list(WARNINGS))
async def test_a_base_exception_in_a_turn_s_engine_call_fails_open_and_the_relay_goes_on(tmp_path, sidecar, logs, method, kind):
    engine = make_engine()
    engine.fail(method, BASE_EXCEPTIONS[kind], times=1)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        first = await run.turn(tid, "one")
        second = await run.turn(tid, "two")
    assert [t["completed"]["params"]["turn"]["status"] for t in (first, second)] == ["completed", "completed"]
    assert len(engine.calls_to(method)) == 2  # called again: the engine is not dropped
    (warning,) = records_with(logs, WARNINGS[method])
    assert warning.levelno == logging.WARNING and fields(warning)["error"] == kind


async def test_a_bootstrap_that_exits_fails_open(tmp_path, sidecar, logs):
    # Run without an engine: the history run2 imports is what it must bootstrap.
    async with sidecar(tmp_path, None, name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
    engine = make_engine()
    engine.fail("bootstrap", lambda: SystemExit(1))
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(tid)
        turn = await run.turn(tid, "What was the word?")
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    (warning,) = records_with(logs, "codex context engine bootstrap failed")
    assert fields(warning)["error"] == "SystemExit"


async def test_a_bootstrap_past_its_deadline_fails_open_and_the_turn_goes_through(tmp_path, sidecar, logs):
    # Run without an engine: the history run2 imports is what it must bootstrap.
    async with sidecar(tmp_path, None, name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
    engine = make_engine()
    engine.hang("bootstrap")  # forever
    async with sidecar(tmp_path, engine, name="run2", options=LifecycleOptions(engine_deadline=0.3)) as run:
        await run.resume_thread(tid)
        turn = await run.turn(tid, "What was the word?")
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    assert len(engine.calls_to("assemble")) == 1  # the turn assembled after the bootstrap gave up
    (warning,) = records_with(logs, "codex context engine bootstrap failed")
    assert fields(warning)["error"] == "TooSlowError"


async def test_an_after_turn_past_its_deadline_fails_open_and_the_next_turn_goes_through(tmp_path, sidecar, logs):
    engine = make_engine()
    engine.hang("after_turn")  # forever
    async with sidecar(tmp_path, engine, options=LifecycleOptions(engine_deadline=0.3)) as run:
        tid = await run.start_thread()
        first = await run.turn(tid, "one")
        second = await run.turn(tid, "two")
        finalize = run.session(tid).stats["lastFinalize"]
    assert [t["completed"]["params"]["turn"]["status"] for t in (first, second)] == ["completed", "completed"]
    assert finalize["ok"] is False
    assert engine.calls_to("maintain") == []  # no maintenance after a failed finalize
    warnings = records_with(logs, "codex context engine finalize failed")
    assert [fields(w)["error"] for w in warnings] == ["TooSlowError", "TooSlowError"]


@pytest.mark.parametrize("exc", [RuntimeError("engine broke"), SystemExit(1)], ids=lambda e: type(e).__name__)
async def test_maintain_raising_fails_open_and_the_next_turn_goes_through(tmp_path, sidecar, logs, exc):
    engine = make_engine()
    engine.fail("maintain", exc, times=1)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        failed = run.session(tid).stats["lastMaintainTurn"]
        second = await run.turn(tid, "two")
        ok = run.session(tid).stats["lastMaintainTurn"]
    assert (failed, ok) == (type(exc).__name__, "ok")
    assert second["completed"]["params"]["turn"]["status"] == "completed"
    (warning,) = records_with(logs, "codex context engine maintenance failed")
    assert fields(warning)["error"] == type(exc).__name__ and fields(warning)["reason"] == "turn"


@pytest.mark.parametrize("exc", [RuntimeError("engine broke"), SystemExit(1)], ids=lambda e: type(e).__name__)
async def test_compact_raising_fails_open_codex_compacts_and_the_next_turn_goes_through(tmp_path, sidecar, logs, exc):
    engine = make_engine(owns_compaction=True)
    engine.fail("compact", exc, times=1)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        answer = await run.request("thread/compact/start", {"threadId": tid})
        stats = run.session(tid).stats["lastEngineCompaction"]
        native = len(run.received("thread/compact/start"))
        engine.set_result("compact", CompactResult(ok=True, compacted=False, result=None))
        turn = await run.turn(tid, "What was the word?")
    assert answer["result"] == {}  # Codex's own answer: native compaction ran all the same
    assert native == 1
    assert stats == {"ok": False, "compacted": False, "reason": f"engine compaction failed: {type(exc).__name__}"}
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    (warning,) = records_with(logs, "context engine compaction failed")
    assert fields(warning)["error"] == type(exc).__name__
