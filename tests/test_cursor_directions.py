"""A wrapped Codex cursor pages the way the request asks (found in review).

Codex 0.169.0's cursors carry no direction (``rolloutOrdinal`` and
``includeAnchor``): the request's ``sortDirection`` decides. Seen against the
real binary, turns t1 t2 t3, the desc page [t2]: its ``backwardsCursor`` with
no sortDirection lists [t2, t1], with "asc" [t2, t3]; its ``nextCursor`` with
"asc" lists [t3]. Once a rebuild archived the anchor, the sidecar must page
from it the same way (it first paged the way the cursor was issued).
"""

from __future__ import annotations

from .test_projection_modes import _list_all, modes_sidecar, summarising_once


async def _two_turns_then_a_rebuild(run) -> tuple[str, list[str], dict]:
    tid = await run.start_thread()
    t1 = await run.turn_ok(tid, "Z1")
    t2 = await run.turn_ok(tid, "Z2")
    early_desc = (await run.request("thread/turns/list", {"threadId": tid, "limit": 1}))["result"]
    assert [t["id"] for t in early_desc["data"]] == [t2]
    t3 = await run.turn_ok(tid, "Z3")  # the rebuild: Codex forgets t1, t2
    t4 = await run.turn_ok(tid, "Z4")
    return tid, [t1, t2, t3, t4], early_desc


async def test_backwards_cursor_with_the_original_direction_after_a_rebuild(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, _t3, _t4), early_desc = await _two_turns_then_a_rebuild(run)
        # Newest first (no sortDirection), from (and with) t2, as Codex does.
        ids, _ = await _list_all(run, tid, cursor=early_desc["backwardsCursor"], limit=2)
    assert ids == [t2, t1]


async def test_next_cursor_with_the_reversed_direction_after_a_rebuild(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (_t1, _t2, t3, t4), early_desc = await _two_turns_then_a_rebuild(run)
        # Oldest first after t2, as Codex does with a nextCursor and "asc".
        ids, _ = await _list_all(run, tid, cursor=early_desc["nextCursor"], limit=2, sortDirection="asc")
    assert ids == [t3, t4]
