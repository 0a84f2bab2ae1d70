"""A turn that overflows Codex's context window (``sidecar/lifecycle/overflow.py``).

The fake app-server fails a turn whose model input is over
``contextWindowChars`` as codex 0.169.0 does (``thread/status/changed``
systemError, ``error`` ``contextWindowExceeded``, ``turn/completed``
failed). With an engine that owns compaction the sidecar has it compact and
retries the turn once on a rebuilt thread, the retry shown to the client as
the turn it started; in every other case Codex's own frames reach the
client byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from engines import AssembleResult, CompactionDetails, CompactionSummaryMessage, CompactResult, EngineInfo
from engines.testkit import RecordingEngine
from sidecar.lifecycle import LifecycleOptions
from sidecar.projection import CONTEXT_HEADER, REQUEST_HEADER
from tests.support.lifecycle import Run, calls_for, fields, make_engine, records_with, roles_texts, wait_until

WINDOW = 2500
BIG = "X" * 1800
NEXT = "Y" * 800
SUMMARY = "SUMMARY of what came before"


class Compacting(RecordingEngine):
    """Owns compaction: assembles the whole mirrored history until it
    compacts, then one summary in its place."""

    def __init__(self, owns: bool = True) -> None:
        super().__init__(info=EngineInfo(id="compacting", name="compacting", version="0", owns_compaction=owns))
        self.compacted = False

    async def handle_compact(self, params: Any) -> CompactResult:
        self.compacted = True
        return CompactResult(ok=True, compacted=True, result=CompactionDetails(summary=SUMMARY, first_kept_entry_id=None, tokens_before=700, tokens_after=10, details={}))

    async def handle_assemble(self, params: Any) -> AssembleResult:
        if self.compacted:
            return AssembleResult(messages=[CompactionSummaryMessage(summary=SUMMARY, tokens_before=700, timestamp=0)], estimated_tokens=10)
        return AssembleResult(messages=list(params.messages), estimated_tokens=len(params.messages))


def turn_frames(run: Run, method: str) -> list[dict[str, Any]]:
    return [f for f in run.frames() if f.get("method") == method]


def sent_by_codex(run: Run, method: str) -> list[bytes]:
    return [line for line in run.sent_log.read_bytes().splitlines() if json.loads(line).get("method") == method]


def received_by_client(run: Run, method: str) -> list[bytes]:
    return [line for line in run.client.lines if json.loads(line).get("method") == method]


async def overflowing_turn(run: Run, tid: str) -> dict[str, Any]:
    """One turn that fits, then one whose input is over the window, finalised
    (a retry is finalised under its own turn id: Codex's)."""
    await run.turn(tid, BIG)
    turn = await run.turn(tid, NEXT, settle=False)
    session = run.session(tid)

    def done() -> bool:
        ids = {turn["id"], (session.stats.get("lastOverflow") or {}).get("retryTurnId")}
        return (session.stats.get("lastFinalize") or {}).get("turnId") in ids and session.settled

    await wait_until(done, what="the overflowing turn finalised")
    return turn


async def test_an_engine_that_owns_compaction_compacts_and_the_turn_completes_as_the_one_turn_the_client_started(tmp_path, sidecar, logs):
    engine = Compacting()
    async with sidecar(tmp_path, engine, script={"contextWindowChars": WINDOW}) as run:
        tid = await run.start_thread()
        turn = await overflowing_turn(run, tid)
        starts = run.child_turn_starts(tid)
        stats = run.session(tid).stats["lastOverflow"]
        mirrored = roles_texts(run.mirror_messages(tid))
        frames = run.frames()
        inspected = run.lifecycle.inspect(tid)
    first_id = turn["id"]
    # Codex saw three turn/starts: the first turn, the attempt that overflowed, the retry.
    assert len(starts) == 3
    retry_sent = json.dumps(starts[2]["params"])
    assert SUMMARY in retry_sent and BIG not in retry_sent and NEXT in retry_sent
    assert len(engine.calls_to("compact")) == 1
    assert calls_for(engine, "compact", tid)[0].force is True
    # The client: one turn, completed, under the id it was given; no error, no failed turn.
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    assert stats["retried"] is True and stats["turnId"] == first_id and stats["retryTurnId"] != first_id
    assert not [f for f in frames if f.get("method") == "error"]
    assert not [f for f in frames if json.dumps(f).count(json.dumps(stats["retryTurnId"]))]  # the retry's id never shows
    assert [f["params"]["turn"]["id"] for f in frames if f.get("method") == "turn/started"][-1] == first_id
    inputs = [f for f in frames if f.get("method") == "item/completed" and f["params"]["item"]["type"] == "userMessage" and f["params"]["turnId"] == first_id]
    assert len(inputs) == 1  # the client's input once, not its retried copy too
    # Exactly once: the failed attempt is neither mirrored nor handed to after_turn.
    assert [t for r, t in mirrored if r == "user"] == [BIG, NEXT]
    assert len(engine.calls_to("after_turn")) == 2
    assert records_with(logs, "turn retried after the engine made room")
    assert [(r["turnId"], r.get("attempt")) for r in inspected][-1] == (stats["retryTurnId"], 1)


async def test_a_turn_request_naming_the_first_attempt_reaches_the_retry(tmp_path, sidecar):
    """turn/interrupt with the id the client has stops the retry Codex runs."""
    engine = Compacting()
    async with sidecar(tmp_path, engine, script={"contextWindowChars": 3000}) as run:
        tid = await run.start_thread()
        await run.turn(tid, BIG)
        rid, line = run.turn_start_line(tid, "HOLD " + "Z" * 1800)
        await run.send(line)
        first_id = (await run.wait_response(rid))["result"]["turn"]["id"]
        await run.wait_frame(lambda f: f.get("method") == "turn/started" and f["params"]["turn"]["id"] == first_id)
        with trio.fail_after(10):
            while len(run.child_turn_starts(tid)) < 3:
                await trio.sleep(0.02)
        interrupt = await run.request("turn/interrupt", {"threadId": tid, "turnId": first_id})
        done = await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == first_id)
        retry_id = run.session(tid).stats["lastOverflow"]["retryTurnId"]
        sent = run.received("turn/interrupt")
    assert "result" in interrupt
    assert sent[0]["params"]["turnId"] == retry_id
    assert done["params"]["turn"]["id"] == first_id and done["params"]["turn"]["status"] == "interrupted"


