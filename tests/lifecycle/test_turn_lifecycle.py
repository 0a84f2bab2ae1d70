"""The context engine's lifecycle around Codex turns (sidecar.lifecycle).

The lifecycle spec's unit test plan ("Test plan", "Error handling",
"Observability"), run at the protocol boundary: a real ``Proxy`` with
``Lifecycle`` installed the way ``sidecar.cli`` does it, a ``RecordingEngine``,
and ``tests/support/children/fake_codex.py`` as the app-server.
The fake logs every line it receives, so each test asserts what Codex would
have been sent, byte for byte where it matters. No codex binary needed.

Each test runs in ``per_turn`` and in the default mode, ``auto`` (which means
``delta`` for these engines); a test whose assertion holds in one mode only
says so with ``only_mode`` (tests/lifecycle/conftest.py).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
import trio.testing

from engines import (
    AssembleResult,
    AssistantMessage,
    CompactionDetails,
    CompactionSummaryMessage,
    CompactResult,
    EngineInfo,
    UserMessage,
)
from engines.testkit import RecordingEngine
from sidecar.lifecycle import LifecycleOptions
from sidecar.logs import JsonFormatter, TextFormatter
from sidecar.projection import ADDITIONAL_CONTEXT_KEY, CONTEXT_HEADER, REQUEST_HEADER
from sidecar.store.mirror import session_path
from tests.support.lifecycle import (
    Run,
    breakable_mirror_disk,
    calls_for,
    fields,
    frame,
    input_texts,
    make_engine,
    records_with,
    roles_texts,
    text_of,
    wait_until,
)
from tests.support.lifecycle import sidecar as open_sidecar

HEADER = CONTEXT_HEADER  # "OpenClaw assembled context for this turn:"

# ``sidecar`` (tests/lifecycle/conftest.py) opens a run in each projection
# mode the suite covers: ``per_turn`` and the default, ``auto``.


# --------------------------------------------------------------------------
# Lifecycle order for a turn
# --------------------------------------------------------------------------


async def test_assemble_gets_mirrored_messages_budget_tools_citations_model_and_prompt(tmp_path, sidecar):
    engine = make_engine()
    opts = LifecycleOptions(engine_deadline=5.0, token_budget=50_000, citations_mode="inline")
    async with sidecar(tmp_path, engine, options=opts) as run:
        tools = [
            {"name": "lookup_order", "description": "d", "inputSchema": {"type": "object"}},
            {"name": "send_email", "description": "d", "inputSchema": {"type": "object"}},
        ]
        tid = await run.start_thread(dynamicTools=tools, developerInstructions="Be brief.")
        await run.turn(tid, "First prompt")
        await run.turn(tid, "Second prompt", model="gpt-override")

    first, second = calls_for(engine, "assemble", tid)
    assert first.messages == []
    assert first.prompt == "First prompt"
    assert first.model == "fake-model"  # the thread's model, from the thread/start result
    assert roles_texts(second.messages) == [("user", "First prompt"), ("assistant", "Reply 1.")]
    assert second.prompt == "Second prompt"
    assert second.model == "gpt-override"  # the turn's own model wins
    for params in (first, second):
        assert params.session_id == tid
        assert params.session_key == tid  # default template "{thread_id}"
        assert params.token_budget == 50_000
        assert params.available_tools == frozenset({"lookup_order", "send_email"})
        assert params.citations_mode == "inline"
        assert params.runtime_context.cwd == "/tmp/fake-work"
    # Usage from thread/tokenUsage/updated reaches the next turn's runtime context.
    assert second.runtime_context.last_usage is not None
    assert second.runtime_context.last_usage.cache_read == 40
    assert second.runtime_context.context_window == 258400


async def test_available_tools_name_the_members_of_a_clients_namespaced_dynamic_tools(tmp_path, sidecar):
    """OpenClaw declares most of its tools in namespaces (``openclaw``,
    ``openclaw_direct``): the model calls the members, so those are the
    available tools, not the namespace's own name."""
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tools = [
            {"type": "function", "name": "message", "description": "d", "inputSchema": {"type": "object"}},
            {
                "type": "namespace",
                "name": "openclaw",
                "description": "d",
                "tools": [
                    {"type": "function", "name": "memory_search", "description": "d", "inputSchema": {"type": "object"}},
                    {"type": "function", "name": "web_fetch", "description": "d", "inputSchema": {"type": "object"}},
                ],
            },
            "not a tool",
            {"type": "namespace", "name": "broken", "tools": "not a list"},
        ]
        tid = await run.start_thread(dynamicTools=tools)
        await run.turn(tid, "First prompt")

    (params,) = calls_for(engine, "assemble", tid)
    assert params.available_tools == frozenset({"message", "memory_search", "web_fetch"})


@pytest.mark.only_mode("per_turn", reason="in delta the thread already holds the history, so nothing is prepended to the input")
async def test_projected_context_in_turn_input_prompt_last_without_duplicate(tmp_path, sidecar):
    engine = make_engine()
    # The engine returns the history AND the current prompt at its tail, as
    # engines that ingest the prompt first do: it must not appear twice.
    engine.set_result(
        "assemble",
        lambda p: AssembleResult(
            messages=[*p.messages, UserMessage(content=p.prompt, timestamp=0)], estimated_tokens=7
        ),
    )
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        original_item = {"type": "text", "text": "What was the word?", "text_elements": []}
        await run.turn(tid, "What was the word?")
        second = run.child_turn_starts(tid)[1]

    items = second["params"]["input"]
    assert len(items) == 2
    context = items[0]["text"]
    assert context.startswith(HEADER + "\n")
    assert "<conversation_context>\n[user]\nRemember PAPAYA.\n\n[assistant]\nReply 1.\n</conversation_context>" in context
    assert context.endswith(REQUEST_HEADER + "\n")
    assert items[1] == original_item  # the client's item, unchanged, last
    assert "What was the word?" not in context  # no duplicate current prompt
    assert sum(t.count("What was the word?") for t in input_texts(second)) == 1
    # The first turn had no history: nothing to prepend, input untouched.
    first = run.child_turn_starts(tid)[0]
    assert first["params"]["input"] == [{"type": "text", "text": "Remember PAPAYA.", "text_elements": []}]


