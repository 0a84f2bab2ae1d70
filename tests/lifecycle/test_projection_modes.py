"""Projection modes (``delta``, ``epoch``) against the fake app-server.

What these tests look at is what each turn's model would see. The fake
(``tests/children/fake_codex.py``) logs, per accepted ``turn/start``, the
turns its thread holds (each with the ``additionalContext`` and ``input`` it
was started with) plus the new turn's own, so "the model saw X" is read from
the fake, not inferred from the sidecar's ledger. Its ``thread/revert`` and
``thread/turns/list`` behave like Codex 0.169.0's (notification order,
errors, legacy threads refused).

Engines are ``RecordingEngine``s with a scripted ``assemble``:

* identity: the mirrored history unchanged;
* recall: the history plus one retrieved snippet (a user message) at the end;
* summary: everything but the newest ``keep`` messages replaced by one
  ``CompactionSummaryMessage``;
* epoch: the history, with ``context_projection(mode="thread_bootstrap",
  epoch=...)``.

No codex binary, no timing assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines import AssembleResult, CompactionSummaryMessage, ContextProjection, EngineInfo, UserMessage
from engines.testkit import RecordingEngine
from sidecar.archive import archive_path, unwrap_cursor
from sidecar.lifecycle import Lifecycle, LifecycleOptions
from sidecar.projection import ADDITIONAL_CONTEXT_KEY, CONTEXT_HEADER, CONTEXT_KEY

from .harness import child, proxied
from .test_lifecycle import Run, calls_for, fields, frame, logs, records_with, roles_texts, wait_until  # noqa: F401  (logs: fixture)

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = f"turn/start.additionalContext[{CONTEXT_KEY}]"
REVERT_NOISE = ("thread/reverted", "thread/readState/changed")
LONG_REPLY = "Reply {n}. " + "All right, noted; " * 25  # ~450 characters


# --------------------------------------------------------------------------
# A sidecar over the fake, with the model's view logged


@dataclass
class ModesRun(Run):
    model_log: Path = Path("/nonexistent")
    store_path: Path = Path("/nonexistent")

    def store_turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The turns the fake Codex itself holds for the thread."""
        return json.loads(self.store_path.read_text())[thread_id]["turns"]

    def seen(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Per accepted turn/start: {threadId, turnId, held: [...], additionalContext, input}."""
        if not self.model_log.exists():
            return []
        out = [json.loads(line) for line in self.model_log.read_text().splitlines() if line.strip()]
        return [s for s in out if thread_id is None or s["threadId"] == thread_id]

    def child_lines(self, method: str) -> list[bytes]:
        return [line for line in self.received_lines() if json.loads(line).get("method") == method]

    def child_methods(self) -> list[str]:
        return [m.get("method") for m in self.received() if "method" in m]

    async def turn_ok(self, thread_id: str, text: str, **params: Any) -> str:
        done = await self.turn(thread_id, text, **params)
        assert done["completed"]["params"]["turn"]["status"] == "completed"
        return done["id"]

    async def status(self) -> dict[str, Any]:
        resp = await self.request("sidecar/status")
        return resp["result"]["lifecycle"]


@asynccontextmanager
async def modes_sidecar(
    tmp_path: Path,
    engine: RecordingEngine,
    mode: str = "delta",
    *,
    options: LifecycleOptions | None = None,
    script: dict[str, Any] | None = None,
    state: str = "state",
    name: str = "run",
    store: str = "codex-store.json",
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    state_dir = tmp_path / state
    received_log = tmp_path / f"{name}-received.jsonl"
    sent_log = tmp_path / f"{name}-sent.jsonl"
    model_log = tmp_path / f"{name}-model.jsonl"
    env = {
        "FAKE_CODEX_LOG": str(received_log),
        "FAKE_CODEX_SENT": str(sent_log),
        "FAKE_CODEX_STORE": str(tmp_path / store),
        "FAKE_CODEX_MODEL": str(model_log),
    }
    if script is not None:
        script_path = tmp_path / f"{name}-script.json"
        script_path.write_text(json.dumps(script))
        env["FAKE_CODEX_SCRIPT"] = str(script_path)
    async with proxied(child("fake_codex.py"), env=env) as client:
        lifecycle = Lifecycle(client.proxy, engine, state_dir, options or LifecycleOptions(engine_deadline=5.0, projection_mode=mode, stale_floor_chars=0))
        lifecycle.install(client.proxy.hooks)
        run = ModesRun(client, lifecycle, engine, state_dir, received_log, sent_log, model_log=model_log, store_path=tmp_path / store)
        resp = await run.request(
            "initialize",
            {"clientInfo": {"name": "modes_tests", "title": "projection mode tests", "version": "0"}, "capabilities": {"experimentalApi": True}},
        )
        assert "result" in resp
        await run.send(frame({"method": "initialized"}))
        yield run


# --------------------------------------------------------------------------
# Engines


def make_engine(assemble: Callable[[Any], AssembleResult] | None = None) -> RecordingEngine:
    engine = RecordingEngine(info=EngineInfo(id="modes", name="Projection modes", version="1"))
    if assemble is not None:
        engine.set_result("assemble", assemble)
    return engine


def identity() -> RecordingEngine:
    return make_engine()  # RecordingEngine assembles the messages unchanged


def recall(snippet: Callable[[str], str]) -> RecordingEngine:
    """History unchanged plus one snippet (keyed by the prompt) appended."""
    return make_engine(lambda p: AssembleResult(messages=[*p.messages, UserMessage(content=snippet(p.prompt), timestamp=0)], estimated_tokens=1))


def summary_text(count: int) -> str:
    return f"SUMMARY of the {count} earliest messages"


def summarising(keep: int = 2, addition: str | None = None) -> RecordingEngine:
    """Everything but the newest ``keep`` messages replaced by one summary."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) > keep:
            old = len(messages) - keep
            summary = CompactionSummaryMessage(summary=summary_text(old), tokens_before=old * 10, timestamp=0)
            messages = [summary, *messages[old:]]
        return AssembleResult(messages=messages, estimated_tokens=1, system_prompt_addition=addition)

    return make_engine(assemble)


def epochs(per: int = 4) -> RecordingEngine:
    """History unchanged; a new projection epoch every ``per`` messages."""
    return make_engine(
        lambda p: AssembleResult(
            messages=list(p.messages),
            estimated_tokens=1,
            context_projection=ContextProjection(mode="thread_bootstrap", epoch=f"e{len(p.messages) // per}", fingerprint="fp"),
        )
    )


# --------------------------------------------------------------------------
# Reading what went where


def context_of(turn_start_or_seen: dict[str, Any]) -> str | None:
    """The projected context block of a child turn/start (or a fake's model record)."""
    params = turn_start_or_seen.get("params", turn_start_or_seen)
    extra = params.get("additionalContext") or {}
    entry = extra.get(CONTEXT_KEY)
    return entry["value"] if entry else None


def input_of(line: bytes) -> bytes:
    """The raw bytes of a turn/start line's ``"input":[...]`` member."""
    obj = json.loads(line)
    raw = json.dumps(obj["params"]["input"], separators=(",", ":"), ensure_ascii=False).encode()
    assert b'"input":' + raw in line
    return raw


def client_turn_starts(run: ModesRun) -> list[bytes]:
    return [line for line in run.sent if json.loads(line).get("method") == "turn/start"]


def assert_client_unaware(run: ModesRun, thread_id: str) -> None:
    """Every frame the client got is about its own thread and its own requests:
    no revert noise, no response to a request it did not send."""
    sent_ids = {json.loads(line).get("id") for line in run.sent}
    for f in run.frames():
        if "method" not in f:
            assert f.get("id") in sent_ids, f"response to a request the client never sent: {f}"
            continue
        assert f["method"] not in REVERT_NOISE, f
        params = f.get("params") or {}
        if f["method"] == "thread/status/changed":
            assert params["status"]["type"] != "notLoaded", f
        if "threadId" in params:
            assert params["threadId"] == thread_id, f


def inspect_records(run: ModesRun, thread_id: str) -> list[dict[str, Any]]:
    assert run.lifecycle is not None
    return run.lifecycle.inspect(thread_id)


# --------------------------------------------------------------------------
# delta


async def test_delta_identity_never_projects_and_never_reverts(tmp_path):
    async with modes_sidecar(tmp_path, identity()) as run:
        tid = await run.start_thread()
        for n in range(1, 5):
            await run.turn_ok(tid, f"Prompt {n}", additionalContext={"client_key": {"kind": "application", "value": f"client {n}"}} if n == 3 else None)
        status = await run.status()

    # The child got exactly the client's turn/start lines (the None additionalContext included).
    assert run.child_lines("turn/start") == client_turn_starts(run)
    assert "thread/revert" not in run.child_methods()
    assert "thread/turns/list" not in run.child_methods()
    seen = run.seen(tid)
    assert [context_of(s) for s in seen] == [None] * 4
    assert seen[2]["additionalContext"] == {"client_key": {"kind": "application", "value": "client 3"}}
    # The model sees Codex's own history: every earlier turn, raw, once.
    assert [h["turnId"] for h in seen[3]["held"]] == [s["turnId"] for s in seen[:3]]
    assert status["rebuilds"] == 0
    records = inspect_records(run, tid)
    assert [r["mode"] for r in records] == ["delta"] * 4
    assert [r["injected"]["channels"] for r in records] == [[]] * 4
    assert [r["rebuilt"] for r in records] == [False] * 4
    assert [r["projected"] for r in records] == [False] * 4


async def test_delta_appending_engine_projects_only_the_new_tail_in_additional_context(tmp_path):
    engine = recall(lambda prompt: f"RECALL<{prompt[-8:]}>")  # small beside a turn: stays within the slack
    async with modes_sidecar(tmp_path, engine, script={"defaultReply": LONG_REPLY}) as run:
        tid = await run.start_thread()
        prompts = [f"Question number {n}: what about topic {n}?" for n in range(1, 6)]
        for prompt in prompts:
            await run.turn_ok(tid, prompt)

    starts = run.child_lines("turn/start")
    clients = client_turn_starts(run)
    assert len(starts) == len(clients) == 5
    for n, (child_line, client_line) in enumerate(zip(starts, clients)):
        # The input items are the client's, byte for byte; the context is never in them.
        assert input_of(child_line) == input_of(client_line)
        assert CONTEXT_HEADER.encode() not in input_of(child_line)
        # Only this turn's snippet, nothing the thread already holds.
        context = context_of(json.loads(child_line))
        assert context is not None and context.startswith(CONTEXT_HEADER)
        assert f"RECALL<{prompts[n][-8:]}>" in context
        for other in prompts:
            assert f"RECALL<{other[-8:]}>" not in context or other == prompts[n]
            assert f"[user]\n{other}" not in context
        assert "Reply" not in context
        # The rest of the request is the client's.
        child_params, client_params = json.loads(child_line)["params"], json.loads(client_line)["params"]
        assert set(child_params["additionalContext"]) == {CONTEXT_KEY}
        assert {k: v for k, v in child_params.items() if k != "additionalContext"} == client_params
    assert "thread/revert" not in run.child_methods()
    # What the last turn's model sees: every turn held once, each with its own snippet.
    last = run.seen(tid)[-1]
    assert [len(h["input"]) for h in last["held"]] == [1] * 4
    assert [f"RECALL<{p[-8:]}>" in context_of(h) for h, p in zip(last["held"], prompts)] == [True] * 4
    records = inspect_records(run, tid)
    assert [r["injected"]["channels"] for r in records] == [[CHANNEL]] * 5
    assert [r["rebuilt"] for r in records] == [False] * 5
    assert [r["staleHeld"] for r in records] == [0, 1, 2, 3, 4]  # the old snippets stay, within the slack


async def test_delta_summary_rebuilds_in_place_and_the_client_never_notices(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "P1 apples")
        t2 = await run.turn_ok(tid, "P2 bananas")
        status_before = await run.status()
        t3 = await run.turn_ok(tid, "P3 cherries")
        status_after_first = await run.status()
        t4 = await run.turn_ok(tid, "P4 dates")
        status_after_second = await run.status()
        # thread/read answers for the client's thread with every turn, the
        # ones the rebuilds took out of Codex included.
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})

    assert status_before["rebuilds"] == 0
    assert status_after_first["rebuilds"] == 1 and status_after_first["threads"][tid]["rebuilds"] == 1
    assert status_after_second["rebuilds"] == 2

    received = run.received()
    kinds = [(m.get("method"), (m.get("params") or {}).get("beforeTurnId")) for m in received if m.get("method") in ("turn/start", "thread/revert")]
    # Turn 3 is the first whose assembly replaces held messages: a revert to the
    # first turn comes before its turn/start; turn 4 reverts to turn 3 (the first since that rebuild).
    assert kinds == [("turn/start", None), ("turn/start", None), ("thread/revert", t1), ("turn/start", None), ("thread/revert", t3), ("turn/start", None)]
    reverts = [m for m in received if m.get("method") == "thread/revert"]
    assert all(r["params"] == {"threadId": tid, "beforeTurnId": r["params"]["beforeTurnId"]} for r in reverts)

    seen = run.seen(tid)
    assert [s["turnId"] for s in seen] == [t1, t2, t3, t4]
    # Turns 1 and 2: nothing dropped yet, nothing projected.
    assert context_of(seen[0]) is None and context_of(seen[1]) is None
    # Turn 3: the thread was emptied to its framing; the whole assembly came with the turn.
    assert seen[2]["held"] == []
    c3 = context_of(seen[2])
    assert c3 is not None
    assert f"[summary]\n{summary_text(2)}" in c3
    assert "[user]\nP2 bananas" in c3 and "[assistant]\nReply 2." in c3
    assert "P1 apples" not in c3 and "Reply 1." not in c3
    assert seen[2]["input"] == [{"type": "text", "text": "P3 cherries", "text_elements": []}]
    # Turn 4: reverted to before turn 3, so rebuild 1's block went with it.
    assert seen[3]["held"] == []
    c4 = context_of(seen[3])
    assert f"[summary]\n{summary_text(4)}" in c4 and summary_text(2) not in c4
    assert "[user]\nP3 cherries" in c4 and "[assistant]\nReply 3." in c4

    # The client: its own turn frames arrived, none of the revert's, no stray responses.
    assert_client_unaware(run, tid)
    frames = run.frames()
    for turn_id in (t1, t2, t3, t4):
        for method in ("turn/started", "turn/completed"):
            assert sum(1 for f in frames if f.get("method") == method and f["params"]["turn"]["id"] == turn_id) == 1
        assert any(f.get("method") == "item/completed" and f["params"]["turnId"] == turn_id for f in frames)
    # The client's view of the user input never carries the projection.
    users = [f["params"]["item"] for f in frames if f.get("method") == "item/completed" and f["params"]["item"]["type"] == "userMessage"]
    assert not any(CONTEXT_HEADER in json.dumps(u) for u in users)
    read_turns = read["result"]["thread"]["turns"]
    assert [t["id"] for t in read_turns] == [t1, t2, t3, t4]
    assert [t["id"] for t in run.store_turns(tid)] == [t4]  # Codex itself holds only the last
    for turn in read_turns[:3]:  # from the archive, as Codex showed them before its revert
        assert turn["itemsView"] == "full" and turn["status"] == "completed"
        assert turn["items"] == [f["params"]["item"] for f in frames if f.get("method") == "item/completed" and f["params"]["turnId"] == turn["id"]]

    records = inspect_records(run, tid)
    assert [r["rebuilt"] for r in records] == [False, False, True, True]
    assert [r["injected"]["channels"] for r in records] == [[], [], [CHANNEL], [CHANNEL]]
    assert records[-1]["turnsSinceRebuild"] == [t4]
    assert records[-1]["rebuilds"] == 2


