"""A client ``thread/compact/start`` the sidecar cannot tie to a thread it
tracks (no params, no threadId, a threadId that is not a string, an unknown
one) goes to Codex as the client sent it, and the engine does not compact:
only a request naming a tracked thread runs the engine's compaction first."""

from __future__ import annotations

import pytest

from tests.support.lifecycle import make_engine


@pytest.mark.parametrize(
    "params",
    [None, {}, {"threadId": 5}, {"threadId": ["x"]}, {"threadId": None}, {"threadId": "thr_unknown"}],
    ids=["no-params", "no-threadId", "int", "list", "null", "unknown"],
)
async def test_compact_request_without_a_tracked_thread_goes_to_codex_untouched(tmp_path, sidecar, params):
    engine = make_engine(owns_compaction=True)
    async with sidecar(tmp_path, engine) as run:
        await run.start_thread()
        await run.request("thread/compact/start", params)
        sent = run.sent[-1]
        received = [line for line in run.received_lines() if b"thread/compact/start" in line]
    assert engine.calls_to("compact") == []
    assert received == [sent]  # byte-identical: the sidecar kept out of it


async def test_compact_request_naming_a_tracked_thread_runs_the_engine_first(tmp_path, sidecar):
    engine = make_engine(owns_compaction=True)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.request("thread/compact/start", {"threadId": tid})
        received = run.received("thread/compact/start")
    assert len(engine.calls_to("compact")) == 1
    assert [m["params"] for m in received] == [{"threadId": tid}]