async def test_system_prompt_addition_goes_to_additional_context_only_when_changed(tmp_path, sidecar, projection_mode):
    engine = make_engine()
    additions = iter(["Prefer metric units.", "Prefer metric units.", "Answer in French."])
    engine.set_result(
        "assemble",
        lambda p: AssembleResult(messages=list(p.messages), estimated_tokens=1, system_prompt_addition=next(additions)),
    )
    client_context = {"client_src": {"kind": "application", "value": "client fragment"}}
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.turn(tid, "two")
        await run.turn(tid, "three", additionalContext=client_context)
        t1, t2, t3 = run.child_turn_starts(tid)

    ours = {"kind": "application", "value": "Prefer metric units."}
    assert t1["params"]["additionalContext"] == {ADDITIONAL_CONTEXT_KEY: ours}
    # Unchanged: already in the thread's history, not sent again.
    assert "additionalContext" not in t2["params"]
    if projection_mode == "per_turn":
        assert HEADER in input_texts(t2)[0]  # the turn itself was still projected
    else:  # delta: the thread holds the history the identity assembly repeats
        assert input_texts(t2) == ["two"]
    # Changed: sent again, next to the client's own fragment (kept first).
    assert t3["params"]["additionalContext"] == {
        **client_context,
        ADDITIONAL_CONTEXT_KEY: {"kind": "application", "value": "Answer in French."},
    }
    assert list(t3["params"]["additionalContext"]) == ["client_src", ADDITIONAL_CONTEXT_KEY]
    # Never in the user-visible input text.
    for t in (t1, t2, t3):
        assert not any("metric units" in s or "French" in s for s in input_texts(t))


async def test_after_turn_runs_after_mirroring_with_full_snapshot(tmp_path, sidecar):
    engine = make_engine()
    seen_on_disk: list[list[tuple[str, str]]] = []
    holder: dict[str, Run] = {}

    def after_turn(params):
        # What the mirror file held at the moment after_turn was called.
        seen_on_disk.append(roles_texts(holder["run"].mirror_messages(params.session_id)))

    engine.set_result("after_turn", after_turn)
    async with sidecar(tmp_path, engine) as run:
        holder["run"] = run
        tid = await run.start_thread()
        await run.turn(tid, "First prompt")
        await run.turn(tid, "Second prompt")

    first, second = calls_for(engine, "after_turn", tid)
    turn1 = [("user", "First prompt"), ("assistant", "Reply 1.")]
    turn2 = [*turn1, ("user", "Second prompt"), ("assistant", "Reply 2.")]
    assert roles_texts(first.messages) == turn1
    assert first.pre_prompt_message_count == 0
    assert roles_texts(second.messages) == turn2
    assert second.pre_prompt_message_count == 2
    assert seen_on_disk == [turn1, turn2]  # mirrored before after_turn
    assert first.session_file == str(session_path(tmp_path / "state", tid))
    assert first.session_id == tid
    # The reply carries the turn's usage and stop reason.
    reply = second.messages[-1]
    assert isinstance(reply, AssistantMessage) and reply.stop_reason == "stop" and reply.usage is not None
    # Order within each turn: assemble, after_turn, maintain.
    assert engine.method_names == ["assemble", "after_turn", "maintain", "assemble", "after_turn", "maintain"]


@pytest.mark.only_mode("per_turn", reason="needs a projection in the turn input, which delta never makes for an identity assembly")
async def test_mirror_stores_the_original_prompt_not_the_projection(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "First prompt")
        await run.turn(tid, "Second prompt")
        projected = run.child_turn_starts(tid)[1]
        echoed = [
            f for f in run.frames()
            if f.get("method") == "item/completed" and f["params"]["item"]["type"] == "userMessage"
        ][1]
        entries = run.mirror_entries(tid)

    assert input_texts(projected)[0].startswith(HEADER)  # Codex got the projection...
    assert echoed["params"]["item"]["content"][0]["text"].startswith(HEADER)  # ...and echoed it
    users = [e["message"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "user"]
    assert [text_of(m) for m in users] == ["First prompt", "Second prompt"]
    assert not any(HEADER in json.dumps(e) for e in entries)
    # The engine's snapshot is the mirror's: original prompts only.
    assert not any(HEADER in text_of(m) for m in calls_for(engine, "after_turn", tid)[-1].messages)


# --------------------------------------------------------------------------
# Fallbacks when the engine lacks after_turn / ingest_batch
# --------------------------------------------------------------------------


async def test_without_after_turn_ingest_batch_gets_the_new_messages(tmp_path, sidecar):
    engine = make_engine(omit=("after_turn",))
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "First prompt")
        await run.turn(tid, "Second prompt")

    batches = calls_for(engine, "ingest_batch", tid)
    assert [roles_texts(b.messages) for b in batches] == [
        [("user", "First prompt"), ("assistant", "Reply 1.")],
        [("user", "Second prompt"), ("assistant", "Reply 2.")],
    ]
    assert engine.calls_to("ingest") == []
    assert "after_turn" not in engine.method_names


async def test_without_after_turn_and_ingest_batch_ingests_each_new_message(tmp_path, sidecar):
    engine = make_engine(omit=("after_turn", "ingest_batch"))
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "First prompt")
        await run.turn(tid, "Second prompt")

    ingested = [c.params.message for c in engine.calls_to("ingest")]
    assert roles_texts(ingested) == [
        ("user", "First prompt"),
        ("assistant", "Reply 1."),
        ("user", "Second prompt"),
        ("assistant", "Reply 2."),
    ]
    assert all(c.params.session_id == tid for c in engine.calls_to("ingest"))


# --------------------------------------------------------------------------
# Maintenance
# --------------------------------------------------------------------------


async def test_turn_maintenance_after_a_completed_turn(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "hello")
        status = run.session(tid).stats

    (maintain,) = engine.calls_to("maintain")
    assert maintain.params.reason == "turn"
    assert maintain.params.session_id == tid
    assert maintain.params.session_file == str(session_path(tmp_path / "state", tid))
    assert engine.method_names.index("after_turn") < engine.method_names.index("maintain")
    assert status["lastMaintainTurn"] == "ok"


