"""Review of ``rebuild = "fresh"`` against the real codex 0.169.0: what the
client does to its thread after the sidecar moved it onto a spare (forks,
reverts, compaction, interrupts, unsubscribe/resume, names, archiving).

Each test drives the summary engine of tests/support/live.py for six turns
(turn 4 rebuilds by revert, turn 6 switches onto the spare), then checks that
every frame the client receives names only thread ids it knows, that its
requests are answered, that turns complete, and what the model saw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from tests.support.codex import needs_codex
from tests.support.live import (
    SUMMARY_ID,
    TURN_TIMEOUT,
    filler,
    finalized,
    install_engines,
    prompt_of,
    sidecar,
    sidecar_env,
    thread_ids_in,
)
from tools.client import AppServerClient
from tools.codex_home import make_codex_home
from tools.fake_model import FakeModel, Hang, Text, input_texts

pytestmark = needs_codex

SWITCH_TURNS = 6
# Opaque strings that embed the Codex thread's id (a rollout file name; a
# cursor's requestedThreadId): documented as left alone (README, "What it
# does not cover"), so the raw leak check masks them.
OPAQUE_FIELD = re.compile(r'"(path|nextCursor|backwardsCursor|turnsBackwardsCursor|itemsBackwardsCursor)":"(?:[^"\\]|\\.)*"')


@dataclasses.dataclass
class Run:
    model: FakeModel
    client: AppServerClient
    tid: str
    turn_ids: list[str]
    prompts: list[str]
    replies: list[str]
    env: dict[str, str]
    work: Path
    state: Path
    known: set[str]
    stack: contextlib.AsyncExitStack

    async def stop(self) -> None:
        """End the first sidecar (and its codex); the fake model stays up."""
        await self.stack.aclose()

    def backing(self) -> dict:
        return json.loads((self.state / "backing" / f"{self.tid}.json").read_text())


def script_texts() -> tuple[list[str], list[str]]:
    """The prompts and replies of the six turns that end in a switch."""
    return [filler(f"P{n}", n) for n in range(1, SWITCH_TURNS + 1)], [filler(f"R{n}", n + 3) for n in range(1, SWITCH_TURNS + 1)]


def fresh_env(tmp_path: Path, model: FakeModel) -> tuple[Path, Path, dict[str, str]]:
    """(work folder, state folder, sidecar environment) with fresh rebuilds."""
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    home = make_codex_home(tmp_path / "codex-home", model.base_url)
    env = sidecar_env(home, install_engines(tmp_path / "site"), state, tmp_path / "sidecar.toml", SUMMARY_ID)
    env["CODEX_SIDECAR_REBUILD"] = "fresh"
    return work, state, env


async def fork_then_turn(run: Run, params: dict, inherited: list[str], text: str) -> tuple[str, dict]:
    """Fork the client's thread, check the turns the fork got, run a turn on it."""
    forked = await run.client.request("thread/fork", params)
    fid = forked["thread"]["id"]
    run.known.add(fid)
    assert [t["id"] for t in forked["thread"].get("turns", [])] == inherited
    done = await turn(run.client, fid, text)
    await finalized(run.client, fid, done["turn"]["id"])
    return fid, done


@contextlib.asynccontextmanager
async def switched(tmp_path: Path, **thread_params) -> AsyncIterator[Run]:
    """A sidecar whose client thread has been moved onto a spare once."""
    prompts, replies = script_texts()
    with FakeModel() as model:
        work, state, env = fresh_env(tmp_path, model)
        model.script(*(Text(r) for r in replies))
        async with contextlib.AsyncExitStack() as stack:
            client = await stack.enter_async_context(sidecar(env, work))
            tid = await client.start_thread(cwd=str(work), **thread_params)
            ids = []
            for prompt in prompts:
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                ids.append(done["turn"]["id"])
            status = await finalized(client, tid, ids[-1])
            assert status["lifecycle"]["backingThreads"]["switched"] >= 1, status["lifecycle"]
            run = Run(model, client, tid, ids, prompts, replies, env, work, state, {tid}, stack)
            assert run.backing()["current"] != tid
            yield run


def frames(client: AppServerClient) -> list[dict]:
    return [json.loads(line) for line in client.received]