async def test_rebuild_keeps_the_client_s_additional_context_and_the_addition(tmp_path):
    engine = summarising(keep=2, addition="Be brief.")
    client_extra = {"client_key": {"kind": "application", "value": "from the client"}}
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "P1")
        await run.turn_ok(tid, "P2")
        await run.turn_ok(tid, "P3", additionalContext=client_extra)

    third = json.loads(run.child_lines("turn/start")[2])["params"]["additionalContext"]
    assert third["client_key"] == client_extra["client_key"]
    assert list(third)[0] == "client_key"  # the client's own entry first
    assert context_of({"additionalContext": third}) is not None
    # The addition was delivered on turn 1 and reverted away with it: sent again.
    assert third[ADDITIONAL_CONTEXT_KEY] == {"kind": "application", "value": "Be brief."}


# --------------------------------------------------------------------------
# stale slack


async def test_a_small_dropped_snippet_stays_a_big_dropped_message_rebuilds(tmp_path):
    small = recall(lambda prompt: f"fact<{prompt[:8]}>")
    async with modes_sidecar(tmp_path / "small", small, script={"defaultReply": LONG_REPLY}) as run:
        tid = await run.start_thread()
        for n in range(1, 6):
            await run.turn_ok(tid, f"Prompt {n}, tell me more about it")
        status = await run.status()
    assert "thread/revert" not in run.child_methods()
    assert status["rebuilds"] == 0
    assert [r["staleHeld"] for r in inspect_records(run, tid)] == [0, 1, 2, 3, 4]

    big_snippet = "BIG RETRIEVED DOCUMENT " + "lorem ipsum " * 200  # ~2,400 characters
    big = recall(lambda prompt: f"{big_snippet}<{prompt}>")
    async with modes_sidecar(tmp_path / "big", big) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Prompt 1")
        t2 = await run.turn_ok(tid, "Prompt 2")
        status = await run.status()
    # Turn 2: the first snippet (most of what the thread holds) is no longer
    # in the assembly: rebuilt, reverting turn 1.
    reverts = run.received("thread/revert")
    assert [r["params"]["beforeTurnId"] for r in reverts] == [t1]
    assert status["rebuilds"] == 1
    seen = run.seen(tid)
    assert seen[1]["turnId"] == t2 and seen[1]["held"] == []
    assert "<Prompt 1>" not in context_of(seen[1]) and "<Prompt 2>" in context_of(seen[1])
    assert "[user]\nPrompt 1" in context_of(seen[1])


