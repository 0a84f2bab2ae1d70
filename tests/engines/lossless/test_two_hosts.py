"""Two sidecars serving one session at once, each with its own connection to
one store (two hosts on one PostgreSQL database, or two processes on one
SQLite file): nothing lost, nothing doubled, no summary lost or made twice."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import trio

from engines import AfterTurnParams, CompactParams, MaintainParams
from engines.lossless import Store
from engines.lossless.messages import content_identity, identities, message_id
from engines.testkit import FakeHost
from engines.tokens import estimate_message_tokens

from .conftest import SESSION, conversation, make_engine

REPO = Path(__file__).resolve().parents[3]


def _open(backend: str | None, folder) -> Store:
    return Store.connect(backend) if backend else Store.open(folder)


def check_store(store: Store, expected_messages: int) -> dict[str, int]:
    """The store's invariants; returns counts of what it holds."""
    rows = store.messages_between(SESSION, 1)
    assert [r.seq for r in rows] == list(range(1, expected_messages + 1)), "every message once, seq gap-free"
    assert len({r.id for r in rows}) == len(rows)
    summaries = store.summaries(SESSION)
    by_id = {s.id: s for s in summaries}
    leaves = sorted((s for s in summaries if s.depth == 0), key=lambda s: s.seq_lo)
    # Leaves tile 1..summarized_seq: no gap, no overlap, none made twice.
    reach = 0
    for leaf in leaves:
        assert leaf.seq_lo == reach + 1, f"leaf {leaf.id} starts at {leaf.seq_lo}, expected {reach + 1}"
        assert store.summary_sources(leaf.id) == [r.id for r in rows[leaf.seq_lo - 1 : leaf.seq_hi]]
        reach = leaf.seq_hi
    session = store.session(SESSION)
    assert session.summarized_seq == reach
    assert session.frame_seq <= session.summarized_seq
    # Every condensed summary owns its sources, and a source has one parent.
    owners: dict[str, str] = {}
    for s in summaries:
        if s.depth == 0:
            continue
        sources = store.summary_sources(s.id)
        assert sources and all(by_id[i].parent_id == s.id and by_id[i].depth == s.depth - 1 for i in sources)
        for i in sources:
            assert i not in owners, f"{i} condensed twice"
            owners[i] = s.id
    for s in summaries:
        assert (s.parent_id is None) == (s.id not in owners)
    # The uncondensed summaries cover the summarised messages once.
    active = sorted((s for s in summaries if s.parent_id is None), key=lambda s: s.seq_lo)
    covered = 0
    for s in active:
        assert s.seq_lo == covered + 1
        covered = s.seq_hi
    assert covered == reach
    assert all(i in by_id for i in session.frame_ids)
    return {"messages": len(rows), "leaves": len(leaves), "summaries": len(summaries)}