def foreign_ids(client: AppServerClient, known: set[str]) -> dict[str, list[str]]:
    """Thread ids the client never created that some frame names, with the frames' methods."""
    out: dict[str, list[str]] = {}
    for f in frames(client):
        ids = thread_ids_in(f, set())
        for tid in ids - known:
            out.setdefault(tid, []).append(f.get("method") or f"response#{f.get('id')}")
    return out


def hidden_ids(run: Run) -> set[str]:
    """Every Codex thread behind the client's: retired, current, spare."""
    backing = run.backing()
    return ({backing["current"], backing.get("spare"), *backing["retired"]} - {None, run.tid})


def assert_only_known_ids(run: Run, client: AppServerClient | None = None) -> None:
    client = client or run.client
    stray = foreign_ids(client, run.known)
    assert not stray, f"frames name thread ids the client never saw: {stray}; backing map {run.backing()}"
    # Nor anywhere else in a frame (a path, a parent id, a preview ...).
    leaks = {}
    for line in client.received:
        text = line.decode() if isinstance(line, bytes) else line
        text = OPAQUE_FIELD.sub(lambda m: f'"{m.group(1)}":"..."', text)
        for hidden in hidden_ids(run):
            at = text.find(hidden)
            if at >= 0:
                leaks.setdefault(hidden, []).append(text[:60] + " ... " + text[max(0, at - 150) : at + 60])
    assert not leaks, f"frames name a backing thread: {json.dumps(leaks, indent=1)[:4000]}"


def body(request: dict) -> str:
    return "\n".join(input_texts(request))


def count(request: dict, text: str) -> int:
    return body(request).count(text)


def tag(text: str) -> str:
    """The unique head of a filler text (tag plus first words)."""
    return text[:40]


def assert_no_history_twice(request: dict, texts: list[str]) -> None:
    twice = {tag(t): count(request, tag(t)) for t in texts if count(request, tag(t)) > 1}
    assert not twice, f"history twice in the model's request: {twice}"


async def turn(client: AppServerClient, tid: str, text: str) -> dict:
    done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
    assert done["turn"]["status"] == "completed", done
    return done


def last_request_with(model: FakeModel, prompt: str) -> dict:
    matching = [r for r in model.requests if prompt_of(r) == prompt]
    assert matching, f"the model never saw {prompt!r}"
    return matching[-1]


# --------------------------------------------------------------------------
# thread/fork