async def test_the_slack_never_takes_the_thread_past_the_token_budget(tmp_path):
    """Stale snippets well within the slack still rebuild once the assembly
    (as the engine estimates it) plus them would exceed the token budget."""
    snippet = "RETRIEVED " + "x" * 290  # 300 characters: 75 tokens at 4 chars a token

    def assemble(p: Any) -> AssembleResult:
        note = UserMessage(content=f"{snippet}<{p.prompt}>", timestamp=0)
        return AssembleResult(messages=[*p.messages, note], estimated_tokens=900)

    script = {"defaultReply": LONG_REPLY}
    for budget, rebuilt in ((None, [False] * 4), (1000, [False, False, True, False])):
        # The default floor (4,000 characters) lets a young thread keep a few snippets.
        options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", token_budget=budget)
        async with modes_sidecar(tmp_path / str(budget), make_engine(assemble), options=options, script=script) as run:
            tid = await run.start_thread()
            for n in range(1, 5):
                await run.turn_ok(tid, f"Prompt {n}, tell me more about it")
        records = inspect_records(run, tid)
        # Without a budget the stale snippets stay (the slack allows them);
        # with one, turn 2 keeps one (900 + 76 <= 1,000), turn 3 would keep
        # two (900 + 152 > 1,000) and rebuilds, turn 4 keeps one again.
        assert [r["rebuilt"] for r in records] == rebuilt, budget
        assert [r["staleHeld"] for r in records] == ([0, 1, 2, 3] if budget is None else [0, 1, 0, 1])