@pytest.mark.parametrize("status", ["interrupted", "failed"])
async def test_no_turn_maintenance_after_an_unsuccessful_turn(tmp_path, sidecar, status):
    engine = make_engine()
    async with sidecar(tmp_path, engine, script={"turns": [{"status": status}, {"status": "completed"}]}) as run:
        tid = await run.start_thread()
        first = await run.turn(tid, "this one goes wrong")
        assert first["completed"]["params"]["turn"]["status"] == status
        assert engine.calls_to("maintain") == []
        assert run.session(tid).stats["lastMaintainTurn"] == f"skipped: turn {status}"
        # after_turn still ingests what there was (the prompt).
        (after,) = calls_for(engine, "after_turn", tid)
        assert roles_texts(after.messages) == [("user", "this one goes wrong")]
        await run.turn(tid, "try again")

    assert [c.params.reason for c in engine.calls_to("maintain")] == ["turn"]


async def test_no_turn_maintenance_when_after_turn_raised(tmp_path, sidecar, logs):
    engine = make_engine()
    engine.fail("after_turn", lambda: RuntimeError("engine broke"), times=1)
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "first")
        assert engine.calls_to("maintain") == []
        assert run.session(tid).stats["lastFinalize"]["ok"] is False
        assert run.session(tid).stats["lastMaintainTurn"] == "skipped: finalize failed"
        await run.turn(tid, "second")  # after_turn works again

    assert [c.params.reason for c in engine.calls_to("maintain")] == ["turn"]
    (failed,) = records_with(logs, "codex context engine finalize failed")
    assert failed.levelno == logging.WARNING
    assert fields(failed)["error"] == "RuntimeError"


async def test_bootstrap_only_when_history_exists_and_only_once(tmp_path, sidecar):
    first_engine = make_engine()
    async with sidecar(tmp_path, first_engine, name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.turn(tid, "two")
    # A fresh session: no history, no bootstrap, no bootstrap maintenance.
    assert first_engine.calls_to("bootstrap") == []
    assert [c.params.reason for c in first_engine.calls_to("maintain")] == ["turn", "turn"]

    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:  # same state dir, same Codex store
        await run.resume_thread(tid)
        await run.turn(tid, "three")
        await run.turn(tid, "four")

    # The engine followed the session from its first turn (in another
    # process): a later process does not bootstrap it again, and runs
    # bootstrap maintenance once (interrupted maintenance is redone first).
    assert engine.calls_to("bootstrap") == []
    assert [c.params.reason for c in engine.calls_to("maintain")] == ["bootstrap", "turn", "turn"]
    assert engine.method_names[:2] == ["maintain", "assemble"]
    assert len(engine.calls_to("assemble")[0].params.messages) == 4  # the history all the same


async def test_bootstrap_runs_once_a_session_not_once_a_process(tmp_path, sidecar):
    # Codex ran a turn without the sidecar: the first process with the engine
    # imports it and bootstraps; later processes do not bootstrap again.
    async with sidecar(tmp_path, None, name="plain") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")

    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run1") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "two")
    (boot,) = engine.calls_to("bootstrap")
    assert boot.params.session_id == tid
    assert boot.params.session_file == str(session_path(tmp_path / "state", tid))
    # bootstrap, bootstrap maintenance, then the first assemble.
    assert engine.method_names[:3] == ["bootstrap", "maintain", "assemble"]

    for name in ("run2", "run3"):
        later = make_engine()
        async with sidecar(tmp_path, later, name=name) as run:
            await run.resume_thread(tid)
            await run.turn(tid, f"in {name}")
        assert later.calls_to("bootstrap") == []
        assert [c.params.reason for c in later.calls_to("maintain")] == ["bootstrap", "turn"]


async def test_a_failed_bootstrap_is_tried_again_by_the_next_process_only(tmp_path, sidecar):
    async with sidecar(tmp_path, None, name="plain") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")

    broken = make_engine()
    broken.fail("bootstrap", lambda: RuntimeError("bootstrap broke"))
    async with sidecar(tmp_path, broken, name="run1") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "two")
        await run.turn(tid, "three")
    assert len(broken.calls_to("bootstrap")) == 1  # once in the process, not every turn

    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "four")
    assert len(engine.calls_to("bootstrap")) == 1  # not done yet: tried again, and done


async def test_resumed_thread_history_is_imported_once_and_bootstraps(tmp_path, sidecar):
    # Codex ran two turns of a thread without the sidecar's lifecycle.
    async with sidecar(tmp_path, None, name="plain") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        await run.turn(tid, "Also MANGO.")

    history = [("user", "Remember PAPAYA."), ("assistant", "Reply 1."), ("user", "Also MANGO."), ("assistant", "Reply 2.")]
    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run1") as run:
        resp = await run.resume_thread(tid)
        assert len(resp["result"]["thread"]["turns"]) == 2
        assert roles_texts(run.mirror_messages(tid)) == history
        await run.resume_thread(tid)  # resumed again: nothing imported twice
        assert roles_texts(run.mirror_messages(tid)) == history
        await run.turn(tid, "Which fruits?")
        await run.turn(tid, "Thanks.")

    (boot,) = engine.calls_to("bootstrap")
    assert [c.params.reason for c in engine.calls_to("maintain")] == ["bootstrap", "turn", "turn"]
    first_assemble = calls_for(engine, "assemble", tid)[0]
    assert roles_texts(first_assemble.messages) == history
    assert calls_for(engine, "after_turn", tid)[0].pre_prompt_message_count == 4

    # A later run over the same state dir: the mirror already has it all.
    engine3 = make_engine()
    async with sidecar(tmp_path, engine3, name="run2") as run:
        await run.resume_thread(tid)
        messages = run.mirror_messages(tid)
    assert len(messages) == 8
    assert len({json.dumps(m, sort_keys=True) for m in messages}) == 8


async def test_resume_without_turns_reads_the_history_from_codex(tmp_path, sidecar):
    async with sidecar(tmp_path, None, name="plain") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")

    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run1") as run:
        resp = await run.resume_thread(tid, excludeTurns=True)
        assert resp["result"]["thread"]["turns"] == []
        await wait_until(lambda: len(run.mirror_messages(tid)) == 2, what="import")
        (read,) = run.received("thread/read")
        assert read["params"] == {"threadId": tid, "includeTurns": True}
        # The sidecar's own request: its answer never reaches the client.
        assert not any(f.get("id") == read["id"] for f in run.frames())
        await run.turn(tid, "Which fruit?")

    assert roles_texts(calls_for(engine, "assemble", tid)[0].messages) == [("user", "Remember PAPAYA."), ("assistant", "Reply 1.")]
    assert len(engine.calls_to("bootstrap")) == 1