def test_two_writers_ingesting_the_same_turns_at_once_store_each_message_once(backend, tmp_path):
    history = conversation(40)
    idents = identities(history, [content_identity(m) for m in history])
    stores = [_open(backend, tmp_path / "state") for _ in range(2)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(store: Store, step: int) -> None:
        try:
            start.wait()
            # Each sidecar hands over the growing snapshot, as after_turn does,
            # one in steps of one turn and the other of three.
            for end in range(4 * step, len(history) + 4 * step, 4 * step):
                store.ingest(SESSION, SESSION, history[:end], idents[:end], estimate_message_tokens)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s, step)) for s, step in zip(stores, (1, 3), strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    try:
        counts = check_store(stores[0], len(history))
        rows = stores[1].messages_between(SESSION, 1)
        assert [r.id for r in rows] == [r.id for r in stores[0].messages_between(SESSION, 1)]
        # Stored in the conversation's order, whoever wrote which.
        assert [m for m in stores[0].decode(rows)] == history
        assert counts["messages"] == len(history)
    finally:
        for s in stores:
            s.close()


def test_two_writers_each_adding_their_own_messages_at_once_lose_none(backend, tmp_path):
    # Without a per-session lock both would take the same next seq and one
    # message would be dropped by the (session, seq) key.
    turns = conversation(60)
    mine = [turns[i : i + 4] for i in range(0, len(turns), 8)], [turns[i : i + 4] for i in range(4, len(turns), 8)]
    stores = [_open(backend, tmp_path / "state") for _ in range(2)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(store: Store, batches) -> None:
        try:
            start.wait()
            for batch in batches:
                store.ingest(SESSION, SESSION, batch, identities(batch, [content_identity(m) for m in batch]), estimate_message_tokens)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s, b)) for s, b in zip(stores, mine, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        rows = stores[0].messages_between(SESSION, 1)
        assert [r.seq for r in rows] == list(range(1, len(turns) + 1))
        assert sorted(m.timestamp for m in stores[0].decode(rows)) == sorted(m.timestamp for m in turns)
    finally:
        for s in stores:
            s.close()


async def test_two_sidecars_compacting_one_session_at_once_lose_and_double_no_summary(backend, tmp_path):
    asked = [trio.Event(), trio.Event()]
    met = [False, False]

    def summariser(me: int):
        async def summary(params):
            # Each sidecar's summary calls wait for the other's first one
            # until they have met: both are mid-summary of the session at
            # once, at least once. The engine's summary_timeout cuts a wait
            # short (the stand-in is stored, and the next call waits again):
            # under load the other may take longer than that to get there.
            if not met[me]:
                asked[me].set()
                await asked[1 - me].wait()
                met[me] = True
            await trio.sleep(0.005)
            return f"summary of {len(params.prompt)} chars"

        return summary

    state = tmp_path / "state"
    hosts = [FakeHost(state), FakeHost(state)]
    for n, h in enumerate(hosts):
        h.answer_with(summariser(n))
    engines = [await make_engine(h) for h in hosts]
    assert engines[0].store is not engines[1].store
    history = conversation(36)
    try:
        for end in range(4, len(history) + 1, 4):
            snapshot = history[:end]

            async def serve(engine, snapshot=snapshot, end=end):
                await engine.after_turn(
                    AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=snapshot, pre_prompt_message_count=end - 4)
                )
                await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
                if end % 12 == 0:
                    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))

            async with trio.open_nursery() as nursery:
                for engine in engines:
                    nursery.start_soon(serve, engine)
        counts = await trio.to_thread.run_sync(check_store, engines[0].store, len(history))
        assert counts["leaves"] >= 5 and counts["summaries"] > counts["leaves"], counts
        # Both sidecars were asking for summaries at once, yet each range was stored once.
        assert met == [True, True]
        rows = engines[0].store.messages_between(SESSION, 1)
        assert engines[1].store.decode(rows) == history
        assert engines[1].store.doctor()["problems"] == []
    finally:
        for engine in engines:
            await engine.dispose()
        for h in hosts:
            h.close()


_SIDECAR = """
import json, os, sys, trio
sys.path.insert(0, {repo!r})
from engines import AfterTurnParams, CompactParams, MaintainParams
from engines.testkit import FakeHost
from engines.lossless import LosslessEngine
from tests.engines.lossless.conftest import SMALL, SESSION, conversation

ME, OTHER, MEET = {me!r}, {other!r}, {meet!r}
met = False

async def summary(params):
    # Until the sidecars have met, each summary call waits until the other
    # sidecar is inside one too: both hold a summary of the same session at
    # once. The engine's summary_timeout cuts a wait short; the next call
    # waits again.
    global met
    if not met:
        open(os.path.join(MEET, ME), "w").close()
        while not os.path.exists(os.path.join(MEET, OTHER)):
            await trio.sleep(0.01)
        met = True
    return "a model summary"

async def main():
    host = FakeHost({state!r})
    host.answer_with(summary)
    config = dict(SMALL)
    if {url!r}:
        config["database_url"] = {url!r}
    engine = LosslessEngine(config)
    await engine.bind(host)
    open(os.path.join(MEET, ME + ".ready"), "w").close()
    # Start together. If the other fails, the test kills this one (the bound
    # only matters if the test itself is gone).
    with trio.fail_after({deadline!r}):
        while not os.path.exists(os.path.join(MEET, OTHER + ".ready")):
            await trio.sleep(0.01)
    history = conversation(30)
    for end in range(4, len(history) + 1, 4):
        await engine.after_turn(AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=history[:end], pre_prompt_message_count=end - 4))
        await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
        if end % 12 == 0:
            await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    await engine.dispose()
    print(json.dumps({{"met": met, "summaryCalls": len(host.calls)}}))

trio.run(main)
"""