async def test_zero_slack_rebuilds_for_any_dropped_message(tmp_path):
    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_slack=0.0, stale_floor_chars=0)
    async with modes_sidecar(tmp_path, recall(lambda prompt: f"fact<{prompt}>"), options=options, script={"defaultReply": LONG_REPLY}) as run:
        tid = await run.start_thread()
        turns = [await run.turn_ok(tid, f"Prompt {n}") for n in range(1, 4)]
    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [turns[0], turns[1]]


# --------------------------------------------------------------------------
# epoch


async def test_epoch_mode_projects_once_per_epoch_and_rebuilds_at_a_change(tmp_path):
    async with modes_sidecar(tmp_path, epochs(per=4), mode="auto") as run:  # auto: thread_bootstrap means epoch
        tid = await run.start_thread()
        turns = [await run.turn_ok(tid, f"E{n}") for n in range(1, 6)]
        status = await run.status()

    # Epochs by turn (history 0, 2, 4, 6, 8 messages): e0 e0 e1 e1 e2.
    records = inspect_records(run, tid)
    assert [r["mode"] for r in records] == ["epoch"] * 5
    assert [r["epoch"] for r in records] == ["e0", "e0", "e1", "e1", "e2"]
    # Reverts only at the epoch changes, each to the first turn of the previous epoch's projection.
    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [turns[0], turns[2]]
    seen = run.seen(tid)
    contexts = [context_of(s) for s in seen]
    # Within an epoch: nothing projected (turn 1 had nothing to project yet).
    assert contexts[0] is None and contexts[1] is None and contexts[3] is None
    # At e1: the thread was emptied and the whole assembly (4 messages) projected.
    assert seen[2]["held"] == []
    assert all(f"[user]\nE{n}" in contexts[2] for n in (1, 2))
    # Turn 4 (still e1) sees e1's projection, held in turn 3.
    assert [h["turnId"] for h in seen[3]["held"]] == [turns[2]]
    assert context_of(seen[3]["held"][0]) == contexts[2]
    # At e2: again a fresh projection of everything (8 messages); e1's block is gone.
    assert seen[4]["held"] == []
    assert all(f"[user]\nE{n}" in contexts[4] for n in (1, 2, 3, 4))
    assert status["rebuilds"] == 2
    assert [r["rebuilt"] for r in records] == [False, False, True, False, True]
    assert [r["projectedEpoch"] for r in records] == ["e0", "e0", "e1", "e1", "e2"]