async def test_an_engine_that_does_not_own_compaction_leaves_codex_s_error_unchanged(tmp_path, sidecar):
    engine = Compacting(owns=False)
    async with sidecar(tmp_path, engine, script={"contextWindowChars": WINDOW}) as run:
        tid = await run.start_thread()
        turn = await overflowing_turn(run, tid)
        starts = run.child_turn_starts(tid)
        pairs = [(sent_by_codex(run, m), received_by_client(run, m)) for m in ("error", "turn/completed")]
        mirrored = roles_texts(run.mirror_messages(tid))
    assert turn["completed"]["params"]["turn"]["status"] == "failed"
    assert turn["completed"]["params"]["turn"]["error"]["codexErrorInfo"] == "contextWindowExceeded"
    assert len(starts) == 2 and not engine.calls_to("compact")
    for sent, received in pairs:
        assert sent == received  # byte for byte
    assert [t for r, t in mirrored if r == "user"] == [BIG, NEXT]


async def test_a_retry_that_overflows_too_reaches_the_client_as_the_turn_s_error_and_is_not_retried_again(tmp_path, sidecar, logs):
    engine = Compacting()
    script = {"turns": [{}, {"status": "failed", "codexErrorInfo": "contextWindowExceeded"}, {"status": "failed", "codexErrorInfo": "contextWindowExceeded"}]}
    async with sidecar(tmp_path, engine, script=script) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        turn = await run.turn(tid, "two", settle=False)
        await wait_until(lambda: run.session(tid).settled and (run.session(tid).stats.get("lastOverflow") or {}).get("reason") == "retry-overflowed", what="the retry finalised")
        await trio.sleep(0.2)  # a second retry, if there were one, would have been sent by now
        starts = run.child_turn_starts(tid)
        errors = turn_frames(run, "error")
        completed = [f for f in turn_frames(run, "turn/completed") if f["params"]["turn"]["status"] == "failed"]
        mirrored = roles_texts(run.mirror_messages(tid))
    assert len(starts) == 3 and len(engine.calls_to("compact")) == 1
    # One failed turn and one error, both under the id the client has.
    assert [f["params"]["turn"]["id"] for f in completed] == [turn["id"]]
    assert [f["params"]["turnId"] for f in errors] == [turn["id"]]
    assert completed[0]["params"]["turn"]["error"]["codexErrorInfo"] == "contextWindowExceeded"
    assert [t for r, t in mirrored if r == "user"] == ["one", "two"]
    assert len(engine.calls_to("after_turn")) == 2
    assert records_with(logs, "the retried turn overflowed the context window too")


async def test_a_compaction_that_raises_fails_open_with_codex_s_error(tmp_path, sidecar, logs):
    engine = Compacting()
    engine.fail("compact", RuntimeError("no room"))
    async with sidecar(tmp_path, engine, script={"contextWindowChars": WINDOW}) as run:
        tid = await run.start_thread()
        turn = await overflowing_turn(run, tid)
        starts = run.child_turn_starts(tid)
        pairs = [(sent_by_codex(run, m), received_by_client(run, m)) for m in ("error", "turn/completed")]
        mirrored = roles_texts(run.mirror_messages(tid))
    assert turn["completed"]["params"]["turn"]["status"] == "failed"
    assert len(starts) == 2  # no retry
    for sent, received in pairs:
        assert sent == received
    assert [t for r, t in mirrored if r == "user"] == [BIG, NEXT]
    assert len(engine.calls_to("after_turn")) == 2
    (warning,) = records_with(logs, "could not be retried; Codex's error goes to the client")
    assert fields(warning)["reason"] == "compaction-failed"


