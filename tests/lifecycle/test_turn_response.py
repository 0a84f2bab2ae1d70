"""A ``turn/start`` response reaches its own thread's turn: the pending
request carries the thread its params named (``PendingRequest.thread_id``),
so the lifecycle looks one session up instead of scanning them all."""

from __future__ import annotations

from tests.support.lifecycle import make_engine


async def test_each_turn_start_response_lands_on_its_own_thread(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine()) as run:
        threads = [await run.start_thread() for _ in range(3)]
        sent = [run.turn_start_line(tid, f"prompt {n}") for n, tid in enumerate(threads)]
        for _, line in sent:  # all three in flight at once
            await run.send(line)
        # finish_turn waits for each thread's own finalisation of its turn,
        # which needs the response to have given that thread's turn its id.
        done = [await run.finish_turn(tid, rid) for tid, (rid, _) in zip(threads, sent, strict=True)]
        for tid, turn in zip(threads, done, strict=True):
            assert run.session(tid).stats["lastFinalize"]["turnId"] == turn["id"]
            assert turn["id"] in run.session(tid).completed_turns