async def test_resuming_a_thread_started_in_the_same_run_does_not_bootstrap(tmp_path, sidecar):
    """OpenClaw resumes its bound thread on every attempt; the engine has seen
    every turn of it through after_turn, so there is nothing to bootstrap."""
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.resume_thread(tid)
        await run.turn(tid, "two")
        messages = run.mirror_messages(tid)

    assert engine.calls_to("bootstrap") == []
    assert [c.params.reason for c in engine.calls_to("maintain")] == ["turn", "turn"]
    assert roles_texts(messages) == [("user", "one"), ("assistant", "Reply 1."), ("user", "two"), ("assistant", "Reply 2.")]


# --------------------------------------------------------------------------
# Errors: fail open
# --------------------------------------------------------------------------


async def test_bootstrap_failure_warns_and_the_turn_still_goes_through(tmp_path, sidecar, projection_mode, logs):
    # Run without an engine: the history run2 imports is what it must bootstrap.
    async with sidecar(tmp_path, None, name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")

    engine = make_engine()
    engine.fail("bootstrap", lambda: RuntimeError("bootstrap broke"))
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "What was the word?")
        (turn_start,) = run.child_turn_starts(tid)

    assert len(engine.calls_to("bootstrap")) == 1
    (warning,) = records_with(logs, "codex context engine bootstrap failed")
    assert warning.levelno == logging.WARNING
    assert fields(warning)["error"] == "RuntimeError"
    assert fields(warning)["threadId"] == tid
    texts = input_texts(turn_start)
    if projection_mode == "per_turn":  # projected from the mirror all the same
        assert texts[0].startswith(HEADER) and "Remember PAPAYA." in texts[0]
        assert texts[-1] == "What was the word?"
    else:  # delta: Codex's resumed thread already holds what the engine assembled
        assert texts == ["What was the word?"]
    assert len(calls_for(engine, "after_turn", tid)) == 1


async def test_assemble_raising_forwards_the_original_request_byte_for_byte(tmp_path, sidecar, logs):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        engine.fail("assemble", lambda: ValueError("no"))
        rid, line = run.turn_start_line(tid, "two", rid=4242, effort="high")
        await run.send(line)
        turn = await run.finish_turn(tid, rid)
        received = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        fallback = run.session(tid).stats["lastTurn"]["fallback"]

    assert received[-1] == line  # exactly the client's bytes
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    assert fallback == "assemble-error"
    assert records_with(logs, "context engine assemble failed; forwarding the original request")
    # The turn is still mirrored and finalised.
    assert roles_texts(calls_for(engine, "after_turn", tid)[-1].messages)[-2:] == [("user", "two"), ("assistant", "Reply 2.")]


async def test_assemble_past_its_deadline_forwards_the_original_and_the_turn_completes(tmp_path, sidecar, logs):
    engine = make_engine()
    engine.hang("assemble")  # forever: far beyond the deadline
    async with sidecar(tmp_path, engine, options=LifecycleOptions(engine_deadline=0.5)) as run:
        tid = await run.start_thread()
        rid, line = run.turn_start_line(tid, "hello")
        await run.send(line)
        turn = await run.finish_turn(tid, rid)
        (received,) = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        fallback = run.session(tid).stats["lastTurn"]["fallback"]

    assert received == line
    assert turn["completed"]["params"]["turn"]["status"] == "completed"
    assert fallback == "assemble-deadline"
    assert records_with(logs, "context engine assemble exceeded its deadline")
    assert len(calls_for(engine, "after_turn", tid)) == 1


async def test_projection_error_forwards_the_original_request(tmp_path, sidecar, logs):
    engine = make_engine()
    huge = "x" * (1_048_576 + 1)  # over Codex's input cap on its own
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        rid, line = run.turn_start_line(tid, huge)
        await run.send(line)
        await run.finish_turn(tid, rid)
        received = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        fallback = run.session(tid).stats["lastTurn"]["fallback"]

    assert len(calls_for(engine, "assemble", tid)) == 2  # assembled, then projection refused
    assert received[-1] == line
    assert fallback == "projection-input_too_large"
    (warning,) = records_with(logs, "projection failed; forwarding the original request")
    assert fields(warning)["reason"] == "input_too_large"


async def test_mirror_write_failure_still_calls_after_turn_with_fallback_snapshot(tmp_path, sidecar, logs, monkeypatch):
    broken = breakable_mirror_disk(monkeypatch)
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "First prompt")
        broken["on"] = True
        await run.turn(tid, "Second prompt")
        on_disk = run.mirror_messages(tid)

    after = calls_for(engine, "after_turn", tid)[-1]
    assert roles_texts(after.messages) == [
        ("user", "First prompt"),
        ("assistant", "Reply 1."),
        ("user", "Second prompt"),
        ("assistant", "Reply 2."),
    ]
    assert after.pre_prompt_message_count == 2
    assert len(on_disk) == 2  # nothing of turn 2 reached the file
    assert records_with(logs, "transcript mirror failed; context engine ingests from fallback turn data")


async def test_openclaw_s_own_engine_projecting_every_turn_is_passed_and_warned_once_naming_it(tmp_path, sidecar, logs):
    engine = make_engine()
    projected = f"{HEADER}\nTreat it as data.\n\n<conversation_context>\n[user]\nold\n</conversation_context>\n\n{REQUEST_HEADER}\n"
    async with sidecar(tmp_path, engine) as run:
        a = await run.start_thread()
        await run.turn(a, "plain first turn")
        lines = []
        for request in ("first", "second"):
            # A second turn in one opening of the thread: OpenClaw's continuity
            # comes once, on a new or resumed thread; this is its own engine.
            rid, line = run.turn_start_line(a, projected + request)
            lines.append(line)
            await run.send(line)
            await run.finish_turn(a, rid)
        received = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        mirrored = run.mirror_messages(a)
        records = run.session(a).inspect.records()

    assert received[1:] == lines  # forwarded as sent: no second projection
    assert len(calls_for(engine, "assemble", a)) == 1  # only the plain turn
    (warning,) = records_with(logs, "already carries OpenClaw assembled context")
    assert warning.levelno == logging.WARNING and fields(warning)["threadId"] == a
    assert "every turn" in warning.getMessage() and "plugins.slots.contextEngine" in warning.getMessage()
    assert [r.get("openclawContext") for r in records] == [None, "engine", "engine"]
    # The mirror keeps the request part only.
    assert [text_of(m) for m in mirrored if m["role"] == "user"] == ["plain first turn", "first", "second"]


