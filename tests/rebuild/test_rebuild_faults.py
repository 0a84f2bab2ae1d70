"""Rebuilds, reads and the archive when things go wrong.

Kills between a rebuild's marks and its revert, refused reverts, torn
archive lines, threads the sidecar never archived, unknown ledgers (forks,
other state dirs), a full disk on a turn without messages, reads racing a
revert, and item anchors on archived items. Each case was a bug once; the
fake app-server (tests/support/children/fake_codex.py) reverts like Codex.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import trio

from engines import AssembleResult, CompactionSummaryMessage
from sidecar.history.archive import TurnArchive, archive_path
from sidecar.store.inspect import inspect_path
from sidecar.store.ledger import Ledger, ledger_path
from tests.support.lifecycle import breakable_mirror_disk, calls_for, frame, roles_texts, wait_until
from tests.support.modes import (
    four_turns_rebuilt_at_the_third,
    identity,
    items_all,
    list_all,
    modes_sidecar,
    scripted_engine,
    summarising,
    summarising_once,
    summary_text,
)


# A legacy thread refuses the revert after the turns were marked dropped:
# Codex keeps them, so they are marked restored and every listing has each once.
async def test_a_refused_revert_leaves_each_turn_listed_once(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread(historyMode="legacy")
        turns = [await run.turn_ok(tid, f"L{n}") for n in range(1, 4)]  # turn 3 wanted a rebuild; refused
    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:  # a restart
        await run2.resume_thread(tid)
        desc, _ = await list_all(run2, tid)
        asc, _ = await list_all(run2, tid, sortDirection="asc", limit=1)
        items = await items_all(run2, tid)
    assert [t["id"] for t in run.store_turns(tid)] == turns  # Codex still has every turn
    assert desc == turns[::-1], desc
    assert asc == turns, asc
    assert len(items) == 6, [(e["turnId"], e["item"]["id"]) for e in items]


# Killed after a rebuild's marks, before its revert reached Codex: the next
# read that sees Codex still holding the turns restores them, so a client's
# own revert of one of them makes it gone for good.
async def test_a_kill_before_the_revert_then_a_client_revert_keeps_the_turn_gone(tmp_path):
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "K1")
        t2 = await run.turn_ok(tid, "K2")
    state = tmp_path / "state"
    # Exactly what _revert_to_framing persists before sending thread/revert (live_turns None):
    TurnArchive(archive_path(state, tid)).mark_dropped(None)
    Ledger(ledger_path(state, tid)).rebuilding(0, None)
    # -- SIGKILL here: the revert never went out. --
    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        await run2.resume_thread(tid)
        listed, _ = await list_all(run2, tid)
        reverted = await run2.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        assert "result" in reverted
        await run2.wait_frame(lambda f: f.get("method") == "thread/reverted")
        await wait_until(lambda: run2.session(tid).settled, what="forget")
        await wait_until(lambda: tid in run2.lifecycle.archived._cache, what="cache reload")
        read = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert [t["id"] for t in run2.store_turns(tid)] == [t1]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1], f"the turn the client reverted came back; listed before: {listed}"


# A torn archive line (a kill mid-write) gets its newline before the next
# append, so the next record (here the next rebuild's marks) is not lost with it.
async def test_a_torn_archive_line_costs_only_itself(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "X1")
        t2 = await run.turn_ok(tid, "X2")
        t3 = await run.turn_ok(tid, "X3")  # rebuild: t1, t2 dropped; Codex holds t3
    path = archive_path(tmp_path / "state", tid)
    with open(path, "ab") as f:
        f.write(b'{"turn": {"id": "torn", "ite')  # a kill -9 in the middle of a write
    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
        await run2.resume_thread(tid)
        t4 = await run2.turn_ok(tid, "X4")  # rebuild: marks t3 dropped (that line is glued to the torn one)
        read = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert [t["id"] for t in run2.store_turns(tid)] == [t4]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3, t4]


# A thread with turns from before the sidecar (or another state dir): the
# imported turns are archived too, so reads still show them after a rebuild.
async def test_turns_from_before_the_archive_survive_the_first_rebuild_in_reads(tmp_path):
    async with modes_sidecar(tmp_path, identity(), name="plain", state="other-state") as plain:
        tid = await plain.start_thread()
        u = [await plain.turn_ok(tid, f"U{n}") for n in range(1, 4)]
    async with modes_sidecar(tmp_path, summarising(keep=2), name="engine") as run:
        await run.resume_thread(tid)
        u4 = await run.turn_ok(tid, "U4")  # rebuild
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert [t["id"] for t in run.store_turns(tid)] == [u4]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [*u, u4]


# The same unknown thread, whose first turn under the engine does not rebuild:
# the ledger stays unknown, so the later rebuild reverts to Codex's first turn
# and the model keeps nothing of U1..U3 beside the summary.
async def test_a_rebuild_without_a_ledger_reverts_to_the_thread_s_first_turn(tmp_path):
    def late_summary(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) >= 8:
            messages = [CompactionSummaryMessage(summary=summary_text(len(messages) - 2), tokens_before=1, timestamp=0), *messages[-2:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    async with modes_sidecar(tmp_path, identity(), name="plain", state="other-state") as plain:
        tid = await plain.start_thread()
        for n in range(1, 4):
            await plain.turn_ok(tid, f"U{n}")
    async with modes_sidecar(tmp_path, scripted_engine(late_summary), name="engine") as run:
        await run.resume_thread(tid)
        u4 = await run.turn_ok(tid, "U4")  # 6 messages: no rebuild
        u5 = await run.turn_ok(tid, "U5")  # 8 messages: rebuild
    reverts = [r["params"]["beforeTurnId"] for r in run.received("thread/revert")]
    seen = run.seen(tid)[-1]
    assert seen["turnId"] == u5
    assert seen["held"] == [], f"rebuild reverted before {reverts}, the model still holds {[h['turnId'] for h in seen['held']]}"
    assert u4  # noqa


# A turn the client did not start through the sidecar (a native compaction)
# whose mirror write fails (ENOSPC) is logged; the sidecar keeps answering.
async def test_a_full_disk_on_a_turn_without_messages_fails_open(tmp_path, monkeypatch):

    broken = breakable_mirror_disk(monkeypatch)
    async with modes_sidecar(tmp_path, identity()) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "C1")
        broken["on"] = True
        resp = await run.request("thread/compact/start", {"threadId": tid})
        assert resp.get("result") == {}
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and "compaction" in f["params"]["turn"]["id"])
        await trio.sleep(0.5)
        broken["on"] = False
        status = await run.request("sidecar/status")  # the sidecar must still answer
        assert "result" in status


# P2. A fork's ledger starts unknown; its first turns without a rebuild must
#     not make a later rebuild revert only to them.
def late_summary(p: Any) -> AssembleResult:
    messages = list(p.messages)
    if len(messages) >= 8:
        messages = [CompactionSummaryMessage(summary=summary_text(len(messages) - 2), tokens_before=1, timestamp=0), *messages[-2:]]
    return AssembleResult(messages=messages, estimated_tokens=1)


async def test_a_fork_s_rebuild_drops_the_parent_s_turns_too(tmp_path):
    async with modes_sidecar(tmp_path, scripted_engine(late_summary)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "P1")
        t2 = await run.turn_ok(tid, "P2")
        fork = (await run.request("thread/fork", {"threadId": tid}))["result"]["thread"]["id"]
        await run.settle_thread(fork)
        f1 = await run.turn_ok(fork, "F1")  # 6 messages: no rebuild
        await run.turn_ok(fork, "F2")  # 6 messages: no rebuild
        f2 = await run.turn_ok(fork, "F3")  # 8 messages: rebuild
        listed, _ = await list_all(run, fork)
        read = await run.request("thread/read", {"threadId": fork, "includeTurns": True})
    reverts = [r["params"] for r in run.received("thread/revert")]
    seen = run.seen(fork)[-1]
    assert seen["turnId"] == f2
    assert seen["held"] == [], f"reverts {reverts}; the fork's model still holds {[h['turnId'] for h in seen['held']]}; turns/list: {listed}; thread/read: {[t['id'] for t in read['result']['thread']['turns']]}"


# F. A thread-wide item anchor naming an archived item is the sidecar's to page.
async def test_a_thread_wide_item_anchor_on_an_archived_item(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, t3, t4) = await four_turns_rebuilt_at_the_third(run, "I")
        every = await items_all(run, tid)
        after = await items_all(run, tid, cursor={"type": "item", "itemId": f"{t1}-user"})
        before = await items_all(run, tid, sortDirection="desc", cursor={"type": "item", "itemId": f"{t2}-agent"})
    ids = [e["item"]["id"] for e in every]
    assert ids[0] == f"{t1}-user" and len(ids) == 8
    got_after = [e["item"]["id"] for e in after]
    got_before = [e["item"]["id"] for e in before]
    assert (got_after, got_before) == (ids[1:], ids[:3][::-1]), f"after={got_after} before={got_before}"


# A thread/read sent while a rebuilding turn/start is held waits behind it
# (so it can never race the rebuild's revert) and lists the dropped turns.
async def test_a_read_sent_during_a_rebuild_lists_the_dropped_turns(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "W1")
        t2 = await run.turn_ok(tid, "W2")
        rid, line = run.turn_start_line(tid, "W3")  # this turn rebuilds: reverts t1, t2
        await run.send(line)
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        t3 = (await run.finish_turn(tid, rid))["id"]
    methods = [m.get("method") for m in run.received() if m.get("method") in ("thread/revert", "turn/start", "thread/read")]
    assert methods[-3:] == ["thread/revert", "turn/start", "thread/read"]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3]


# A client's requests on a thread whose turn/start the sidecar holds (here a
# thread/revert sent while the engine assembles) reach Codex after that
# turn/start, in the client's order: the revert then drops the new turn as
# it would without the sidecar, and the mirror and archive agree with Codex.
async def test_requests_behind_a_held_turn_start_keep_the_client_s_order(tmp_path):

    engine = identity()
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "R1")
        t2 = await run.turn_ok(tid, "R2")
        release = trio.Event()
        engine.hang("assemble", release)
        rid, line = run.turn_start_line(tid, "R3")
        await run.send(line)
        await engine.wait_for_call("assemble", 3)
        revert_id = run.new_id()
        await run.send(b'{"id":%d,"method":"thread/revert","params":{"threadId":"%s","beforeTurnId":"%s"}}' % (revert_id, tid.encode(), t2.encode()))
        await trio.sleep(0.2)
        assert [m.get("method") for m in run.received()][-1] != "thread/revert", "the revert waits behind the held turn/start"
        release.set()
        await run.finish_turn(tid, rid)
        assert "result" in await run.wait_response(revert_id)
        await wait_until(lambda: run.session(tid).settled, what="forget")
        t4 = await run.turn_ok(tid, "R4")
    methods = [m.get("method") for m in run.received() if m.get("method") in ("turn/start", "thread/revert")]
    assert methods[-3:] == ["turn/start", "thread/revert", "turn/start"]
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t4]
    history = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert history == ["R1", "Reply 1."], history


# A turn Codex holds but the mirror lacks (the sidecar was killed between
# forwarding turn/completed and writing anything of the turn: simulated by
# cutting every state file back to its size before the turn) is mirrored and
# archived when the thread is resumed, once; the engine sees it in order and
# the ledger knows Codex holds it (no rebuild, nothing projected again).
@pytest.mark.parametrize("exclude_turns", [False, True], ids=["with-turns", "excludeTurns"])
async def test_a_resume_mirrors_the_turn_a_kill_left_out(tmp_path, exclude_turns):
    from sidecar.store.mirror import session_path

    state = tmp_path / "state"
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "K1")
        await wait_until(lambda: run.session(tid).settled, what="finalisation")
        files = [session_path(state, tid), archive_path(state, tid), inspect_path(state, tid)]
        sizes = {f: f.stat().st_size for f in files}
        lost = await run.turn_ok(tid, "K2")
        await wait_until(lambda: run.session(tid).settled, what="finalisation")
    for f, size in sizes.items():
        os.truncate(f, size)  # the kill: nothing of K2 was written
    engine = identity()
    for name in ("two", "three"):  # the second restart finds nothing to add
        async with modes_sidecar(tmp_path, engine, name=name) as run2:
            await run2.resume_thread(tid, **({"excludeTurns": True} if exclude_turns else {}))
            await run2.turn_ok(tid, f"K3-{name}")
            seen = run2.seen(tid)[-1]
            assert seen["additionalContext"] is None, "Codex holds K2 already: nothing projected, no rebuild"
            assert run2.lifecycle.sessions[tid].rebuilds == 0
    texts = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert texts.count("K2") == 1 and texts.index("K1") < texts.index("K2") < texts.index("K3-two"), texts
    assert lost in TurnArchive(archive_path(state, tid))._read()[0]


# A client's revert to a turn a rebuild took out of Codex (its reads still
# show it): Codex, which no longer knows the turn, reverts to its own first
# turn; the archive, mirror and ledger follow the client's request, and the
# next turn gives the model exactly what is left.
async def test_a_client_revert_to_an_archived_turn(tmp_path):

    engine = summarising_once()
    async with modes_sidecar(tmp_path, engine) as run:
        tid, (t1, t2, t3, t4) = await four_turns_rebuilt_at_the_third(run, "V")
        assert [t["id"] for t in run.store_turns(tid)] == [t3, t4]
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        assert "result" in reverted, reverted
        await wait_until(lambda: run.session(tid).settled, what="forget")
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        t5 = await run.turn_ok(tid, "V5")
        after = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")][-1] == t3, "Codex reverts to its first turn"
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1]
    assert [t["id"] for t in after["result"]["thread"]["turns"]] == [t1, t5]
    history = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert history == ["V1", "Reply 1."], history
    seen = run.seen(tid)[-1]
    assert seen["held"] == [], "Codex held nothing before the turn"
    context = json.dumps(seen["additionalContext"])
    assert "V1" in context and "V2" not in context and "V4" not in context
    assert run.lifecycle.sessions[tid].rebuilds == 1, "no second rebuild was needed"


# A fork through a turn a rebuild took out of Codex: Codex forks its framing,
# the fork lists the turns it inherits, and its first turn projects them.
async def test_a_fork_through_an_archived_turn(tmp_path):
    engine = summarising_once()
    async with modes_sidecar(tmp_path, engine) as run:
        tid, (t1, t2, t3, t4) = await four_turns_rebuilt_at_the_third(run, "G")
        forked = await run.request("thread/fork", {"threadId": tid, "lastTurnId": t2})
        assert "result" in forked, forked
        fork = forked["result"]["thread"]["id"]
        await run.settle_thread(fork)
        f5 = await run.turn_ok(fork, "G5")
        read = await run.request("thread/read", {"threadId": fork, "includeTurns": True})
    sent = run.received("thread/fork")[-1]["params"]
    assert sent.get("beforeTurnId") == t3 and "lastTurnId" not in sent, sent
    assert [t["id"] for t in forked["result"]["thread"]["turns"]] == [t1, t2]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, f5]
    seen = run.seen(fork)[-1]
    assert seen["held"] == [], "the fork held only Codex's framing"
    context = json.dumps(seen["additionalContext"])
    assert "G2" in context and "G3" not in context and "G4" not in context, context


# thread/resume's initialTurnsPage (a thread/turns/list page in the answer,
# the way clients bootstrap recent turns) shows the archived turns too, and
# its cursor pages on through every turn, each once, in order.
async def test_resume_initial_turns_page_covers_the_archived_turns(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once(), name="one") as run:
        tid, turns = await four_turns_rebuilt_at_the_third(run, "P")
        turns.append(await run.turn_ok(tid, "P5"))
    assert len(run.store_turns(tid)) == 3  # Codex holds t3..t5; t1, t2 are archived
    async with modes_sidecar(tmp_path, summarising_once(), name="two") as run2:
        for direction in ("desc", "asc"):
            for limit in (1, 2, 3, 4, 10, None):
                asked = {"sortDirection": direction, **({"limit": limit} if limit else {})}
                resp = await run2.request("thread/resume", {"threadId": tid, "excludeTurns": True, "initialTurnsPage": asked})
                page = resp["result"]["initialTurnsPage"]
                ids = [t["id"] for t in page["data"]]
                if limit:
                    assert len(ids) <= limit, (direction, limit, ids)
                cursor = page["nextCursor"]
                if cursor is not None:
                    rest, _ = await list_all(run2, tid, sortDirection=direction, cursor=cursor, **({"limit": limit} if limit else {}))
                    ids += rest
                expected = turns if direction == "asc" else turns[::-1]
                assert ids == expected, (direction, limit, ids)
        assert not [r for r in run2.received("thread/turns/list") if str(r["params"].get("cursor", "")).startswith("codex-sidecar:")]


# A page the sidecar makes carries a backwardsCursor like Codex's: the other
# direction, from (and including) the page's first turn, through to the end.
async def test_sidecar_pages_carry_working_backwards_cursors(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, turns = await four_turns_rebuilt_at_the_third(run, "B")
        _, pages = await list_all(run, tid, sortDirection="desc", limit=1)
        ours = [p for p in pages if p["data"] and p["data"][0]["id"] in turns[:2]]
        assert len(ours) == 2
        for page in ours:
            first = page["data"][0]["id"]
            back, _ = await list_all(run, tid, sortDirection="asc", limit=1, cursor=page["backwardsCursor"])
            assert back == turns[turns.index(first) :], (first, back)


# Requests waiting behind a held turn/start when codex dies were never forwarded:
# they get -32001 ("not delivered", safe to retry), not the outcome-unknown -32603.
async def test_requests_waiting_behind_a_held_turn_start_are_answered_when_codex_dies(tmp_path):

    engine = identity()
    release = trio.Event()
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.settle_thread(tid)
        engine.hang("assemble", release)
        rid, line = run.turn_start_line(tid, "hello")
        await run.send(line)
        with trio.fail_after(5):
            await engine.wait_for_call("assemble")
        await run.send(frame({"id": 900, "method": "thread/read", "params": {"threadId": tid}}))
        await wait_until(lambda: run.client.proxy.router.gates.waiting == 1, what="the read waits behind the turn/start")
        run.client.proxy.process.kill()
        await run.client.wait_exit()
        release.set()
    answers = {f.get("id"): f for f in map(json.loads, run.client.lines) if "method" not in f}
    assert answers[900]["error"]["code"] == -32001
    assert answers[rid]["error"]["code"] == -32001


# A fork's archive is written before its mirror: the mirror existing is what
# says the fork was opened, so a kill between the two cannot leave a fork
# whose reads miss the archived turns it inherits.
async def test_a_fork_s_archive_is_written_before_its_mirror(tmp_path, monkeypatch):
    from sidecar.store.mirror import TranscriptMirror

    real_fork = TranscriptMirror.fork.__func__
    archive_there: list[bool] = []

    def fork(cls, parent_path, path, thread_id, **kw):
        archive_there.append(archive_path(tmp_path / "state", thread_id).exists())
        return real_fork(cls, parent_path, path, thread_id, **kw)

    monkeypatch.setattr(TranscriptMirror, "fork", classmethod(fork))
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, _ = await four_turns_rebuilt_at_the_third(run, "Z")
        forked = await run.request("thread/fork", {"threadId": tid})
        await run.settle_thread(forked["result"]["thread"]["id"])
    assert archive_there == [True]


async def _two_turns(run, prefix: str) -> tuple[str, str, str]:
    """A new thread with turns ``<prefix>1`` and ``<prefix>2``: its id and theirs."""
    tid = await run.start_thread()
    return tid, await run.turn_ok(tid, f"{prefix}1"), await run.turn_ok(tid, f"{prefix}2")


# Killed after Codex answered the client's own revert, before the sidecar's
# mirror and archive followed it (here: the turn slot was busy). The intent is
# on disk; the next opening of the thread follows the revert before any turn,
# so the engine never assembles the reverted turns again and reads stay cut.
async def test_a_kill_before_a_client_revert_is_followed_does_not_bring_its_turns_back(tmp_path):

    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid, t1, t2 = await _two_turns(run, "C")
        await run.turn_ok(tid, "C3")
        session = run.session(tid)
        await session.slot.acquire()  # a turn still finalising: the forget must wait
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        assert "result" in reverted
        path = archive_path(tmp_path / "state", tid)
        await wait_until(lambda: path.exists() and b'"forgetting"' in path.read_bytes(), what="the revert's intent on disk")
        # -- SIGKILL here: the sidecar exits with the forget still waiting. --
    assert [t for _, t in roles_texts(run.mirror_messages(tid)) if t.startswith("C")] == ["C1", "C2", "C3"]

    engine = identity()
    async with modes_sidecar(tmp_path, engine, name="two") as run2:
        await run2.resume_thread(tid)
        t4 = await run2.turn_ok(tid, "C4")
        read = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})
        path_messages = run2.session(tid).mirror.messages()
    assert [t["id"] for t in run2.store_turns(tid)] == [t1, t4]
    assembled = roles_texts(calls_for(engine, "assemble", tid)[0].messages)
    assert [t for _, t in assembled if t.startswith("C")] == ["C1"], assembled
    assert [t for _, t in roles_texts(path_messages) if t.startswith("C")] == ["C1", "C4"]
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t4]
    assert TurnArchive(archive_path(tmp_path / "state", tid)).pending_forget() is None


# The client's requests wait behind the forget of its revert (so its next turn
# never assembles the reverted turns), but not forever: a turn that never ends
# holds them no longer than a turn/start would wait for it.
async def test_requests_behind_a_client_revert_are_not_stuck_behind_a_turn_that_never_ends(tmp_path):
    from sidecar.lifecycle import LifecycleOptions

    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_floor_chars=0, previous_turn_wait=0.3)
    async with modes_sidecar(tmp_path, identity(), options=options) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "G1")
        t2 = await run.turn_ok(tid, "G2")
        await run.session(tid).slot.acquire()  # a turn whose turn/completed never comes
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        assert "result" in reverted
        with trio.fail_after(10):
            read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        gated = run.client.proxy.router.gates.waiting
    assert gated == 0
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [run.store_turns(tid)[0]["id"]]


# A turn/start sent right behind the client's thread/revert, before its
# answer: it waits at the gate until the mirror followed the revert, so it
# neither assembles the reverted turn nor is cut with it.
async def test_a_turn_pipelined_behind_a_client_revert_is_kept_and_sees_no_reverted_turn(tmp_path):

    engine = identity()
    async with modes_sidecar(tmp_path, engine) as run:
        tid, t1, t2 = await _two_turns(run, "P")
        rid = run.new_id()
        await run.send(frame({"id": rid, "method": "thread/revert", "params": {"threadId": tid, "beforeTurnId": t2}}))
        trid, line = run.turn_start_line(tid, "P3")
        await run.send(line)
        assert "result" in await run.wait_response(rid)
        t3 = (await run.finish_turn(tid, trid))["id"]
        path_messages = run.session(tid).mirror.messages()
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t3]
    assembled = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert "P2" not in assembled and "P1" in assembled, assembled
    assert [t for _, t in roles_texts(path_messages) if t in ("P1", "P2", "P3")] == ["P1", "P3"]


# The mirror fails to follow a client revert (a full disk, once): the next
# turn follows it before it assembles, so that turn is mirrored after the cut.
async def test_a_client_revert_the_mirror_failed_to_follow_is_followed_by_the_next_turn(tmp_path, monkeypatch):
    from sidecar.store.mirror import TranscriptMirror

    real = TranscriptMirror.rewind
    calls: list[int] = []

    def full_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TranscriptMirror, "rewind", full_once)
    engine = identity()
    async with modes_sidecar(tmp_path, engine) as run:
        tid, t1, t2 = await _two_turns(run, "F")
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        await wait_until(lambda: calls and run.session(tid).unfollowed is not None, what="the failed follow")
        t3 = await run.turn_ok(tid, "F3")
        path_messages = run.session(tid).mirror.messages()
    assert len(calls) == 2 and [t["id"] for t in run.store_turns(tid)] == [t1, t3]
    assembled = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert "F2" not in assembled, assembled
    assert [t for _, t in roles_texts(path_messages) if t in ("F1", "F2", "F3")] == ["F1", "F3"]
    assert TurnArchive(archive_path(tmp_path / "state", tid)).pending_forget() is None


# The mirror never manages to follow (the next turn's retry fails too), the
# thread goes on, then a restart: the intent is too late to follow (it would
# cut the turn Codex ran since), so the restart leaves the mirror as it is.
async def test_a_stale_client_revert_intent_never_cuts_a_later_turn(tmp_path, monkeypatch):
    from sidecar.store.mirror import TranscriptMirror

    real = TranscriptMirror.rewind

    def broken(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TranscriptMirror, "rewind", broken)
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid, t1, t2 = await _two_turns(run, "S")
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        t3 = await run.turn_ok(tid, "S3")
    monkeypatch.setattr(TranscriptMirror, "rewind", real)
    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        await run2.resume_thread(tid)
        t4 = await run2.turn_ok(tid, "S4")
        path_messages = run2.session(tid).mirror.messages()
    assert [t["id"] for t in run2.store_turns(tid)] == [t1, t3, t4]
    texts = [t for _, t in roles_texts(path_messages)]
    assert "S3" in texts and "S4" in texts, texts


# A turn that never finishes holds the slot past previous_turn_wait: the
# revert is followed anyway (as a turn/start takes over), before the client's
# next turn, which is then mirrored and kept.
async def test_a_client_revert_behind_a_turn_that_never_ends_is_followed_before_the_next_turn(tmp_path):
    from sidecar.lifecycle import LifecycleOptions

    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_floor_chars=0, previous_turn_wait=0.3)
    async with modes_sidecar(tmp_path, identity(), options=options) as run:
        tid, t1, t2 = await _two_turns(run, "N")
        await run.session(tid).slot.acquire()  # never released: a lost turn/completed
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        t4 = (await run.turn(tid, "N4"))["id"]
        path_messages = run.session(tid).mirror.messages()
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t4]
    assert [t for _, t in roles_texts(path_messages) if t in ("N1", "N2", "N4")] == ["N1", "N4"]


async def _joined_turn_then_client_revert(run, tid: str, joined_text: str) -> tuple[str, str]:
    """Q1 and Q2 done; Q3 running (HOLD); a turn/start sent during it joins
    it, as in Codex (the same turn id back at once); then the client reverts
    before Q2, which ends Q3, the joined input with it."""

    t1 = await run.turn_ok(tid, "Q1")
    t2 = await run.turn_ok(tid, "Q2")
    rid3, line3 = run.turn_start_line(tid, "Q3 HOLD")
    await run.send(line3)
    t3 = (await run.wait_response(rid3))["result"]["turn"]["id"]
    await wait_until(lambda: run.session(tid).current is not None and run.session(tid).current.turn_id == t3, what="Q3 running")
    rid4, line4 = run.turn_start_line(tid, joined_text)
    await run.send(line4)
    assert (await run.wait_response(rid4))["result"]["turn"]["id"] == t3
    rid5 = run.new_id()
    await run.send(frame({"id": rid5, "method": "thread/revert", "params": {"threadId": tid, "beforeTurnId": t2}}))
    assert "result" in await run.wait_response(rid5)
    return t1, t2


# A turn/start sent during a running turn joins it (it used to queue for the
# slot and follow the client's revert first): the revert takes it with that
# turn, and the next turn sees no reverted turn.
async def test_a_turn_joined_before_a_client_revert_goes_with_the_reverted_turn(tmp_path):

    engine = identity()
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        t1, t2 = await _joined_turn_then_client_revert(run, tid, "Q4")
        await wait_until(lambda: not len(run.client.proxy.router.gates) and run.session(tid).settled, what="gates and slot free")
        t5 = await run.turn_ok(tid, "Q5")
        path_messages = run.session(tid).mirror.messages()
        forgotten = TurnArchive(archive_path(tmp_path / "state", tid))._read()[2]
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t5]
    assembled = [t for _, t in roles_texts(calls_for(engine, "assemble", tid)[-1].messages)]
    assert not any(t.startswith(("Q2", "Q3", "Q4")) for t in assembled), assembled
    assert [t for _, t in roles_texts(path_messages) if t.startswith("Q")] == ["Q1", "Q5"]
    assert t5 not in forgotten and t2 in forgotten


# The next turn after the revert, running, can be interrupted at once: the
# client's requests are not held behind the forget.
async def test_the_next_turn_can_be_interrupted_while_the_forget_waits(tmp_path):
    from sidecar.lifecycle import LifecycleOptions

    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_floor_chars=0, previous_turn_wait=60.0)
    async with modes_sidecar(tmp_path, identity(), options=options) as run:
        tid = await run.start_thread()
        await _joined_turn_then_client_revert(run, tid, "Q4")
        rid6, line6 = run.turn_start_line(tid, "Q6 HOLD")
        await run.send(line6)
        t6 = (await run.wait_response(rid6, timeout=30))["result"]["turn"]["id"]
        irid = run.new_id()
        await run.send(frame({"id": irid, "method": "turn/interrupt", "params": {"threadId": tid, "turnId": t6}}))
        with trio.fail_after(20):  # gated, it would wait previous_turn_wait (60 s)
            answered = await run.wait_response(irid, timeout=30)
    assert "result" in answered


# The mirror keeps failing to follow: the first turn after the revert gives
# it up (it ran on), so a follow that succeeds later never cuts that turn.
async def test_a_client_revert_given_up_is_not_followed_after_a_later_turn(tmp_path, monkeypatch):
    from sidecar.store.mirror import TranscriptMirror

    real = TranscriptMirror.rewind
    calls: list[int] = []

    def fails_twice(self, *args, **kwargs):
        calls.append(1)
        if len(calls) <= 2:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TranscriptMirror, "rewind", fails_twice)
    async with modes_sidecar(tmp_path, identity()) as run:
        tid, t1, t2 = await _two_turns(run, "H")
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        await wait_until(lambda: calls, what="the failed follow")
        t3 = await run.turn_ok(tid, "H3")  # its retry fails too; it runs on
        t4 = await run.turn_ok(tid, "H4")
        path_messages = run.session(tid).mirror.messages()
        forgotten = TurnArchive(archive_path(tmp_path / "state", tid))._read()[2]
    assert len(calls) == 2, "given up: no third try"
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t3, t4]
    texts = [t for _, t in roles_texts(path_messages)]
    assert "H3" in texts and "H4" in texts, texts
    assert t3 not in forgotten