async def test_epoch_mode_requested_by_config_with_an_epoch_from_the_start(tmp_path):
    """An engine whose first assembly already has content (a bootstrap
    document): the first turn projects it; the next turn of the epoch does not."""
    doc = UserMessage(content="BOOTSTRAP DOCUMENT", timestamp=0)
    engine = make_engine(
        lambda p: AssembleResult(
            messages=[doc, *p.messages],
            estimated_tokens=1,
            context_projection=ContextProjection(mode="thread_bootstrap", epoch="only"),
        )
    )
    async with modes_sidecar(tmp_path, engine, mode="epoch") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "one")
        await run.turn_ok(tid, "two")
        await run.turn_ok(tid, "three")
    contexts = [context_of(s) for s in run.seen(tid)]
    assert "BOOTSTRAP DOCUMENT" in contexts[0]
    assert contexts[1:] == [None, None]
    assert "thread/revert" not in run.child_methods()


# --------------------------------------------------------------------------
# native compaction, refused reverts, refused turns


async def test_native_compaction_forces_the_next_turn_to_rebuild(tmp_path):
    async with modes_sidecar(tmp_path, identity()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "C1")
        await run.turn_ok(tid, "C2")
        assert (await run.request("thread/compact/start", {"threadId": tid}))["result"] == {}
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and "compaction" in f["params"]["turn"]["id"])
        t3 = await run.turn_ok(tid, "C3")
        await run.turn_ok(tid, "C4")

    # The compaction rewrote Codex's history: the turn after it rebuilds it from
    # the mirror (identity: every message so far) ...
    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [t1]
    seen = run.seen(tid)
    assert seen[2]["turnId"] == t3 and seen[2]["held"] == []  # the compaction turn went too
    context = context_of(seen[2])
    assert all(f"[user]\nC{n}" in context for n in (1, 2))
    # ... and the turn after that is a plain delta again (nothing new to project).
    assert context_of(seen[3]) is None
    assert [r["rebuilt"] for r in inspect_records(run, tid)] == [False, False, True, False]


async def test_revert_refused_on_a_legacy_thread_forwards_the_original_request(tmp_path, logs):
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread(historyMode="legacy")
        for n in range(1, 6):
            await run.turn_ok(tid, f"L{n}")
        status = await run.status()

    # Turn 3 wanted a rebuild; Codex refused the revert once; later turns do not ask again.
    assert len(run.received("thread/revert")) == 1
    # Every turn/start went out as the client sent it.
    assert run.child_lines("turn/start") == client_turn_starts(run)
    warned = records_with(logs, "rebuild impossible")
    assert len(warned) == 1 and fields(warned[0]).get("legacyHistory") is True
    assert_client_unaware(run, tid)
    assert status["rebuilds"] == 0
    records = inspect_records(run, tid)
    assert [r["fallback"] for r in records] == [None, None, "rebuild-unavailable", "rebuild-unavailable", "rebuild-unavailable"]
    # The model still saw the whole raw conversation, as Codex holds it.
    assert len(run.seen(tid)[-1]["held"]) == 4