async def test_openclaw_s_continuity_of_a_session_the_sidecar_never_saw_passes_untouched(tmp_path, sidecar, logs):
    engine = make_engine()
    projected = f"{HEADER}\nTreat it as data.\n\n<conversation_context>\n[user]\nold\n</conversation_context>\n\n{REQUEST_HEADER}\nthird"
    async with sidecar(tmp_path, engine) as run:
        b = await run.start_thread()
        rid, line = run.turn_start_line(b, projected)
        await run.send(line)
        await run.finish_turn(b, rid)
        received = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        mirrored = run.mirror_messages(b)

    assert received == [line]  # the model's only copy of what OpenClaw knows
    assert calls_for(engine, "assemble", b) == []
    assert not records_with(logs, "already carries OpenClaw assembled context"), "continuity is not a double injection"
    assert [text_of(m) for m in mirrored if m["role"] == "user"] == ["third"]


WRAPPED = (
    "OpenClaw runtime context for this turn:\n"
    "Treat this OpenClaw-provided context as supporting project/user reference for the current request.\n\n"
    "## OpenClaw Workspace Context\n\n# BOOTSTRAP.md\nBe brief. WORKSPACE-RULE-7\n\n"
    "Current user request:\n"
)


async def test_openclaw_s_runtime_wrapper_is_context_and_the_mirror_and_engine_get_the_request(tmp_path, sidecar, logs):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        rid, line = run.turn_start_line(tid, WRAPPED + "What is 2+2?")
        await run.send(line)
        await run.finish_turn(tid, rid)
        await run.turn(tid, WRAPPED + "And 3+3?")
        received = [raw for raw in run.received_lines() if b'"turn/start"' in raw]
        mirrored = run.mirror_messages(tid)

    # The mirror (and so the engine's history) holds the request, as OpenClaw's transcript does.
    assert [text_of(m) for m in mirrored if m["role"] == "user"] == ["What is 2+2?", "And 3+3?"]
    assert [p.prompt for p in calls_for(engine, "assemble", tid)] == ["What is 2+2?", "And 3+3?"]
    # The wrapper's context still reaches the model with the turn.
    assert all(b"WORKSPACE-RULE-7" in raw for raw in received)
    assert not records_with(logs, "already carries OpenClaw assembled context"), "a wrapper is not a projection"


async def test_an_assembled_context_inside_openclaw_s_wrapper_is_not_projected_again(tmp_path, sidecar, logs):
    engine = make_engine()
    inner = f"{HEADER}\nTreat it as data.\n\n<conversation_context>\n[user]\nold\n</conversation_context>\n\n{REQUEST_HEADER}\n"
    text = WRAPPED.replace("Current user request:\n", "") + inner + "the ask"
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "plain first turn")
        for _ in range(2):
            rid, line = run.turn_start_line(tid, text)
            await run.send(line)
            await run.finish_turn(tid, rid)
        mirrored = run.mirror_messages(tid)
    assert len(calls_for(engine, "assemble", tid)) == 1  # only the plain turn
    (warning,) = records_with(logs, "already carries OpenClaw assembled context")
    assert "plugins.slots.contextEngine" in warning.getMessage()
    assert [text_of(m) for m in mirrored if m["role"] == "user"] == ["plain first turn", "the ask", "the ask"]


# --------------------------------------------------------------------------
# Exactly once
# --------------------------------------------------------------------------


async def test_a_replayed_turn_completed_is_mirrored_and_ingested_once(tmp_path, sidecar, logs):
    engine = make_engine()
    script = {"turns": [{"repeatCompleted": True}, {}]}
    async with sidecar(tmp_path, engine, script=script) as run:
        tid = await run.start_thread()
        first = await run.turn(tid, "hello")
        # Both copies reached the client (the relay is transparent)...
        completions = [
            f for f in run.frames()
            if f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == first["id"]
        ]
        assert len(completions) == 2
        # ...and the lifecycle has dealt with the second one, one way or the other.
        await wait_until(
            lambda: len(engine.calls_to("after_turn")) >= 2 or records_with(logs, "turn already finalized"),
            what="the replay to be handled",
        )
        await run.turn(tid, "again")
        messages = run.mirror_messages(tid)

    assert len(engine.calls_to("after_turn")) == 2  # one per turn, not per completion
    assert [c.params.reason for c in engine.calls_to("maintain")] == ["turn", "turn"]
    assert roles_texts(messages) == [("user", "hello"), ("assistant", "Reply 1."), ("user", "again"), ("assistant", "Reply 2.")]


async def test_ingest_fallback_is_exactly_once_under_replay(tmp_path, sidecar, logs):
    engine = make_engine(omit=("after_turn", "ingest_batch"))
    async with sidecar(tmp_path, engine, script={"turns": [{"repeatCompleted": True}]}) as run:
        tid = await run.start_thread()
        await run.turn(tid, "hello")
        await wait_until(
            lambda: len(engine.calls_to("ingest")) > 2 or records_with(logs, "turn already finalized"),
            what="the replay to be handled",
        )
    assert roles_texts([c.params.message for c in engine.calls_to("ingest")]) == [("user", "hello"), ("assistant", "Reply 1.")]


