"""What the client injects outside turn/start (``thread/inject_items``, as
OpenClaw sends its instruction policy on a resume) survives a rebuild, and
goes with the turn it followed when the client reverts that turn.

The fake app-server keeps injected items in the thread's history the way
Codex 0.169.0 does (a revert keeps those after a kept turn, drops the rest),
and logs each turn's held history: ``{"injected": items}`` entries.
"""

from __future__ import annotations

from typing import Any

from tests.support.fresh import SCRIPT, fresh, spare_ready
from tests.support.modes import assert_client_unaware, modes_sidecar, summarising

POLICY = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "POLICY v1"}]}]


def injected_in(seen: dict[str, Any]) -> list[Any]:
    return [h["injected"] for h in seen["held"] if "injected" in h]


async def test_an_injected_item_is_put_back_after_a_rebuild_in_place(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "I1")
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": POLICY})
        await run.turn_ok(tid, "I2")
        await run.turn_ok(tid, "I3")  # the summary replaces I1: a rebuild (revert to the framing)
        await run.turn_ok(tid, "I4")
        records = [r for r in run.seen(tid)]
    assert len(run.child_lines("thread/revert")) >= 1
    # Before the rebuild Codex held it in place; after, the sidecar put it back.
    assert injected_in(records[1]) == [POLICY]
    assert injected_in(records[2]) == [POLICY], "the rebuild's own turn sees the policy"
    assert injected_in(records[3]) == [POLICY], "and so do the turns after it, once"
    assert_client_unaware(run, tid)


async def test_an_injected_item_follows_the_thread_onto_a_fresh_backing_thread(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"F{n}")  # F3: rebuild 1, a revert
        spare = await spare_ready(run, tid)
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": POLICY})
        await run.turn_ok(tid, "F4")  # rebuild 2: onto the spare
    (first_on_spare,) = run.seen(spare)[:1]
    assert injected_in(first_on_spare) == [POLICY]
    assert_client_unaware(run, tid)


async def test_a_client_revert_drops_what_was_injected_after_the_reverted_turn(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "R1")
        t2 = await run.turn_ok(tid, "R2")
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": POLICY})
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        await run.turn_ok(tid, "R3")
        await run.turn_ok(tid, "R4")  # rebuilds: nothing injected is left to put back
    assert all(not injected_in(s) for s in run.seen(tid)[-2:])


async def test_injected_items_outlive_a_restart_and_are_never_put_back_twice(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "S1")
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": POLICY})
        await run.turn_ok(tid, "S2")
    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
        await run2.resume_thread(tid)
        await run2.turn_ok(tid, "S3")  # a rebuild in the new process: the policy is put back
    assert injected_in(run2.seen(tid)[-1]) == [POLICY]
    async with modes_sidecar(tmp_path, summarising(keep=2), name="three") as run3:
        await run3.resume_thread(tid)
        await run3.turn_ok(tid, "S4")  # another revert in place: it kept the policy put back before its first turn
    assert len(run3.child_lines("thread/revert")) == 1
    assert injected_in(run3.seen(tid)[-1]) == [POLICY]


async def test_a_kill_between_putting_injected_items_back_and_journalling_it_never_puts_them_back_twice(tmp_path, monkeypatch):
    """The process dies right after Codex took the replayed items, before the
    journal says so: the next process must not put them back again."""
    from sidecar.store.injected import InjectedItems

    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "K1")
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": POLICY})
        await run.turn_ok(tid, "K2")
    with monkeypatch.context() as m:
        m.setattr(InjectedItems, "framing", lambda self, count: None)  # killed before this write
        async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
            await run2.resume_thread(tid)
            await run2.turn_ok(tid, "K3")  # a rebuild puts the policy back
        assert injected_in(run2.seen(tid)[-1]) == [POLICY]
    async with modes_sidecar(tmp_path, summarising(keep=2), name="three") as run3:
        await run3.resume_thread(tid)
        await run3.turn_ok(tid, "K4")
        await run3.turn_ok(tid, "K5")
    for seen in run3.seen(tid):
        assert injected_in(seen) == [POLICY], "the policy once, never twice, never missing"


def test_an_unsettled_replay_loads_as_unsure_and_a_settled_one_does_not(tmp_path):
    from sidecar.store.injected import InjectedItems, Injection

    journal = InjectedItems(tmp_path / "j.jsonl")
    journal.append(Injection("t1", POLICY))
    journal.replaying(1)
    assert journal.load() == ([Injection("t1", POLICY)], 0, True)
    journal.framing(1)
    assert journal.load() == ([Injection("t1", POLICY)], 1, False)
    journal.replaying(1)  # the same count again: nothing unknown
    assert journal.load()[2] is False