async def test_a_turn_refused_after_the_revert_leaves_a_ledger_that_matches_the_thread(tmp_path):
    """The revert is done when Codex answers it; if Codex then refuses the
    client's turn/start, the thread holds only its framing, and the next turn
    must project the whole assembly (not the delta against what was reverted)."""

    def summarise_on_request(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if "SUMMARISE" in p.prompt:  # e.g. a budget that shrank for this turn only
            messages = [CompactionSummaryMessage(summary=summary_text(len(messages)), tokens_before=1, timestamp=0)]
        return AssembleResult(messages=messages, estimated_tokens=1)

    async with modes_sidecar(tmp_path, make_engine(summarise_on_request)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Q1")
        await run.turn_ok(tid, "Q2")
        rid = run.new_id()
        bad = {"threadId": tid, "input": [{"type": "text", "text": "SUMMARISE Q3", "text_elements": []}, {"type": "no-such-input"}]}
        await run.send(frame({"id": rid, "method": "turn/start", "params": bad}))
        refused = await run.wait_response(rid)
        assert refused["error"]["code"] == -32600
        await wait_until(lambda: run.session(tid).settled, what="the refused turn's slot")
        t4 = await run.turn_ok(tid, "Q4")
        t5 = await run.turn_ok(tid, "Q5")

    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [t1]
    seen = run.seen(tid)
    assert [s["turnId"] for s in seen] == [t1, run.seen(tid)[1]["turnId"], t4, t5]
    assert seen[2]["held"] == []  # the revert before the refused turn emptied the thread
    context = context_of(seen[2])
    assert context is not None, "turn 4's model would see no history at all"
    assert all(f"[user]\n{q}" in context for q in ("Q1", "Q2")) and "[assistant]\nReply 1." in context
    # And from there on, plain deltas again.
    assert context_of(seen[3]) is None and [h["turnId"] for h in seen[3]["held"]] == [t4]
    assert_client_unaware(run, tid)


async def test_a_rebuild_s_turn_does_not_wait_for_thread_reverted(tmp_path):
    """Codex sends ``thread/reverted`` after it answers the revert; here it
    comes only after the rebuild's own turn/start is answered. The turn goes
    out as soon as the revert is answered, the late ``thread/reverted`` is
    still kept from the client, and the turn's own status changes (which
    follow the revert's answer) reach it."""
    async with modes_sidecar(tmp_path, summarising(keep=2), script={"revertedLate": True}) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "L1")
        await run.turn_ok(tid, "L2")
        mark = len(run.frames())
        t3 = await run.turn_ok(tid, "L3")  # rebuild: the revert's thread/reverted comes late
        rebuilt = [f for f in run.frames()[mark:] if "method" in f]
        t4 = await run.turn_ok(tid, "L4")
        await run.request("thread/read", {"threadId": tid})  # lets a late thread/reverted out
        assert run.lifecycle is not None
        await wait_until(lambda: not run.lifecycle._reverting, what="the revert filter to end")

    reverts = run.received("thread/revert")
    assert reverts and reverts[0]["params"]["beforeTurnId"] != t3
    sent = [json.loads(line) for line in run.sent_log.read_bytes().splitlines()]
    late = [i for i, f in enumerate(sent) if f.get("method") == "thread/reverted"]
    started = next(i for i, f in enumerate(sent) if (f.get("result") or {}).get("turn", {}).get("id") == t3)
    assert late and late[0] > started, "the fake did not send thread/reverted after the turn"
    statuses = [f["params"]["status"]["type"] for f in rebuilt if f["method"] == "thread/status/changed"]
    assert statuses == ["active", "idle"]
    assert [f["method"] for f in rebuilt if f["method"].startswith("turn/")] == ["turn/started", "turn/completed"]
    assert [s["turnId"] for s in run.seen(tid)][-2:] == [t3, t4]
    assert inspect_records(run, tid)[2]["rebuilt"] is True
    assert_client_unaware(run, tid)


async def test_a_rebuild_s_late_thread_reverted_is_not_taken_for_the_next_rebuild_s(tmp_path):
    """Each rebuild's thread/reverted comes two requests late, so one arrives
    while the next rebuild's revert is under way: each is swallowed once
    (none reaches the client) and the filter ends when all came."""
    async with modes_sidecar(tmp_path, summarising(keep=2), script={"revertedLate": 2}) as run:
        tid = await run.start_thread()
        for n in range(1, 6):
            await run.turn_ok(tid, f"W{n}")  # W3, W4 and W5 rebuild
        for _ in range(2):
            await run.request("thread/read", {"threadId": tid})  # lets the last one out
        assert run.lifecycle is not None
        await wait_until(lambda: not run.lifecycle._reverting, what="the revert filter to end")
    sent = [json.loads(line) for line in run.sent_log.read_bytes().splitlines()]
    assert len(run.received("thread/revert")) == 3
    assert sum(1 for f in sent if f.get("method") == "thread/reverted") == 3
    assert_client_unaware(run, tid)


async def test_a_client_s_own_revert_reaches_it_and_the_engine_forgets_those_turns(tmp_path):
    """The client reverts its thread itself: its revert's notifications are
    its own (not swallowed), the transcript mirror and the ledger follow it
    (the engine never assembles the reverted turns again, so they never come
    back to the model), and its reads keep them gone."""
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "V1")
        await run.turn_ok(tid, "V2")
        mark = len(run.frames())
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t1})
        assert reverted["result"]["thread"]["id"] == tid
        await run.wait_frame(lambda f: f.get("method") == "thread/reverted")
        client_saw = [f.get("method") for f in run.frames()[mark:] if "method" in f]
        t3 = await run.turn_ok(tid, "V3")
        t4 = await run.turn_ok(tid, "V4")
        status = await run.status()
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        assert run.lifecycle is not None
        mirrored = run.lifecycle.sessions[tid].mirror.messages()  # the session's path, as OpenClaw reads it
        revert_entries = [e for e in run.mirror_entries(tid) if e.get("customType") == "codex-sidecar.client-revert"]

    assert client_saw == ["thread/status/changed", "thread/readState/changed", "thread/status/changed", "thread/reverted"]
    assert len(run.received("thread/revert")) == 1  # the client's; no rebuild was needed
    assembled = [roles_texts(p.messages) for p in calls_for(run.engine, "assemble", tid)]
    assert assembled[2] == []  # V3: the reverted V1 and V2 are gone from the engine's history
    assert assembled[3] == [("user", "V3"), ("assistant", "Reply 3.")]
    assert [t for _, t in roles_texts(mirrored) if t.startswith("V")] == ["V3", "V4"]
    # The reverted turns stay in the file, on a branch the path no longer takes.
    assert [t for _, t in roles_texts(run.mirror_messages(tid)) if t.startswith("V")] == ["V1", "V2", "V3", "V4"]
    assert len(revert_entries) == 1 and revert_entries[0]["parentId"] is None
    assert revert_entries[0]["data"] == {"beforeTurnId": t1}
    seen = run.seen(tid)
    assert [s["turnId"] for s in seen][-2:] == [t3, t4]
    assert seen[-2]["held"] == [] and context_of(seen[-2]) is None
    assert [h["turnId"] for h in seen[-1]["held"]] == [t3] and context_of(seen[-1]) is None
    assert status["rebuilds"] == 0
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t3, t4]


async def test_a_client_revert_after_rebuilds_leaves_the_model_only_what_it_kept(tmp_path):
    """Reverting the turn after a rebuild: Codex holds only its framing, the
    ledger says so, and the next turn projects the engine's assembly of what
    is left (nothing of the reverted turn); the turns the rebuilds archived
    stay in the client's reads."""
    async with modes_sidecar(tmp_path, summarising(keep=2)) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "U1")
        t2 = await run.turn_ok(tid, "U2")
        t3 = await run.turn_ok(tid, "U3")  # rebuild: Codex forgets t1, t2
        t4 = await run.turn_ok(tid, "U4")  # rebuild: Codex forgets t3
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t4})
        assert "result" in reverted
        await run.wait_frame(lambda f: f.get("method") == "thread/reverted")
        t5 = await run.turn_ok(tid, "U5")
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})

    sidecar_reverts = [r["params"]["beforeTurnId"] for r in run.received("thread/revert")]
    assert sidecar_reverts == [t1, t3, t4]  # two rebuilds, then the client's; U5 needs no revert
    seen = run.seen(tid)[-1]
    assert seen["turnId"] == t5 and seen["held"] == []
    context = context_of(seen)
    assert context is not None and f"[summary]\n{summary_text(4)}" in context and "[user]\nU3" in context
    assert "U4" not in context and "Reply 4." not in context
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3, t5]
    records = inspect_records(run, tid)
    # U5: the ledger knew Codex held only its framing, so the whole assembly
    # went as a delta, with no rebuild.
    assert [r["rebuilt"] for r in records] == [False, False, True, True, False]


