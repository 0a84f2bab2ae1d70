"""Reads after rebuilds: the turns Codex forgot come from the sidecar's archive.

A rebuild takes turns out of the Codex thread; ``thread/read``,
``thread/resume``, ``thread/fork``, ``thread/turns/list`` and
``thread/items/list`` must still answer the client with every turn it has,
the archived ones in the view asked for and Codex's own as Codex sent them,
across restarts, torn or unwritable archives and cursors taken before the
rebuild. Runs over the fake app-server (tests/support/modes.py).
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.history.archive import archive_path, unwrap_cursor
from tests.support.lifecycle import wait_until
from tests.support.modes import (
    ModesRun,
    assert_client_unaware,
    four_turns_rebuilt_at_the_third,
    items_all,
    list_all,
    modes_sidecar,
    summarising,
    summarising_once,
)


def _response_line(run: ModesRun, rid: Any) -> bytes:
    return next(line for line in run.client.lines if json.loads(line).get("id") == rid)


async def test_reads_and_resumes_answer_with_every_turn_across_rebuilds_and_a_restart(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "W1")
        t2 = await run.turn_ok(tid, "W2")
        early = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        t3 = await run.turn_ok(tid, "W3")  # rebuild 1: Codex forgets t1, t2
        t4 = await run.turn_ok(tid, "W4")  # rebuild 2: Codex forgets t3
        # Loaded in a worker thread after the revert, before any read needs it
        # (a read would otherwise load it on the event loop).
        assert run.lifecycle is not None
        await wait_until(lambda: [t["id"] for t in run.lifecycle.archived._cache.get(tid, [])] == [t1, t2, t3], what="the archived turns loaded")
        bare = await run.request("thread/read", {"threadId": tid})  # no turns asked for, none added
    every = [t1, t2, t3, t4]
    assert run.lifecycle is not None and run.lifecycle.sessions[tid].rebuilds == 2
    # Nothing to add before a rebuild: Codex's answer reaches the client byte for byte.
    assert [t["id"] for t in early["result"]["thread"]["turns"]] == [t1, t2]
    assert _response_line(run, early["id"]) in run.sent_log.read_bytes().splitlines()
    assert bare["result"]["thread"]["turns"] == []
    first_items = {
        f["params"]["turnId"]: [] for f in run.frames() if f.get("method") == "item/completed"
    }
    for f in run.frames():
        if f.get("method") == "item/completed":
            first_items[f["params"]["turnId"]].append(f["params"]["item"])

    # A fresh sidecar (and a fresh Codex) on the same state: resume and read still show every turn.
    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
        resumed = await run2.resume_thread(tid)
        read = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})
        without = await run2.request("thread/resume", {"threadId": tid, "excludeTurns": True})
        t5 = await run2.turn_ok(tid, "W5")  # rebuild 3, after the restart: Codex forgets t4
        read_after = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})

    assert [t["id"] for t in run2.store_turns(tid)] == [t5]
    assert [t["id"] for t in resumed["result"]["thread"]["turns"]] == every
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == every
    assert without["result"]["thread"]["turns"] == []  # the client asked for none
    assert [t["id"] for t in read_after["result"]["thread"]["turns"]] == [*every, t5]
    for turn in read_after["result"]["thread"]["turns"][:4]:
        assert turn["items"] == first_items[turn["id"]]
    # Every other field of the responses is Codex's own, but the path: the
    # thread's own rollout, not the segment the last revert started.
    codex_read = next(json.loads(line) for line in run2.sent_log.read_bytes().splitlines() if json.loads(line).get("id") == read["id"])
    assert codex_read["result"]["thread"]["path"].endswith("_segment-2.jsonl")
    assert read["result"]["thread"]["path"] == codex_read["result"]["thread"]["path"].replace("_segment-2", "")
    assert {k: v for k, v in read["result"]["thread"].items() if k not in ("turns", "path")} == {
        k: v for k, v in codex_read["result"]["thread"].items() if k not in ("turns", "path")
    }
    assert read["result"]["thread"]["turns"][-1] == codex_read["result"]["thread"]["turns"][-1]
    assert_client_unaware(run2, tid)


async def test_a_torn_archive_line_loses_only_that_line(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "X1")
        t2 = await run.turn_ok(tid, "X2")
        t3 = await run.turn_ok(tid, "X3")  # rebuild: t1, t2 dropped
    path = archive_path(tmp_path / "state", tid)
    assert path.stat().st_mode & 0o777 == 0o600
    with open(path, "ab") as f:
        f.write(b'{"turn": {"id": "torn", "ite')  # a kill -9 in the middle of a write
    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
        read = await run2.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3]


async def test_an_unwritable_archive_costs_the_reads_not_the_turns(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "turns").write_text("not a folder")  # every archive write fails
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "Y1")
        await run.turn_ok(tid, "Y2")
        t3 = await run.turn_ok(tid, "Y3")  # the rebuild still happens
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        status = await run.status()
    assert status["rebuilds"] == 1
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t3]  # Codex's own answer


async def test_turns_list_pages_through_every_turn_across_rebuilds(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Z1")
        t2 = await run.turn_ok(tid, "Z2")
        before = await list_all(run, tid, limit=1)
        # Cursors taken before the rebuild, to go on with after it.
        early_desc = (await run.request("thread/turns/list", {"threadId": tid, "limit": 1}))["result"]
        early_asc = (await run.request("thread/turns/list", {"threadId": tid, "limit": 1, "sortDirection": "asc"}))["result"]
        early_items = (await run.request("thread/items/list", {"threadId": tid, "limit": 1}))["result"]
        t3 = await run.turn_ok(tid, "Z3")  # the rebuild: Codex forgets t1, t2
        t4 = await run.turn_ok(tid, "Z4")
        t5 = await run.turn_ok(tid, "Z5")  # Codex holds t3, t4, t5
        every = [t1, t2, t3, t4, t5]
        listings = {}
        for limit in (1, 2, 3, 10, None):
            for direction in ("asc", "desc"):
                params = {"sortDirection": direction, **({"limit": limit} if limit else {})}
                listings[direction, limit] = await list_all(run, tid, **params)
        went_on = {
            "desc": await list_all(run, tid, cursor=early_desc["nextCursor"], limit=1),
            "asc": await list_all(run, tid, cursor=early_asc["nextCursor"], limit=2, sortDirection="asc"),
            "back": await list_all(run, tid, cursor=early_desc["backwardsCursor"], limit=2),
        }
        every_item = await list_all(run, tid, method="thread/items/list")
        items_went_on = await list_all(run, tid, cursor=early_items["nextCursor"], method="thread/items/list", limit=3)
        full_view = await list_all(run, tid, sortDirection="asc", itemsView="full")
        not_loaded = await list_all(run, tid, itemsView="notLoaded")
        frames = run.frames()
        sent_by_codex = run.sent_log.read_bytes().splitlines()

    assert [t["id"] for t in run.store_turns(tid)] == [t3, t4, t5]
    assert run.lifecycle is not None and run.lifecycle.sessions[tid].rebuilds == 1
    assert before[0] == [t2, t1]  # before any rebuild: Codex's own paging, untouched
    for (direction, limit), (ids, pages) in listings.items():
        assert ids == (every if direction == "asc" else every[::-1]), (direction, limit)
        assert all(len(p["data"]) <= limit for p in pages if limit), (direction, limit)
    # The archived turns in the view asked for; Codex's own as Codex sent them.
    items = {}
    for f in frames:
        if f.get("method") == "item/completed":
            items.setdefault(f["params"]["turnId"], []).append(f["params"]["item"])
    for turn in full_view[1][0]["data"]:
        assert turn["items"] == items[turn["id"]]
    summary = [t for p in listings["desc", None][1] for t in p["data"]]
    assert all(t["itemsView"] == "summary" for t in summary if t["id"] in (t1, t2))
    assert all(t["itemsView"] == "notLoaded" and t["items"] == [] for p in not_loaded[1] for t in p["data"] if t["id"] in (t1, t2))
    # Cursors taken before the rebuild go on where they were, though Codex
    # no longer holds the turns they continue from (its own offsets would
    # now point into the rebuilt thread): the rest of the thread, once each.
    assert [t["id"] for t in early_desc["data"]] == [t2] and [t["id"] for t in early_asc["data"]] == [t1]
    assert went_on["desc"][0] == [t1]
    assert went_on["asc"][0] == [t2, t3, t4, t5]
    assert went_on["back"][0] == [t2, t1]  # from (and with) the page's first turn, the way asked (newest first)
    assert early_items["data"][0]["item"]["id"] == every_item[0][0]
    assert items_went_on[0] == every_item[0][1:]
    # A page of Codex's own turns only (desc, limit 2, first page) reached the
    # client as Codex sent it, but for its cursors: wrapped with the turn they
    # continue from, and unwrapped on their way back; Codex never saw one.
    first = listings["desc", 2][1][0]
    assert [t["id"] for t in first["data"]] == [t5, t4]
    codex_first = next(r for line in sent_by_codex if (r := json.loads(line).get("result")) and r.get("data") == first["data"] and r["nextCursor"] == "fake:2")
    assert first["nextCursor"] != codex_first["nextCursor"]
    assert unwrap_cursor(first["nextCursor"]) == (codex_first["nextCursor"], t4, False)
    assert unwrap_cursor(first["backwardsCursor"]) == (codex_first["backwardsCursor"], t5, True)
    assert {k: v for k, v in first.items() if not k.endswith("Cursor")} == {k: v for k, v in codex_first.items() if not k.endswith("Cursor")}
    assert not any("codex-sidecar:" in json.dumps(m.get("params")) for m in run.received("thread/turns/list") + run.received("thread/items/list"))
    assert_client_unaware(run, tid)


async def test_a_fork_of_a_rebuilt_thread_lists_every_turn_it_inherits(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, t3, t4) = await four_turns_rebuilt_at_the_third(run, "F")
        whole = await run.request("thread/fork", {"threadId": tid})
        through_t3 = await run.request("thread/fork", {"threadId": tid, "lastTurnId": t3})
        bare = await run.request("thread/fork", {"threadId": tid, "excludeTurns": True})
        f_all, f_t3 = whole["result"]["thread"]["id"], through_t3["result"]["thread"]["id"]
        await run.settle_thread(f_all)
        await run.settle_thread(f_t3)
        read_all = await run.request("thread/read", {"threadId": f_all, "includeTurns": True})
        read_t3 = await run.request("thread/read", {"threadId": f_t3, "includeTurns": True})
        t5 = await run.turn_ok(f_t3, "F5 on the fork")
        read_t3_after = await run.request("thread/read", {"threadId": f_t3, "includeTurns": True})
        mirror_t3 = run.mirror_messages(f_t3)

    assert [t["id"] for t in run.store_turns(f_all)] == [t3, t4]  # Codex's copy: since the rebuild
    assert [t["id"] for t in whole["result"]["thread"]["turns"]] == [t1, t2, t3, t4]
    assert [t["id"] for t in read_all["result"]["thread"]["turns"]] == [t1, t2, t3, t4]
    assert [t["id"] for t in through_t3["result"]["thread"]["turns"]] == [t1, t2, t3]
    assert [t["id"] for t in read_t3["result"]["thread"]["turns"]] == [t1, t2, t3]
    assert bare["result"]["thread"]["turns"] == []
    # The fork's own turns go on from there, its archive carried over.
    assert [t["id"] for t in read_t3_after["result"]["thread"]["turns"]] == [t1, t2, t3, t5]
    # A fork through t3 mirrors nothing of t4 (lastTurnId cuts the mirror too).
    assert [m["content"][0]["text"] if isinstance(m["content"], list) else m["content"] for m in mirror_t3 if m["role"] == "user"] == [
        "F1", "F2", "F3", "F5 on the fork"
    ]


async def test_items_list_pages_through_the_archived_turns_items(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, t3, t4) = await four_turns_rebuilt_at_the_third(run, "I")
        listings = {}
        for limit in (1, 3, 100, None):
            for direction in ("asc", "desc"):
                listings[direction, limit] = await items_all(run, tid, sortDirection=direction, **({"limit": limit} if limit else {}))
        default = await items_all(run, tid)
        one_turn = await items_all(run, tid, turnId=t1, limit=1)
        after_anchor = await items_all(run, tid, turnId=t2, cursor={"type": "item", "itemId": f"{t2}-user"})
        before_anchor = await items_all(run, tid, turnId=t2, sortDirection="desc", cursor={"type": "item", "itemId": f"{t2}-agent"})
        codex_turn = await items_all(run, tid, turnId=t4)
        frames = run.frames()

    every = [(f["params"]["turnId"], f["params"]["item"]["id"]) for f in frames if f.get("method") == "item/completed"]
    assert [t for t, _ in every] == [t1, t1, t2, t2, t3, t3, t4, t4]
    for (direction, limit), entries in listings.items():
        got = [(e["turnId"], e["item"]["id"]) for e in entries]
        assert got == (every if direction == "asc" else every[::-1]), (direction, limit)
    assert [(e["turnId"], e["item"]["id"]) for e in default] == every  # oldest first by default
    items = {i: f["params"]["item"] for f in frames if f.get("method") == "item/completed" for i in [f["params"]["item"]["id"]]}
    for e in listings["asc", None]:
        assert e["item"] == items[e["item"]["id"]] and e["startedAtMs"] == e["item"]["startedAtMs"]
    assert [e["item"]["id"] for e in one_turn] == [f"{t1}-user", f"{t1}-agent"]
    assert [e["item"]["id"] for e in after_anchor] == [f"{t2}-agent"]
    assert [e["item"]["id"] for e in before_anchor] == [f"{t2}-user"]
    assert [e["item"]["id"] for e in codex_turn] == [f"{t4}-user", f"{t4}-agent"]  # Codex's own, forwarded
    assert not any("codex-sidecar:" in json.dumps(m.get("params")) for m in run.received("thread/items/list"))
    assert [m["params"].get("turnId") for m in run.received("thread/items/list") if m["params"].get("turnId")] == [t4]


async def test_archived_item_entries_are_shaped_as_the_codex_behind_shapes_its_own(tmp_path):
    """Codex before 0.157.0 lists items without ``startedAtMs`` and
    ``completedAtMs`` (the conformance suite against 0.151.0 saw the sidecar
    add them as nulls): the entries the sidecar answers from the archive
    carry them only where that codex's own do."""
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, *_) = await four_turns_rebuilt_at_the_third(run, "E")
        assert run.lifecycle is not None
        observed = run.lifecycle.proxy.router.observed
        shown = {}
        for version in ("0.156.0", "0.157.0", None):
            observed.codex_version = version
            shown[version] = await items_all(run, tid, turnId=t1)
    assert shown["0.156.0"] and all(set(e) == {"item", "turnId"} for e in shown["0.156.0"])
    for version in ("0.157.0", None):  # not known: as the pinned codex
        assert [set(e) for e in shown[version]] == [{"item", "turnId", "startedAtMs", "completedAtMs"}] * len(shown["0.156.0"])
    assert [e["item"] for e in shown["0.156.0"]] == [e["item"] for e in shown["0.157.0"]]