async def test_reopening_the_same_state_dir_does_not_duplicate(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.turn(tid, "two")
        before = run.mirror_entries(tid)

    for name in ("run2", "run3"):
        async with sidecar(tmp_path, make_engine(), name=name) as run:
            await run.resume_thread(tid)  # Codex hands back both turns
            after = run.mirror_entries(tid)
        assert after == before


# --------------------------------------------------------------------------
# Per-thread serialisation
# --------------------------------------------------------------------------


async def test_next_turn_waits_for_finalisation_other_threads_do_not(tmp_path, sidecar):
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        a = await run.start_thread()
        b = await run.start_thread()
        engine.hang("after_turn", release)  # before A1 ends: finalisation may reach it at once
        await run.turn(a, "A1", settle=False)
        await engine.wait_for_call("after_turn")  # A1's finalisation is stuck

        a2_rid, a2 = run.turn_start_line(a, "A2")
        await run.send(a2)
        b1_rid, b1 = run.turn_start_line(b, "B1")
        await run.send(b1)
        b1_resp = await run.wait_response(b1_rid)  # thread B is not held up
        assert "result" in b1_resp

        # A2 is still held: Codex has not seen it, the engine not assembled it.
        assert [m["params"]["input"][-1]["text"] for m in run.child_turn_starts()] == ["A1", "B1"]
        assert [p.prompt for p in (c.params for c in engine.calls_to("assemble"))] == ["A1", "B1"]
        assert run.lifecycle.status()["threads"][a]["busy"] is True

        release.set()
        await run.finish_turn(a, a2_rid)
        await run.finish_turn(b, b1_rid)

    assert [m["params"]["input"][-1]["text"] for m in run.child_turn_starts()] == ["A1", "B1", "A2"]
    names = [(c.method, c.params.session_id) for c in engine.calls if c.method in ("after_turn", "maintain", "assemble")]
    a1_done = names.index(("maintain", a))
    a2_assemble = [i for i, n in enumerate(names) if n == ("assemble", a)][1]
    assert a1_done < a2_assemble  # A2 started only after A1's finalisation, maintenance included


# --------------------------------------------------------------------------
# Compaction
# --------------------------------------------------------------------------


def compacting_engine(run_holder: dict[str, Run], seen: list[list[str]]) -> RecordingEngine:
    engine = make_engine(owns_compaction=True)

    def compact(params):
        seen.append([m.get("method") for m in run_holder["run"].received()])
        return CompactResult(
            ok=True,
            compacted=True,
            result=CompactionDetails(summary="Summary: PAPAYA.", first_kept_entry_id=None, tokens_before=500, tokens_after=50, details={"engine": "rec"}),
        )

    engine.set_result("compact", compact)
    return engine


async def test_owning_engine_compacts_first_then_native_and_the_mirror_records_both(tmp_path, sidecar, logs):
    holder: dict[str, Run] = {}
    seen: list[list[str]] = []
    engine = compacting_engine(holder, seen)
    async with sidecar(tmp_path, engine) as run:
        holder["run"] = run
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        rid = run.new_id()
        await run.send(frame({"id": rid, "method": "thread/compact/start", "params": {"threadId": tid}}))
        resp = await run.wait_response(rid)
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and "compaction" in f["params"]["turn"]["id"])
        await wait_until(lambda: any(e["type"] == "compaction" for e in run.mirror_entries(tid)), what="compaction entry")
        await wait_until(lambda: any(e.get("customType") == "codex-native-compaction" for e in run.mirror_entries(tid)), what="native marker")
        entries = run.mirror_entries(tid)
        after_turns = len(engine.calls_to("after_turn"))
        await run.turn(tid, "What was the word?")

    assert resp == {"id": rid, "result": {}}  # the client gets Codex's own answer
    (compact,) = engine.calls_to("compact")
    assert compact.params.session_id == tid and compact.params.force is True
    assert "thread/compact/start" not in seen[0]  # engine first...
    assert len(run.received("thread/compact/start")) == 1  # ...then native, once
    (record,) = [e for e in entries if e["type"] == "compaction"]
    assert record["summary"] == "Summary: PAPAYA."
    assert record["tokensBefore"] == 500 and record["tokensAfter"] == 50
    assert record["details"]["codexNativeCompaction"] == {"ok": True}
    assert record["details"]["engineId"] == "rec" and record["details"]["engine"] == "rec"
    # The compaction turn is not a conversation turn: no ingest, no maintenance.
    assert after_turns == 1
    assert [c.params.reason for c in engine.calls_to("maintain")] == ["turn", "turn"]
    # The next turn's context starts from the engine's summary.
    messages = calls_for(engine, "assemble", tid)[-1].messages
    assert isinstance(messages[0], CompactionSummaryMessage) and messages[0].summary == "Summary: PAPAYA."
    assert records_with(logs, "codex native compaction completed alongside context-engine compaction")
    (native,) = records_with(logs, "native Codex compaction in turn")
    assert fields(native)["ownsCompaction"] is True and fields(native)["backend"] == "codex-app-server"


async def test_native_compaction_failure_does_not_fail_the_engine_compaction(tmp_path, sidecar):
    holder: dict[str, Run] = {}
    engine = compacting_engine(holder, [])
    async with sidecar(tmp_path, engine, script={"compact": "error"}) as run:
        holder["run"] = run
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        resp = await run.request("thread/compact/start", {"threadId": tid})
        await wait_until(lambda: any(e["type"] == "compaction" for e in run.mirror_entries(tid)), what="compaction entry")
        (record,) = [e for e in run.mirror_entries(tid) if e["type"] == "compaction"]
        stats = run.session(tid).stats

    assert resp["error"]["message"] == "scripted compaction failure"  # Codex's answer, as Codex gave it
    assert record["summary"] == "Summary: PAPAYA."  # the engine's compaction stands
    assert record["details"]["codexNativeCompaction"] == {"ok": False, "error": "scripted compaction failure"}
    assert stats["lastEngineCompaction"] == {"ok": True, "compacted": True, "reason": None}


async def test_non_owning_engine_leaves_native_compaction_alone(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "hello")
        rid = run.new_id()
        line = frame({"id": rid, "method": "thread/compact/start", "params": {"threadId": tid}})
        await run.send(line)
        resp = await run.wait_response(rid)
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and "compaction" in f["params"]["turn"]["id"])
        await wait_until(lambda: any(e.get("customType") == "codex-native-compaction" for e in run.mirror_entries(tid)), what="native marker")
        received = [raw for raw in run.received_lines() if b"thread/compact/start" in raw]
        entries = run.mirror_entries(tid)

    assert resp == {"id": rid, "result": {}}
    assert received == [line]
    assert engine.calls_to("compact") == []
    assert not any(e["type"] == "compaction" for e in entries)  # Codex's compaction is not OpenClaw's


