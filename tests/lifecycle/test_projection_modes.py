"""Projection modes (``delta``, ``epoch``) against the fake app-server.

What these tests look at is what each turn's model would see. The fake
(``tests/support/children/fake_codex.py``) logs, per accepted ``turn/start``, the
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
from pathlib import Path
from typing import Any

from engines import AssembleResult, CompactionSummaryMessage, ContextProjection, UserMessage
from sidecar.lifecycle import LifecycleOptions
from sidecar.projection import ADDITIONAL_CONTEXT_KEY, CONTEXT_HEADER, CONTEXT_KEY
from sidecar.store.ledger import Ledger, ledger_path
from tests.support.harness import ROOT
from tests.support.lifecycle import calls_for, fields, frame, records_with, roles_texts, wait_until
from tests.support.modes import (
    CHANNEL,
    LONG_REPLY,
    assert_client_unaware,
    client_turn_starts,
    context_of,
    epochs,
    identity,
    input_of,
    inspect_records,
    modes_sidecar,
    recall,
    scripted_engine,
    summarising,
    summary_text,
)

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
    assert Ledger(ledger_path(run.state_dir, tid)).load().turns_since_rebuild == [t4]
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
        async with modes_sidecar(tmp_path / str(budget), scripted_engine(assemble), options=options, script=script) as run:
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
    engine = scripted_engine(
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

    async with modes_sidecar(tmp_path, scripted_engine(summarise_on_request)) as run:
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
        await wait_until(lambda: not run.lifecycle.reverting, what="the revert filter to end")

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
        await wait_until(lambda: not run.lifecycle.reverting, what="the revert filter to end")
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
    assert rows == [{"sessionId": tid, "threadId": tid, **t} for t in turns]  # a thread of its own is its session
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
    assert Ledger(ledger_path(run.state_dir, tid)).load().turns_since_rebuild == [t5]


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

    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "K1")
        await run.turn_ok(tid, "K2")
    Ledger(ledger_path(tmp_path / "state", tid)).rebuilding(0, None)  # what the killed process left

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