# --------------------------------------------------------------------------
# the ledger across a restart, inspection


async def test_the_ledger_survives_a_restart(tmp_path):
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "R1")
        await run.turn_ok(tid, "R2")

    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        await run2.resume_thread(tid)
        await run2.turn_ok(tid, "R3")
        inspected = await run2.request("sidecar/inspect", {"threadId": tid})
        status = await run2.status()

    # No rebuild, no listing, no projection: the restored ledger says the thread holds it all.
    assert "thread/revert" not in run2.child_methods()
    assert "thread/turns/list" not in run2.child_methods()
    assert run2.child_lines("turn/start") == client_turn_starts(run2)
    seen = run2.seen(tid)
    assert len(seen[0]["held"]) == 2 and context_of(seen[0]) is None
    assert status["rebuilds"] == 0

    turns = inspected["result"]["turns"]
    assert [t["mode"] for t in turns] == ["delta"] * 3
    assert [t["rebuilt"] for t in turns] == [False] * 3
    assert [t["injected"]["channels"] for t in turns] == [[]] * 3
    assert inspected["result"]["engine"] == "modes"

    # The CLI reads the same records from the state directory.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-config")
    argv = [sys.executable, "-m", "sidecar", "--state-dir", str(tmp_path / "state"), "inspect", tid]
    as_json = subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert rows == turns
    table = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    lines = table.stdout.splitlines()
    assert len(lines) == 4 and "mode" in lines[0] and "hold ms" in lines[0] and "rebuild" in lines[0]
    assert all(" delta " in line for line in lines[1:])
    assert all(line.rstrip().endswith(" -") for line in lines[1:])  # no rebuild on any turn


async def test_a_rebuild_after_a_restart_reverts_to_the_last_rebuild_s_turn(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "S1")
        await run.turn_ok(tid, "S2")
        t3 = await run.turn_ok(tid, "S3")  # rebuild 1
        t4 = await run.turn_ok(tid, "S4")  # rebuild 2: reverts t3

    async with modes_sidecar(tmp_path, summarising(keep=2), name="two") as run2:
        await run2.resume_thread(tid)
        t5 = await run2.turn_ok(tid, "S5")
        records = (await run2.request("sidecar/inspect", {"threadId": tid}))["result"]["turns"]

    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [run.seen(tid)[0]["turnId"], t3]
    # After the restart the ledger still knows the thread starts at t4.
    assert [r["params"]["beforeTurnId"] for r in run2.received("thread/revert")] == [t4]
    assert "thread/turns/list" not in run2.child_methods()
    assert run2.seen(tid)[0]["turnId"] == t5 and run2.seen(tid)[0]["held"] == []
    assert [r["rebuilt"] for r in records] == [False, False, True, True, True]
    assert [r["rebuilds"] for r in records] == [0, 0, 1, 2, 3]
    assert [r["injected"]["channels"] for r in records] == [[], [], [CHANNEL], [CHANNEL], [CHANNEL]]
    assert records[-1]["turnsSinceRebuild"] == [t5]


async def test_an_unknown_thread_is_listed_before_its_first_rebuild(tmp_path):
    """A thread the sidecar has no ledger for (run before it without an
    engine): the first turn of the rebuild comes from thread/turns/list."""
    async with modes_sidecar(tmp_path, identity(), name="plain", state="other-state") as plain:
        tid = await plain.start_thread()
        first = await plain.turn_ok(tid, "U1")
        await plain.turn_ok(tid, "U2")
        await plain.turn_ok(tid, "U3")

    async with modes_sidecar(tmp_path, summarising(keep=2), name="engine") as run:
        await run.resume_thread(tid)
        await run.turn_ok(tid, "U4")
    methods = run.child_methods()
    assert methods.index("thread/turns/list") < methods.index("thread/revert") < methods.index("turn/start")
    listed = run.received("thread/turns/list")[0]["params"]
    assert listed == {"threadId": tid, "sortDirection": "asc", "limit": 1}
    assert [r["params"]["beforeTurnId"] for r in run.received("thread/revert")] == [first]
    assert run.seen(tid)[-1]["held"] == []
    assert_client_unaware(run, tid)


# --------------------------------------------------------------------------
# determinism


async def session_frames(tmp_path: Path) -> list[bytes]:
    engine = summarising(keep=3)
    async with modes_sidecar(tmp_path, engine, script={"defaultReply": LONG_REPLY}) as run:
        tid = await run.start_thread()
        for n in range(1, 7):
            await run.turn_ok(tid, f"Deterministic prompt {n}")
    lines = [line for line in run.received_lines() if json.loads(line).get("method") in ("turn/start", "thread/revert")]
    assert len(run.child_lines("turn/start")) == 6 and run.child_lines("thread/revert")
    return lines


async def test_the_same_session_twice_gives_the_same_bytes(tmp_path):
    first = await session_frames(tmp_path / "a")
    second = await session_frames(tmp_path / "b")
    assert first == second



async def test_a_kill_between_revert_and_turn_start_forces_a_full_rebuild_on_restart(tmp_path):
    """SIGKILL after thread/revert but before the turn/start that carries the
    projection leaves the "rebuilding" marker last in the ledger: the thread
    may hold only its framing, so the next process must not trust the older
    ledger (with an identity engine it would otherwise project nothing)."""
    from sidecar.inspect import InspectLog, inspect_path

    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "K1")
        await run.turn_ok(tid, "K2")
    log = InspectLog(inspect_path(tmp_path / "state", tid))
    turns_before = log.records()
    log.append({"rebuilding": True, "rebuilds": 0, "projectedEpoch": None})  # what the killed process left
    assert log.records() == turns_before  # markers are not turns

    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        await run2.resume_thread(tid)
        await run2.turn_ok(tid, "K3")
    assert len(run2.received("thread/revert")) == 1
    assert context_of(run2.seen(tid)[0]) is not None, "the whole history was projected again"