async def test_a_compaction_past_the_deadline_fails_open_with_codex_s_error(tmp_path, sidecar, logs):
    engine = Compacting()
    engine.hang("compact")
    options = LifecycleOptions(engine_deadline=0.5)
    async with sidecar(tmp_path, engine, options=options, script={"contextWindowChars": WINDOW}) as run:
        tid = await run.start_thread()
        turn = await overflowing_turn(run, tid)
        starts = run.child_turn_starts(tid)
        errors = turn_frames(run, "error")
    assert turn["completed"]["params"]["turn"]["status"] == "failed"
    assert len(starts) == 2
    assert [f["params"]["error"]["codexErrorInfo"] for f in errors] == ["contextWindowExceeded"]
    (failed,) = records_with(logs, "context engine compaction failed")
    assert fields(failed)["error"] == "TooSlowError"


async def test_an_engine_that_compacts_nothing_leaves_codex_s_error(tmp_path, sidecar, logs):
    engine = make_engine(owns_compaction=True)  # the recording engine's compact: ok, nothing compacted
    async with sidecar(tmp_path, engine, script={"contextWindowChars": WINDOW}) as run:
        tid = await run.start_thread()
        turn = await overflowing_turn(run, tid)
        starts = run.child_turn_starts(tid)
    assert turn["completed"]["params"]["turn"]["status"] == "failed"
    assert len(starts) == 2 and len(engine.calls_to("compact")) == 1
    (warning,) = records_with(logs, "could not be retried")
    assert fields(warning)["reason"] == "nothing-compacted"


RID = "codex-" + "ef56" * 10
OPENCLAW_ONLY = "[thinking content omitted]"


def hooks(rid: str) -> dict:
    command = f"exec 'node' 'entry.js' 'hooks' 'relay' '--provider' 'codex' '--relay-id' '{rid}' '--generation' 'g1' '--event' 'permission_request'"
    return {"config": {"features.hooks": True, "hooks.PermissionRequest": [{"hooks": [{"type": "command", "command": command}]}]}}


def continuity(history: list[tuple[str, str]], prompt: str) -> str:
    """OpenClaw's continuity projection of ``history`` for ``prompt`` (with a
    placeholder only OpenClaw's renderer writes)."""
    body = "\n\n".join(f"[{role}]\n{OPENCLAW_ONLY + chr(10) if role == 'assistant' else ''}{text}" for role, text in history)
    return f"{CONTEXT_HEADER}\nQuoted reference data.\n\n<conversation_context>\n{body}\n</conversation_context>\n\n{REQUEST_HEADER}\n{prompt}"


async def test_a_new_thread_s_first_turn_with_openclaw_s_continuity_is_retried_with_the_engine_s_assembly(tmp_path, sidecar):
    """OpenClaw's continuity on a session's new thread is cut and the engine
    assembles in its place; when that overflows, the retry starts from the
    same cut input, not from OpenClaw's block again."""
    async with sidecar(tmp_path, Compacting(), name="run1") as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, BIG)
        await run.turn(t1, "B" * 1800)
        history = roles_texts(run.mirror_messages(RID))
    async with sidecar(tmp_path, Compacting(), name="run2", script={"contextWindowChars": WINDOW}) as run:
        t2 = await run.start_thread(**hooks(RID))
        turn = await run.turn(t2, continuity(history, "Which letters?"), settle=False)
        await wait_until(lambda: run.session(t2).settled and "lastFinalize" in run.session(t2).stats, what="finalised")
        attempt, retry = run.child_turn_starts(t2)
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    sent = json.dumps(retry["params"])
    assert SUMMARY in sent and "Which letters?" in sent
    assert OPENCLAW_ONLY not in sent and BIG not in sent
    assert OPENCLAW_ONLY not in json.dumps(attempt["params"])  # the first attempt had it cut too


async def test_a_turn_start_sent_while_the_engine_compacts_joins_the_retry_under_the_id_the_client_has(tmp_path, sidecar):
    """The client thinks its turn runs: a turn/start it sends meanwhile waits
    for the retry and joins it, as it would have joined the turn."""
    engine = Compacting()
    release = trio.Event()
    engine.hang("compact", release)
    async with sidecar(tmp_path, engine, script={"contextWindowChars": 3000}) as run:
        tid = await run.start_thread()
        await run.turn(tid, BIG)
        rid, line = run.turn_start_line(tid, "HOLD " + "Z" * 1800)
        await run.send(line)
        first_id = (await run.wait_response(rid))["result"]["turn"]["id"]
        await engine.wait_for_call("compact")
        joined_rid, joined = run.turn_start_line(tid, "RELEASE and also this")
        await run.send(joined)
        await trio.sleep(0.1)
        assert len(run.child_turn_starts(tid)) == 2  # the join waits for the retry
        release.set()
        answer = await run.wait_response(joined_rid)
        done = await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == first_id)
        await wait_until(lambda: run.session(tid).settled and len(engine.calls_to("after_turn")) == 2, what="finalised")
        mirrored = roles_texts(run.mirror_messages(tid))
    assert answer["result"]["turn"]["id"] == first_id
    assert done["params"]["turn"]["status"] == "completed"
    assert [t for r, t in mirrored if r == "user"] == [BIG, "HOLD " + "Z" * 1800, "RELEASE and also this"]