async def test_fork_of_a_switched_thread_without_cut_then_a_turn(tmp_path):
    async with switched(tmp_path) as run:
        forked = await run.client.request("thread/fork", {"threadId": run.tid})
        fid = forked["thread"]["id"]
        run.known.add(fid)
        assert fid != run.tid
        assert [t["id"] for t in forked["thread"].get("turns", [])] == run.turn_ids
        done = await turn(run.client, fid, "FORK-ALL next")
        await finalized(run.client, fid, done["turn"]["id"])
        read = await run.client.request("thread/read", {"threadId": fid, "includeTurns": True})
        # The parent still works too.
        await turn(run.client, run.tid, "PARENT after fork")
        assert_only_known_ids(run)
    req = last_request_with(run.model, "FORK-ALL next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[-1]) in body(req) and tag(run.replies[-1]) in body(req)
    assert [t["id"] for t in read["thread"]["turns"]][: len(run.turn_ids)] == run.turn_ids


async def test_fork_of_a_switched_thread_at_a_turn_before_the_switch(tmp_path):
    async with switched(tmp_path) as run:
        fid, done = await fork_then_turn(run, {"threadId": run.tid, "lastTurnId": run.turn_ids[1]}, run.turn_ids[:2], "FORK-2 next")
        read = await run.client.request("thread/read", {"threadId": fid, "includeTurns": True})
        assert_only_known_ids(run)
    req = last_request_with(run.model, "FORK-2 next")
    assert_no_history_twice(req, run.prompts + run.replies)
    for kept in run.prompts[:2] + run.replies[:2]:
        assert tag(kept) in body(req), f"fork lost {tag(kept)}"
    for dropped in run.prompts[2:] + run.replies[2:]:
        assert tag(dropped) not in body(req), f"fork kept {tag(dropped)}"
    assert [t["id"] for t in read["thread"]["turns"]][:2] == run.turn_ids[:2]
    assert len(read["thread"]["turns"]) == 3


async def test_fork_of_a_switched_thread_before_a_turn_after_the_switch(tmp_path):
    async with switched(tmp_path) as run:
        # Turn 6 is the switch turn: beforeTurnId=turn 6 keeps turns 1-5 (archived).
        fid, done = await fork_then_turn(run, {"threadId": run.tid, "beforeTurnId": run.turn_ids[5]}, run.turn_ids[:5], "FORK-B6 next")
        assert_only_known_ids(run)
    req = last_request_with(run.model, "FORK-B6 next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[5]) not in body(req) and tag(run.replies[5]) not in body(req)
    assert tag(run.prompts[4]) in body(req) and tag(run.replies[4]) in body(req)


async def test_fork_of_a_switched_thread_at_the_last_turn_after_a_post_switch_turn(tmp_path):
    async with switched(tmp_path) as run:
        done7 = await turn(run.client, run.tid, filler("P7", 7))
        await finalized(run.client, run.tid, done7["turn"]["id"])
        fid, done = await fork_then_turn(run, {"threadId": run.tid, "lastTurnId": run.turn_ids[5]}, run.turn_ids, "FORK-L6 next")
        assert_only_known_ids(run)
    req = last_request_with(run.model, "FORK-L6 next")
    assert_no_history_twice(req, run.prompts + run.replies + [filler("P7", 7)])
    assert "P7 " not in body(req)
    assert tag(run.prompts[5]) in body(req) and tag(run.replies[5]) in body(req)


# --------------------------------------------------------------------------
# thread/revert


async def test_revert_of_a_switched_thread_to_a_turn_before_the_switch(tmp_path):
    async with switched(tmp_path) as run:
        answer = await run.client.request("thread/revert", {"threadId": run.tid, "beforeTurnId": run.turn_ids[2]})
        assert answer is not None
        done = await turn(run.client, run.tid, "REVERT-3 next")
        await finalized(run.client, run.tid, done["turn"]["id"])
        read = await run.client.request("thread/read", {"threadId": run.tid, "includeTurns": True})
        assert_only_known_ids(run)
    req = last_request_with(run.model, "REVERT-3 next")
    assert_no_history_twice(req, run.prompts + run.replies)
    for kept in run.prompts[:2] + run.replies[:2]:
        assert tag(kept) in body(req), f"revert lost {tag(kept)}"
    for dropped in run.prompts[2:] + run.replies[2:]:
        assert tag(dropped) not in body(req), f"revert kept {tag(dropped)}"
    assert [t["id"] for t in read["thread"]["turns"]] == run.turn_ids[:2] + [done["turn"]["id"]]


async def test_revert_of_a_switched_thread_after_the_switch(tmp_path):
    async with switched(tmp_path) as run:
        p7 = filler("P7", 7)
        done7 = await turn(run.client, run.tid, p7)
        await finalized(run.client, run.tid, done7["turn"]["id"])
        await run.client.request("thread/revert", {"threadId": run.tid, "beforeTurnId": done7["turn"]["id"]})
        done = await turn(run.client, run.tid, "REVERT-7 next")
        await finalized(run.client, run.tid, done["turn"]["id"])
        read = await run.client.request("thread/read", {"threadId": run.tid, "includeTurns": True})
        assert_only_known_ids(run)
    req = last_request_with(run.model, "REVERT-7 next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert "P7 " not in body(req)
    assert tag(run.prompts[5]) in body(req) and tag(run.replies[5]) in body(req)
    assert [t["id"] for t in read["thread"]["turns"]] == run.turn_ids + [done["turn"]["id"]]


async def test_revert_of_a_switched_thread_to_the_switch_turn(tmp_path):
    """beforeTurnId = the switch turn (Codex's first turn on the spare)."""
    async with switched(tmp_path) as run:
        await run.client.request("thread/revert", {"threadId": run.tid, "beforeTurnId": run.turn_ids[5]})
        done = await turn(run.client, run.tid, "REVERT-6 next")
        await finalized(run.client, run.tid, done["turn"]["id"])
        read = await run.client.request("thread/read", {"threadId": run.tid, "includeTurns": True})
        assert_only_known_ids(run)
    req = last_request_with(run.model, "REVERT-6 next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[5]) not in body(req) and tag(run.replies[5]) not in body(req)
    assert tag(run.prompts[4]) in body(req) and tag(run.replies[4]) in body(req)
    assert [t["id"] for t in read["thread"]["turns"]] == run.turn_ids[:5] + [done["turn"]["id"]]


# --------------------------------------------------------------------------
# native compaction, interrupt


async def test_native_compaction_on_a_switched_thread(tmp_path):
    async with switched(tmp_path) as run:
        run.model.script(Text("COMPACTED SUMMARY TEXT"))
        mark = run.client.mark()
        await run.client.request("thread/compact/start", {"threadId": run.tid})
        with trio.fail_after(TURN_TIMEOUT):
            await run.client.wait_notification("turn/completed", lambda p: p.get("threadId") == run.tid, since=mark)
        n_before = len(run.model.requests)
        backing = run.backing()
        done = await turn(run.client, run.tid, "AFTER-COMPACT next")
        await finalized(run.client, run.tid, done["turn"]["id"])
        assert_only_known_ids(run)
        compaction_requests = run.model.requests[n_before - 1 : n_before]
    # The compaction ran on the current backing thread (its cache key), never the retired ones.
    assert compaction_requests[0]["prompt_cache_key"] not in backing["retired"] + [run.tid]
    # Codex rewrote its history: the next turn rebuilds from the engine's
    # assembly (lifecycle.py force_rebuild), so the native summary is not kept
    # and the history is there once.
    req = last_request_with(run.model, "AFTER-COMPACT next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[5]) in body(req) and tag(run.replies[5]) in body(req)
    assert "COMPACTED SUMMARY TEXT" not in json.dumps(req["input"])


async def test_interrupt_of_a_running_turn_on_a_switched_thread(tmp_path):
    async with switched(tmp_path) as run:
        run.model.script(Hang())
        n = len(run.model.requests)
        turn_id = await run.client.start_turn(run.tid, "HANG forever")
        await run.model.wait_for_requests_async(n + 1, timeout=TURN_TIMEOUT)
        await run.client.request("turn/interrupt", {"threadId": run.tid, "turnId": turn_id})
        done = await run.client.wait_turn_completed(run.tid, turn_id, timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "interrupted"
        await finalized(run.client, run.tid, turn_id)
        after = await turn(run.client, run.tid, "AFTER-INTERRUPT next")
        await finalized(run.client, run.tid, after["turn"]["id"])
        assert_only_known_ids(run)
    req = last_request_with(run.model, "AFTER-INTERRUPT next")
    assert_no_history_twice(req, run.prompts + run.replies + ["HANG forever"])
    assert tag(run.prompts[5]) in body(req)


# --------------------------------------------------------------------------
# unsubscribe / resume


async def test_unsubscribe_then_resume_in_the_same_process(tmp_path):
    async with switched(tmp_path) as run:
        answer = await run.client.request("thread/unsubscribe", {"threadId": run.tid})
        assert answer is not None
        with trio.move_on_after(15):  # Codex unloads after its delay; the client may see thread/closed
            await run.client.wait_notification("thread/closed", lambda p: p.get("threadId") == run.tid, timeout=15)
        resumed = await run.client.request("thread/resume", {"threadId": run.tid, "cwd": str(run.work)})
        assert resumed["thread"]["id"] == run.tid
        assert [t["id"] for t in resumed["thread"]["turns"]] == run.turn_ids
        done = await turn(run.client, run.tid, "RESUMED-SAME next")
        await finalized(run.client, run.tid, done["turn"]["id"])
        assert_only_known_ids(run)
    req = last_request_with(run.model, "RESUMED-SAME next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[5]) in body(req) and tag(run.replies[5]) in body(req)
    assert req["prompt_cache_key"] != run.tid, "the resume went back to the retired thread"


async def test_resume_in_a_fresh_sidecar_after_unsubscribe_then_a_turn(tmp_path):
    prompts = [filler(f"P{n}", n) for n in range(1, SWITCH_TURNS + 1)]
    async with switched(tmp_path) as run:
        await run.client.request("thread/unsubscribe", {"threadId": run.tid})
        await run.stop()
        async with sidecar(run.env, run.work) as again:
            resumed = await again.request("thread/resume", {"threadId": run.tid, "cwd": str(run.work)})
            assert resumed["thread"]["id"] == run.tid
            assert [t["id"] for t in resumed["thread"]["turns"]] == run.turn_ids
            done = await turn(again, run.tid, "RESUMED-FRESH next")
            await finalized(again, run.tid, done["turn"]["id"])
            assert_only_known_ids(run, again)
        assert_only_known_ids(run)
    req = last_request_with(run.model, "RESUMED-FRESH next")
    assert_no_history_twice(req, prompts + run.replies)
    assert tag(prompts[5]) in body(req) and tag(run.replies[5]) in body(req)


# --------------------------------------------------------------------------
# names, list, archive


async def test_name_set_before_and_after_a_switch_then_list(tmp_path):
    prompts, replies = script_texts()
    with FakeModel() as model:
        work, _, env = fresh_env(tmp_path, model)
        model.script(*(Text(r) for r in replies))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            ids = []
            for n, prompt in enumerate(prompts, 1):
                if n == 2:
                    await client.request("thread/name/set", {"threadId": tid, "name": "before-switch"})
                done = await turn(client, tid, prompt)
                ids.append(done["turn"]["id"])
            status = await finalized(client, tid, ids[-1])
            assert status["lifecycle"]["backingThreads"]["switched"] >= 1
            listed_before = await client.request("thread/list", {})
            read_before = await client.request("thread/read", {"threadId": tid})
            await client.request("thread/name/set", {"threadId": tid, "name": "after-switch"})
            listed_after = await client.request("thread/list", {})
            read_after = await client.request("thread/read", {"threadId": tid})
            ids_seen: set[str] = set()
            for f in frames(client):
                thread_ids_in(f, ids_seen)
    assert ids_seen == {tid}, ids_seen
    assert [t["id"] for t in listed_before["data"]] == [tid]
    assert listed_before["data"][0].get("name") == "before-switch", listed_before["data"][0]
    assert read_before["thread"].get("name") == "before-switch"
    assert [t["id"] for t in listed_after["data"]] == [tid]
    assert listed_after["data"][0].get("name") == "after-switch", listed_after["data"][0]
    assert read_after["thread"].get("name") == "after-switch"


async def test_archive_list_unarchive_a_switched_thread(tmp_path):
    async with switched(tmp_path) as run:
        c = run.client
        listed = await c.request("thread/list", {})
        assert [t["id"] for t in listed["data"]] == [run.tid]
        await c.request("thread/archive", {"threadId": run.tid})
        live = await c.request("thread/list", {})
        archived = await c.request("thread/list", {"archived": True})
        unarchived = await c.request("thread/unarchive", {"threadId": run.tid})
        live_again = await c.request("thread/list", {})
        archived_again = await c.request("thread/list", {"archived": True})
        resumed = await c.request("thread/resume", {"threadId": run.tid, "cwd": str(run.work)})
        done = await turn(c, run.tid, "UNARCHIVED next")
        await finalized(c, run.tid, done["turn"]["id"])
        assert_only_known_ids(run)
    assert [t["id"] for t in live["data"]] == [], live
    assert [t["id"] for t in archived["data"]] == [run.tid], archived
    assert unarchived["thread"]["id"] == run.tid
    assert [t["id"] for t in live_again["data"]] == [run.tid], live_again
    assert [t["id"] for t in archived_again["data"]] == [], archived_again
    assert [t["id"] for t in resumed["thread"]["turns"]] == run.turn_ids
    req = last_request_with(run.model, "UNARCHIVED next")
    assert_no_history_twice(req, run.prompts + run.replies)
    assert tag(run.prompts[5]) in body(req)


# --------------------------------------------------------------------------
# Deeper: rebuilds after the client's own fork / revert, an interrupted switch turn


async def test_turns_on_a_fork_of_a_switched_thread_until_the_fork_rebuilds(tmp_path):
    async with switched(tmp_path) as run:
        forked = await run.client.request("thread/fork", {"threadId": run.tid})
        fid = forked["thread"]["id"]
        run.known.add(fid)
        fork_prompts = [filler(f"F{n}", n) for n in (7, 8, 9)]
        fork_ids = []
        for p in fork_prompts:
            done = await turn(run.client, fid, p)
            fork_ids.append(done["turn"]["id"])
        status = await finalized(run.client, fid, fork_ids[-1])
        records = (await run.client.request("sidecar/inspect", {"threadId": fid}))["turns"]
        read = await run.client.request("thread/read", {"threadId": fid, "includeTurns": True})
        assert_only_known_ids(run)
    assert any(r["rebuilt"] for r in records), records  # the fork rebuilt at least once
    assert [t["id"] for t in read["thread"]["turns"]] == run.turn_ids + fork_ids
    previous = [run.prompts[5], *fork_prompts]
    for k, p in enumerate(fork_prompts):
        req = last_request_with(run.model, p)
        assert_no_history_twice(req, run.prompts + run.replies + fork_prompts)
        assert tag(previous[k]) in body(req), f"{p[:3]}: the fork lost the turn before"
    del status


async def test_revert_before_the_switch_then_turns_until_the_next_switch(tmp_path):
    async with switched(tmp_path) as run:
        await run.client.request("thread/revert", {"threadId": run.tid, "beforeTurnId": run.turn_ids[3]})
        more = [filler(f"Q{n}", n) for n in range(4, 9)]
        ids = list(run.turn_ids[:3])
        for p in more:
            done = await turn(run.client, run.tid, p)
            ids.append(done["turn"]["id"])
        status = await finalized(run.client, run.tid, ids[-1])
        read = await run.client.request("thread/read", {"threadId": run.tid, "includeTurns": True})
        records = (await run.client.request("sidecar/inspect", {"threadId": run.tid}))["turns"]
        assert_only_known_ids(run)
    assert [t["id"] for t in read["thread"]["turns"]] == ids
    assert sum(r["rebuilt"] for r in records) >= 3, records
    gone = run.prompts[3:] + run.replies[3:]
    for p in more:
        req = last_request_with(run.model, p)
        assert_no_history_twice(req, run.prompts + run.replies + more)
        for g in gone:
            assert tag(g) not in body(req), f"{p[:3]}: the reverted {tag(g)} is back"
    last = last_request_with(run.model, more[-1])
    assert tag(more[-2]) in body(last)
    del status


async def test_interrupting_the_switch_turn_then_a_turn(tmp_path):
    prompts, replies = script_texts()
    with FakeModel() as model:
        work, state, env = fresh_env(tmp_path, model)
        model.script(*(Text(r) for r in replies[:5]), Hang())
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            ids = []
            for p in prompts[:5]:
                ids.append((await turn(client, tid, p))["turn"]["id"])
            await finalized(client, tid, ids[-1])
            n = len(model.requests)
            hung = await client.start_turn(tid, prompts[5])
            await model.wait_for_requests_async(n + 1, timeout=TURN_TIMEOUT)
            await client.request("turn/interrupt", {"threadId": tid, "turnId": hung})
            done = await client.wait_turn_completed(tid, hung, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "interrupted"
            await finalized(client, tid, hung)
            status = await client.request("sidecar/status")
            after = await turn(client, tid, "AFTER-INTERRUPTED-SWITCH")
            await finalized(client, tid, after["turn"]["id"])
            read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
            ids_seen: set[str] = set()
            for f in frames(client):
                thread_ids_in(f, ids_seen)
        backing = json.loads((state / "backing" / f"{tid}.json").read_text())
    assert status["lifecycle"]["backingThreads"]["switched"] >= 1, status["lifecycle"]
    assert ids_seen == {tid}
    assert [t["id"] for t in read["thread"]["turns"]] == ids + [hung, after["turn"]["id"]]
    req = last_request_with(model, "AFTER-INTERRUPTED-SWITCH")
    assert_no_history_twice(req, prompts + replies)
    assert tag(prompts[5]) in body(req) and tag(prompts[4]) in body(req)
    assert backing["current"] != tid and not backing["pending"]


async def test_thread_list_read_states_are_keyed_by_the_client_thread(tmp_path):
    """thread/list's ``readStates`` map is keyed by thread id; the entry of a
    switched thread is rewritten to the client's id, the key is not."""
    async with switched(tmp_path) as run:
        listed = await run.client.request("thread/list", {})
    assert [t["id"] for t in listed["data"]] == [run.tid]
    keys = set((listed.get("readStates") or {}).keys())
    assert keys <= {run.tid}, f"readStates keyed by {keys - {run.tid}} (backing map current={run.backing()['current']})"