async def test_the_slack_floor_keeps_a_young_thread_from_rebuilding_for_one_snippet(tmp_path):
    """5% of a young thread is less than one recalled snippet; the absolute
    floor (stale_floor_chars) lets it stay, and a drop beyond it rebuilds."""
    snippet = "RETRIEVED " + "lorem ipsum " * 200  # ~2,400 characters
    engine = recall(lambda prompt: f"{snippet}<{prompt}>")
    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_floor_chars=4000)
    async with modes_sidecar(tmp_path, engine, options=options) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"Prompt {n}")
        status = await run.status()
    # Turn 2 keeps one stale snippet (~2,400 chars, under the floor); turn 3
    # would keep two (~4,800 chars, over it): one rebuild, at turn 3.
    assert status["rebuilds"] == 1
    assert [r["rebuilt"] for r in inspect_records(run, tid)] == [False, False, True]


# --------------------------------------------------------------------------
# reads after rebuilds: the turns Codex forgot come from the sidecar's archive


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
    # Every other field of the responses is Codex's own.
    codex_read = next(json.loads(line) for line in run2.sent_log.read_bytes().splitlines() if json.loads(line).get("id") == read["id"])
    assert {k: v for k, v in read["result"]["thread"].items() if k != "turns"} == {
        k: v for k, v in codex_read["result"]["thread"].items() if k != "turns"
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


async def _list_all(run: ModesRun, tid: str, *, cursor: str | None = None, method: str = "thread/turns/list", **params: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Page through a listing to the end (from ``cursor``): the turn ids (or
    item ids), and every page."""
    ids: list[str] = []
    pages: list[dict[str, Any]] = []
    for _ in range(20):
        resp = await run.request(method, {"threadId": tid, **params, **({"cursor": cursor} if cursor else {})})
        assert "result" in resp, resp
        pages.append(resp["result"])
        ids += [t["id"] if "id" in t else t["item"]["id"] for t in resp["result"]["data"]]
        cursor = resp["result"]["nextCursor"]
        if cursor is None:
            return ids, pages
    raise AssertionError(f"thread/turns/list never ended: {ids}")


def summarising_once() -> RecordingEngine:
    """The first two messages replaced by a summary from the third turn on:
    one rebuild, then plain deltas."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) >= 4:
            messages = [CompactionSummaryMessage(summary=summary_text(2), tokens_before=20, timestamp=0), *messages[2:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    return make_engine(assemble)


async def test_turns_list_pages_through_every_turn_across_rebuilds(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Z1")
        t2 = await run.turn_ok(tid, "Z2")
        before = await _list_all(run, tid, limit=1)
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
                listings[direction, limit] = await _list_all(run, tid, **params)
        went_on = {
            "desc": await _list_all(run, tid, cursor=early_desc["nextCursor"], limit=1),
            "asc": await _list_all(run, tid, cursor=early_asc["nextCursor"], limit=2, sortDirection="asc"),
            "back": await _list_all(run, tid, cursor=early_desc["backwardsCursor"], limit=2),
        }
        every_item = await _list_all(run, tid, method="thread/items/list")
        items_went_on = await _list_all(run, tid, cursor=early_items["nextCursor"], method="thread/items/list", limit=3)
        full_view = await _list_all(run, tid, sortDirection="asc", itemsView="full")
        not_loaded = await _list_all(run, tid, itemsView="notLoaded")
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


async def _four_turns_rebuilt_at_the_third(run: ModesRun, prefix: str) -> tuple[str, list[str]]:
    """A thread of four turns under summarising_once(): the third rebuilds,
    so Codex forgets the first two."""
    tid = await run.start_thread()
    return tid, [await run.turn_ok(tid, f"{prefix}{n}") for n in range(1, 5)]


async def test_a_fork_of_a_rebuilt_thread_lists_every_turn_it_inherits(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, t3, t4) = await _four_turns_rebuilt_at_the_third(run, "F")
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


async def _items_all(run: ModesRun, tid: str, **params: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    cursor: Any = params.pop("cursor", None)
    for _ in range(40):
        resp = await run.request("thread/items/list", {"threadId": tid, **params, **({"cursor": cursor} if cursor else {})})
        assert "result" in resp, resp
        if isinstance(params.get("limit"), int):
            assert len(resp["result"]["data"]) <= params["limit"]
        entries += resp["result"]["data"]
        cursor = resp["result"]["nextCursor"]
        if cursor is None:
            return entries
    raise AssertionError("thread/items/list never ended")


async def test_items_list_pages_through_the_archived_turns_items(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (t1, t2, t3, t4) = await _four_turns_rebuilt_at_the_third(run, "I")
        listings = {}
        for limit in (1, 3, 100, None):
            for direction in ("asc", "desc"):
                listings[direction, limit] = await _items_all(run, tid, sortDirection=direction, **({"limit": limit} if limit else {}))
        default = await _items_all(run, tid)
        one_turn = await _items_all(run, tid, turnId=t1, limit=1)
        after_anchor = await _items_all(run, tid, turnId=t2, cursor={"type": "item", "itemId": f"{t2}-user"})
        before_anchor = await _items_all(run, tid, turnId=t2, sortDirection="desc", cursor={"type": "item", "itemId": f"{t2}-agent"})
        codex_turn = await _items_all(run, tid, turnId=t4)
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