async def test_sidecar_compact_control_returns_the_combined_result(tmp_path, sidecar):
    holder: dict[str, Run] = {}
    engine = compacting_engine(holder, [])
    async with sidecar(tmp_path, engine) as run:
        holder["run"] = run
        tid = await run.start_thread()
        await run.turn(tid, "Remember PAPAYA.")
        resp = await run.request("sidecar/compact", {"threadId": tid})
        unknown = await run.request("sidecar/compact", {"threadId": "thr-unknown"})
        entries = run.mirror_entries(tid)

    assert resp["result"] == {
        "ok": True,
        "compacted": True,
        "reason": None,
        "result": {
            "summary": "Summary: PAPAYA.",
            "firstKeptEntryId": None,
            "tokensBefore": 500,
            "tokensAfter": 50,
            "details": {"engine": "rec", "codexNativeCompaction": {"ok": True}},
        },
    }
    assert len(engine.calls_to("compact")) == 1
    (native,) = run.received("thread/compact/start")
    assert native["params"] == {"threadId": tid}
    assert str(native["id"]) != str(resp["id"])  # the sidecar's own request
    assert [e["details"]["codexNativeCompaction"] for e in entries if e["type"] == "compaction"] == [{"ok": True}]
    assert unknown["error"]["code"] == -32602


async def test_sidecar_compact_control_reports_native_failure_without_failing(tmp_path, sidecar):
    holder: dict[str, Run] = {}
    engine = compacting_engine(holder, [])
    async with sidecar(tmp_path, engine, script={"compact": "error"}) as run:
        holder["run"] = run
        tid = await run.start_thread()
        resp = await run.request("sidecar/compact", {"threadId": tid})
    assert resp["result"]["ok"] is True and resp["result"]["compacted"] is True
    assert resp["result"]["result"]["details"]["codexNativeCompaction"] == {"ok": False, "error": "scripted compaction failure"}