SIDECARS_DEADLINE = 300.0
"""Seconds the sidecar processes get: about a second each on a quiet
machine; a bound for a test that hangs, not a wait for a slow one."""


def watch(children: list[subprocess.Popen], timeout: float) -> list[int | None]:
    """Wait until every child has exited, or one has failed, or ``timeout``
    passed; their exit codes (None: still running). Every child is polled
    each time round: one that failed while another still ran was missed
    (``any(c.poll() is None ...)`` stops at the first running child, so the
    second's ``returncode`` was never read), and the test waited for the
    first instead, which waited for the second to start."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes) or any(codes) or time.monotonic() >= deadline:
            return codes
        time.sleep(0.05)


def children_problem(codes: list[int | None], stderrs: list[str], timeout: float) -> str | None:
    """What went wrong with the sidecar processes, from their exit codes when
    :func:`watch` returned and their error output; None when both succeeded.
    A child that failed on its own comes first (the other was then killed
    by the test, and its output says nothing)."""
    failed = [n for n, code in enumerate(codes) if code]
    if failed:
        n = failed[0]
        return f"sidecar {'ab'[n]} exited with {codes[n]}:\n{stderrs[n][-3000:]}"
    running = [n for n, code in enumerate(codes) if code is None]
    if running:
        tails = "\n".join(f"sidecar {'ab'[n]}:\n{stderrs[n][-1500:]}" for n in running)
        return f"sidecar(s) {', '.join('ab'[n] for n in running)} still running after {timeout:.0f} s (killed); their error output:\n{tails}"
    return None


def test_the_sidecar_that_failed_on_its_own_is_reported_not_the_one_killed_after_it():
    # b failed at start while a waited for it (the test then kills a).
    problem = children_problem([None, 1], ["", "StoreError: database is locked"], SIDECARS_DEADLINE)
    assert problem == "sidecar b exited with 1:\nStoreError: database is locked"
    assert children_problem([0, 0], ["", ""], SIDECARS_DEADLINE) is None
    assert "a still running after 300 s" in str(children_problem([None, 0], ["waiting", ""], SIDECARS_DEADLINE))


def test_two_sidecar_processes_serving_one_session_lose_and_double_nothing(backend, tmp_path):
    state, meet = tmp_path / "state", tmp_path / "meet"
    meet.mkdir()
    codes = [
        _SIDECAR.format(repo=str(REPO), state=str(state), url=backend or "", me=me, other=other, meet=str(meet), deadline=SIDECARS_DEADLINE)
        for me, other in (("a", "b"), ("b", "a"))
    ]
    logs = [(open(tmp_path / f"{n}.out", "w+"), open(tmp_path / f"{n}.err", "w+")) for n in range(2)]  # noqa: SIM115 - closed below
    children = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=out, stderr=err) for code, (out, err) in zip(codes, logs, strict=True)]
    try:
        codes_now = watch(children, SIDECARS_DEADLINE)
        outputs = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            outputs.append((out.read(), err.read()))
    finally:
        for child in children:  # one failed: the other is not left behind
            if child.poll() is None:
                child.kill()
                child.wait()
        for out, err in logs:
            out.close()
            err.close()
    problem = children_problem(codes_now, [err for _, err in outputs], SIDECARS_DEADLINE)
    assert problem is None, problem
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    # Both sidecars were asking the model for a summary of the session at the same time.
    assert all(r["met"] for r in reports), reports
    store = _open(backend, state)
    try:
        history = conversation(30)
        counts = check_store(store, len(history))
        assert counts["leaves"] >= 5 and counts["summaries"] > counts["leaves"], counts
        # Nothing lost: the stored messages are the conversation, in order.
        rows = store.messages_between(SESSION, 1)
        assert [r.id for r in rows] == [message_id(SESSION, i) for i in identities(history, [content_identity(m) for m in history])]
        assert store.decode(rows) == history
        # Nothing doubled (check_store: no message, leaf range or condensation
        # twice), and the store's own checks find it consistent.
        assert all(r["summaryCalls"] for r in reports), reports
        assert store.doctor()["problems"] == []
    finally:
        store.close()
