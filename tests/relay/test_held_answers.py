"""The timer of a client's answer the edge holds (a thread list while the
sidecar's own thread start is unanswered, sidecar/history/starts.py): the
router and the real edge in a nursery, on trio's mock clock (time moves
only when a test jumps it), the timers seen as the nursery's children.

Which answers wait and what they lose: tests/history/test_own_starts.py;
the router without trio: test_router.py."""

from __future__ import annotations

import json

import trio
import trio.testing

from sidecar.history.backing import BackingThreads
from sidecar.methods import METHODS
from sidecar.rows import thread_id_keys

CLIENT = "01a20000-0000-7000-8000-000000000001"
OWNED = "01a20000-0000-7000-8000-00000000000c"  # the sidecar's own thread
LISTED = json.dumps({"id": 1, "result": {"data": [CLIENT, OWNED], "nextCursor": None}}, separators=(",", ":")).encode()
WAIT = 20.0


def started(call_id: str) -> bytes:
    return json.dumps({"id": call_id, "result": {"thread": {"id": OWNED}}}, separators=(",", ":")).encode()


def holding(wire, tmp_path, nursery: trio.Nursery):
    """A router whose edge holds lists for the sidecar's own start, its tasks in ``nursery``."""
    edge = BackingThreads(tmp_path, thread_id_keys(METHODS), list_wait=WAIT)
    w = wire(edge=edge)
    w.router.spawn = nursery.start_soon
    call = w.router.call("thread/start", {}, raw=True, on_result=lambda _result: edge.own(OWNED, lambda _line: None))
    w.router.from_client(b'{"id":1,"method":"thread/loaded/list","params":{}}')
    w.child.take()
    return w, edge, call


async def test_a_held_answer_s_timer_ends_as_the_answer_goes_on_not_at_the_deadline(wire, tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        w, edge, call = holding(wire, tmp_path, nursery)
        w.router.from_child(LISTED)
        await trio.testing.wait_all_tasks_blocked()
        assert w.client.take() == [] and len(nursery.child_tasks) == 1, "held, its timer running"
        w.router.from_child(started(call.id))
        assert [json.loads(x)["result"]["data"] for x in w.client.take()] == [[CLIENT]]
        await trio.testing.wait_all_tasks_blocked()
        timers = len(nursery.child_tasks)
        nursery.cancel_scope.cancel()  # a timer left behind would keep the nursery open forever
    assert timers == 0, "the timer ended with the answer"
    assert trio.current_time() == 0.0, "no time passed"
    assert edge.own_starts.held == 1 and edge.own_starts.overdue_count == 0


async def test_an_answer_that_goes_on_before_its_timer_task_began_ends_that_task_at_once(wire, tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        w, edge, call = holding(wire, tmp_path, nursery)
        w.router.from_child(LISTED)
        w.router.from_child(started(call.id))  # the same tick: the timer task has not run yet
        assert len(w.client.take()) == 1
        await trio.testing.wait_all_tasks_blocked()
        timers = len(nursery.child_tasks)
        nursery.cancel_scope.cancel()
    assert timers == 0 and edge.own_starts.overdue_count == 0


async def test_at_the_deadline_a_held_answer_goes_on_as_it_is_counted_and_its_timer_ends(wire, tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        w, edge, _call = holding(wire, tmp_path, nursery)
        w.router.from_child(LISTED)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(WAIT - 1)
        await trio.testing.wait_all_tasks_blocked()
        assert w.client.take() == [], "still within its wait"
        mock_clock.jump(1)
        await trio.testing.wait_all_tasks_blocked()
        assert w.client.take() == [LISTED], "unfiltered: the start was never answered"
        timers = len(nursery.child_tasks)
        nursery.cancel_scope.cancel()
    assert timers == 0
    assert edge.own_starts.held == 1 and edge.own_starts.overdue_count == 1


async def test_answers_released_when_codex_exits_end_their_timers(wire, tmp_path, mock_clock):
    async with trio.open_nursery() as nursery:
        w, edge, _call = holding(wire, tmp_path, nursery)
        w.router.from_child(LISTED)
        await trio.testing.wait_all_tasks_blocked()
        w.router.child_exited(1)
        assert w.client.take()[-1] == LISTED
        await trio.testing.wait_all_tasks_blocked()
        timers = len(nursery.child_tasks)
        nursery.cancel_scope.cancel()
    assert timers == 0 and edge.own_starts.overdue_count == 0