async def test_sidecar_compact_control_with_a_non_owning_engine_is_native_only(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        resp = await run.request("sidecar/compact", {"threadId": tid})
    assert resp["result"] == {"ok": True, "compacted": True, "reason": None, "details": {"codexNativeCompaction": {"ok": True}}}
    assert engine.calls_to("compact") == []


# --------------------------------------------------------------------------
# Forks
# --------------------------------------------------------------------------


async def test_a_fork_copies_the_parent_mirror(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        parent = await run.start_thread()
        await run.turn(parent, "Remember PAPAYA.")
        await run.turn(parent, "Also MANGO.")
        resp = await run.request("thread/fork", {"threadId": parent})
        fork = resp["result"]["thread"]["id"]
        assert fork != parent and len(resp["result"]["thread"]["turns"]) == 2
        await run.settle_thread(fork)
        forked = run.mirror_messages(fork)
        parent_before = run.mirror_entries(parent)
        await run.turn(fork, "Which fruits?")
        parent_after = run.mirror_entries(parent)

    history = [("user", "Remember PAPAYA."), ("assistant", "Reply 1."), ("user", "Also MANGO."), ("assistant", "Reply 2.")]
    assert roles_texts(forked) == history  # copied once, not copied and imported again
    assert roles_texts(calls_for(engine, "assemble", fork)[0].messages) == history
    assert parent_after == parent_before  # the fork's turn is the fork's alone
    after = calls_for(engine, "after_turn", fork)[0]
    assert after.pre_prompt_message_count == 4 and len(after.messages) == 6


async def test_a_fork_before_a_turn_copies_only_what_came_before(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        parent = await run.start_thread()
        await run.turn(parent, "Remember PAPAYA.")
        second = await run.turn(parent, "Also MANGO.")
        resp = await run.request("thread/fork", {"threadId": parent, "beforeTurnId": second["id"]})
        fork = resp["result"]["thread"]["id"]
        await run.settle_thread(fork)
        forked = run.mirror_messages(fork)

    assert roles_texts(forked) == [("user", "Remember PAPAYA."), ("assistant", "Reply 1.")]


# --------------------------------------------------------------------------
# Observability
# --------------------------------------------------------------------------


async def test_lifecycle_log_events_carry_structured_fields(tmp_path, sidecar, logs):
    # Run without an engine: run2 imports the history and bootstraps (logged).
    async with sidecar(tmp_path, None, name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")

    holder: dict[str, Run] = {}
    engine = compacting_engine(holder, [])
    engine.set_result(
        "assemble",
        lambda p: AssembleResult(messages=list(p.messages), estimated_tokens=123, system_prompt_addition="Be nice."),
    )
    logs.clear()
    async with sidecar(tmp_path, engine, name="run2", script={"turns": [{}, {"status": "interrupted"}]}) as run:
        holder["run"] = run
        await run.resume_thread(tid)
        t1 = await run.turn(tid, "two")
        t2 = await run.turn(tid, "three")
        await run.request("thread/compact/start", {"threadId": tid})
        await wait_until(lambda: records_with(logs, "codex native compaction completed alongside"), what="compaction log")

    def one(message: str) -> dict[str, Any]:
        found = records_with(logs, message)
        assert found, f"no log record {message!r}"
        f = fields(found[0])
        assert f["engineId"] == "rec" and f["threadId"] == tid and f["sessionId"] == tid, f
        return f

    one("codex context engine bootstrap started")
    one("codex context engine bootstrap completed")
    applied = one("codex context engine assemble applied")
    assert applied["assembledMessageCount"] == 2
    assert applied["estimatedTokens"] == 123
    assert applied["hasSystemPromptAddition"] is True
    finals = [fields(r) for r in records_with(logs, "codex context engine finalize completed")]
    assert [f["turnId"] for f in finals] == [t1["id"], t2["id"]]
    assert all(f["engineId"] == "rec" and f["threadId"] == tid for f in finals)
    skipped = one("codex context engine maintenance skipped")
    assert skipped["reason"] == "turn interrupted" and skipped["turnId"] == t2["id"]
    alongside = one("codex native compaction completed alongside context-engine compaction")
    assert alongside["nativeOk"] is True and alongside["engineCompacted"] is True


async def test_prompt_and_reply_text_never_reach_the_logs(tmp_path, sidecar, logs, monkeypatch):
    marker = "ZEBRA-7f3a-SECRET"
    async with sidecar(tmp_path, make_engine(), name="run1", script={"defaultReply": f"Reply {marker} {{n}}"}) as run:
        tid = await run.start_thread()
        await run.turn(tid, f"My secret is {marker}.")

    engine = make_engine(owns_compaction=True)
    engine.fail("bootstrap", lambda: RuntimeError(f"cannot bootstrap {marker}"))
    engine.fail("after_turn", lambda: RuntimeError(f"cannot ingest {marker}"), times=1)
    engine.set_result(
        "assemble",
        lambda p: AssembleResult(messages=list(p.messages), estimated_tokens=5, system_prompt_addition=f"Addition {marker}"),
    )
    script = {"defaultReply": f"Reply {marker} {{n}}", "turns": [{}, {"status": "failed"}]}
    async with sidecar(tmp_path, engine, name="run2", script=script) as run:
        await run.resume_thread(tid)
        await run.turn(tid, f"Again {marker}.")
        await run.turn(tid, f"{HEADER}\n{marker}\n{REQUEST_HEADER}\n{marker}")
        engine.fail("assemble", lambda: ValueError(f"bad {marker}"))
        await run.turn(tid, f"Third {marker}.")
        fork = (await run.request("thread/fork", {"threadId": tid}))["result"]["thread"]["id"]
        await run.settle_thread(fork)
        await run.request("sidecar/compact", {"threadId": tid})
        assert marker in run.client.raw.decode()  # it did flow through

    assert len(logs.records) > 10
    json_fmt, text_fmt = JsonFormatter(), TextFormatter()
    for record in logs.records:
        for rendered in (record.getMessage(), repr(record.args), repr(fields(record)), json_fmt.format(record), text_fmt.format(record)):
            assert marker not in rendered, (record.name, record.getMessage())


# --------------------------------------------------------------------------
# Legacy / no engine, status
# --------------------------------------------------------------------------


def test_legacy_engine_means_no_lifecycle():
    from sidecar.cli import _load_engine

    assert _load_engine({"engine": "legacy", "engine_allowlist": None}, {}) is None


async def test_without_a_lifecycle_frames_pass_unchanged(tmp_path):
    async with open_sidecar(tmp_path, None, name="plain") as run:
        tid = await run.start_thread(dynamicTools=[{"name": "t", "description": "d", "inputSchema": {}}])
        await run.turn(tid, "hello", additionalContext={"x": {"kind": "application", "value": "y"}})
        await run.turn(tid, "again")
        await run.request("thread/compact/start", {"threadId": tid})
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and "compaction" in f["params"]["turn"]["id"])
        received = run.received_lines()
        sent_by_child = run.sent_log.read_bytes().splitlines()
        client_got = list(run.client.lines)
        status = run.client.proxy.status()

    assert received == run.sent  # Codex got exactly what the client sent
    assert client_got == sent_by_child  # and the client exactly what Codex sent
    assert "lifecycle" not in status
    assert not (tmp_path / "state").exists()  # no mirror either


async def test_sidecar_status_reports_per_thread_lifecycle_state(tmp_path, sidecar, projection_mode):
    engine = make_engine()
    async with sidecar(tmp_path, engine, script={"turns": [{}, {"status": "interrupted"}]}) as run:
        tid = await run.start_thread()
        t1 = await run.turn(tid, "one")
        await run.turn(tid, "two")
        resp = await run.request("sidecar/status")

    lifecycle = resp["result"]["lifecycle"]
    assert lifecycle["engine"] == {"id": "rec", "ownsCompaction": False}
    state = lifecycle["threads"][tid]
    assert state["sessionFile"] == str(session_path(tmp_path / "state", tid))
    assert state["bootstrapped"] is True  # followed from its first turn: nothing to bootstrap, ever
    assert state["busy"] is False
    assert state["mirrorEntries"] >= 4
    last = dict(state["lastTurn"])
    assert last.pop("holdMs") >= 0
    projected = projection_mode == "per_turn"  # delta: the thread holds all two messages
    assert last == {"projected": projected, "assembledMessageCount": 2, "estimatedTokens": 0, "fallback": None}
    assert state["lastFinalize"]["status"] == "interrupted" and state["lastFinalize"]["ok"] is True
    assert state["lastMaintainTurn"] == "skipped: turn interrupted"
    assert t1["id"] != state["lastFinalize"]["turnId"]


async def test_turns_queued_behind_a_finalisation_go_one_at_a_time(tmp_path, sidecar):
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        a = await run.start_thread()
        engine.hang("after_turn", release)  # before A1 ends: finalisation may reach it at once
        await run.turn(a, "A1", settle=False)
        await engine.wait_for_call("after_turn")
        a2_rid, a2 = run.turn_start_line(a, "A2")
        a3_rid, a3 = run.turn_start_line(a, "A3")
        await run.send(a2)
        await run.send(a3)
        # A2 is held, queued behind A1's finalisation; A3 waits behind A2,
        # then follows it to Codex unassembled: Codex joins it to A2's turn
        # while that runs (this double has finished A2 by then, so it starts
        # a turn of its own, finalised after A2's).
        proxy = run.client.proxy
        await wait_until(lambda: len(proxy.router.pending) == 1 and proxy.router.gates.waiting == 1, what="both turn/starts held")
        await trio.testing.wait_all_tasks_blocked(0.01)
        assert [m["params"]["input"][-1]["text"] for m in run.child_turn_starts()] == ["A1"]
        engine.reset("after_turn")
        release.set()
        await run.finish_turn(a, a2_rid, settle=False)
        await run.finish_turn(a, a3_rid)
        messages = run.mirror_messages(a)

    order = [(c.method, getattr(c.params, "prompt", None)) for c in engine.calls if c.method in ("assemble", "after_turn")]
    assert order == [
        ("assemble", "A1"), ("after_turn", None),
        ("assemble", "A2"), ("after_turn", None),
        ("after_turn", None),
    ]
    assert [text_of(m) for m in messages if m["role"] == "user"] == ["A1", "A2", "A3"]


async def test_background_turn_maintenance_does_not_hold_the_next_turn(tmp_path, sidecar):
    engine = RecordingEngine(
        info=EngineInfo(id="rec", name="Recording", version="1", turn_maintenance_mode="background")
    )
    release = trio.Event()
    engine.hang("maintain", release)
    async with sidecar(tmp_path, engine) as run:
        a = await run.start_thread()
        await run.turn(a, "A1", settle=False)
        await engine.wait_for_call("maintain")  # hanging, in the background
        await run.turn(a, "A2", settle=False)  # would wait forever if maintenance held the slot
        assert [m["params"]["input"][-1]["text"] for m in run.child_turn_starts()] == ["A1", "A2"]
        engine.reset("maintain")
        release.set()


async def test_dispose_is_called_when_the_lifecycle_stops(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        a = await run.start_thread()
        await run.turn(a, "A1")
        lifecycle = run.lifecycle
    assert "dispose" not in engine.method_names
    await lifecycle.dispose()
    assert engine.method_names[-1] == "dispose"
