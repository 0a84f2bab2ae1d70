"""Codex cursors the sidecar wraps keep working across rebuilds.

A client revert's backwards cursors outlive the rebuilds after it. Codex answers ``thread/revert`` with ``turnsBackwardsCursor`` and
``itemsBackwardsCursor``: newest first from (and with) the newest turn and
item the thread keeps. Like its listing cursors they name the Codex thread,
so a rebuild breaks them; and when every turn Codex held went (a revert to
its first turn, or one into archived turns, which the sidecar sends to
Codex's first turn) Codex answers none, although the client keeps the
archived turns. Checked against codex 0.169.0: after a revert before t3 of
t1..t4, the turns cursor lists [t2, t1] and the items cursor starts with
t2's last item; a revert before t1 answers null for both.

A wrapped cursor pages the way the request asks. Codex 0.169.0's cursors
carry no direction (``rolloutOrdinal`` and ``includeAnchor``): the request's
``sortDirection`` decides. Seen against the real binary, turns t1 t2 t3, the
desc page [t2]: its ``backwardsCursor`` with no sortDirection lists [t2, t1],
with "asc" [t2, t3]; its ``nextCursor`` with "asc" lists [t3]. Once a rebuild
archived the anchor, the sidecar must page from it the same way (it first
paged the way the cursor was issued).
"""

from __future__ import annotations

from typing import Any

from engines import AssembleResult, CompactionSummaryMessage, UserMessage
from engines.api import encode_openclaw
from engines.testkit import RecordingEngine
from sidecar.history.archive import unwrap_cursor
from tests.support.modes import list_all, modes_sidecar, scripted_engine, summarising_once, summary_text


def cutting() -> RecordingEngine:
    """Everything before the newest prompt that says CUT replaced by one
    summary: one rebuild per such prompt, plain deltas between them."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        cut = len(messages) if "CUT" in (p.prompt or "") else None
        if cut is None:
            cut = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage) and b"CUT" in encode_openclaw(messages[i])), None)
        if cut:
            messages = [CompactionSummaryMessage(summary=summary_text(cut), tokens_before=cut * 10, timestamp=0), *messages[cut:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    return scripted_engine(assemble)


async def _revert(run, tid: str, before: str) -> dict[str, Any]:
    resp = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": before})
    assert "result" in resp, resp
    return resp["result"]


async def _items_desc(run, tid: str, cursor: str | None = None) -> list[str]:
    ids, _ = await list_all(run, tid, cursor=cursor, method="thread/items/list", sortDirection="desc", limit=3)
    return ids


async def test_cursors_of_a_revert_to_a_turn_codex_holds_survive_a_later_rebuild(tmp_path):
    async with modes_sidecar(tmp_path, cutting()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "A1")
        t2 = await run.turn_ok(tid, "A2")
        t3 = await run.turn_ok(tid, "CUT3")  # rebuild: Codex keeps t3 on
        t4 = await run.turn_ok(tid, "A4")
        t5 = await run.turn_ok(tid, "A5")
        answer = await _revert(run, tid, t5)
        turns_cursor, items_cursor = answer["turnsBackwardsCursor"], answer["itemsBackwardsCursor"]
        assert unwrap_cursor(turns_cursor, "turns") is not None and unwrap_cursor(items_cursor, "items") is not None
        # While Codex holds t4, its own cursor does the paging.
        before_ids, _ = await list_all(run, tid, cursor=turns_cursor, limit=2)
        kept_items = await _items_desc(run, tid)
        assert await _items_desc(run, tid, items_cursor) == kept_items
        await run.turn_ok(tid, "CUT6")  # rebuild: t3 and t4 leave Codex too
        after_ids, _ = await list_all(run, tid, cursor=turns_cursor, limit=2)
        after_items = await _items_desc(run, tid, items_cursor)
    assert before_ids == [t4, t3, t2, t1]
    assert after_ids == [t4, t3, t2, t1]
    assert after_items == kept_items and len(kept_items) >= 4


async def test_a_revert_that_empties_codex_still_hands_the_client_its_archived_turns(tmp_path):
    async with modes_sidecar(tmp_path, cutting()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "B1")
        t2 = await run.turn_ok(tid, "B2")
        t3 = await run.turn_ok(tid, "CUT3")  # Codex holds t3 and t4 only
        await run.turn_ok(tid, "B4")
        items_before = await _items_desc(run, tid)
        answer = await _revert(run, tid, t3)  # Codex keeps nothing; the client keeps t1, t2
        ids, _ = await list_all(run, tid, cursor=answer["turnsBackwardsCursor"], limit=1)
        items = await _items_desc(run, tid, answer["itemsBackwardsCursor"])
        t5 = await run.turn_ok(tid, "B5")
        again, _ = await list_all(run, tid, cursor=answer["turnsBackwardsCursor"], limit=1)
        newest_first, _ = await list_all(run, tid)
    assert ids == [t2, t1] and again == [t2, t1]
    assert newest_first == [t5, t2, t1]
    # t2's items and t1's, newest first: what the listing showed below t3's.
    assert items and items == items_before[-len(items) :]


async def test_a_revert_into_archived_turns_points_at_the_newest_kept(tmp_path):
    async with modes_sidecar(tmp_path, cutting()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "C1")
        t2 = await run.turn_ok(tid, "C2")
        await run.turn_ok(tid, "CUT3")
        await run.turn_ok(tid, "C4")
        answer = await _revert(run, tid, t2)  # t2 is archived: Codex reverts to its first turn
        # Codex keeps nothing and answers no cursor; the client keeps t1.
        assert unwrap_cursor(answer["turnsBackwardsCursor"], "turns") == ("", t1, True)
        ids, _ = await list_all(run, tid, cursor=answer["turnsBackwardsCursor"])
        everything_left = await _items_desc(run, tid)
        items = await _items_desc(run, tid, answer["itemsBackwardsCursor"])
    assert ids == [t1]
    assert items == everything_left and items


async def test_a_revert_of_every_turn_answers_no_cursor(tmp_path):
    async with modes_sidecar(tmp_path, cutting()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "D1")
        await run.turn_ok(tid, "CUT2")
        answer = await _revert(run, tid, t1)
    assert answer["turnsBackwardsCursor"] is None and answer["itemsBackwardsCursor"] is None


# --------------------------------------------------------------------------
# a wrapped cursor pages the way the request asks


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
        ids, _ = await list_all(run, tid, cursor=early_desc["backwardsCursor"], limit=2)
    assert ids == [t2, t1]


async def test_next_cursor_with_the_reversed_direction_after_a_rebuild(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (_t1, _t2, t3, t4), early_desc = await _two_turns_then_a_rebuild(run)
        # Oldest first after t2, as Codex does with a nextCursor and "asc".
        ids, _ = await list_all(run, tid, cursor=early_desc["nextCursor"], limit=2, sortDirection="asc")
    assert ids == [t3, t4]
