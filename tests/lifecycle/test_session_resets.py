"""OpenClaw's `/new` and `/reset` (issue 33), and relay ids that change per
process, against `fake_codex`.

OpenClaw keeps the session key and id on a reset (so the hook relay id),
writes a reset marker into its own transcript, retires the Codex thread and
starts a new one, whose first turn carries no continuity projection: its
context starts at the marker. The new thread begins a new engine session:
nothing of the old one is assembled, projected, handed to `after_turn` or
told the engine; the relay id names the new session from then on, across
processes and rotations; nothing of the old session is deleted.
"""

from __future__ import annotations

import hashlib
import json

from sidecar.lifecycle.resets import RESET_ENTRY
from sidecar.projection import CONTEXT_HEADER, REQUEST_HEADER
from sidecar.store import bindings
from sidecar.store.mirror import session_path
from tests.support.lifecycle import input_texts, make_engine, records_with, roles_texts

RID = "codex-" + "ab12" * 10
FACT = "Remember the word heron."


def hooks(rid: str) -> dict:
    command = f"exec 'node' 'entry.js' 'hooks' 'relay' '--provider' 'codex' '--relay-id' '{rid}' '--generation' 'g1' '--event' 'permission_request'"
    return {"config": {"features.hooks": True, "hooks.PermissionRequest": [{"hooks": [{"type": "command", "command": command}]}]}}


def v2(generation: str) -> str:
    """A relay id of OpenClaw's v2 shape: the generation hashed in."""
    return "codex-" + hashlib.sha256(f"openclaw:codex:native-hook-relay:v2\0main\0agent:main:main\0{generation}".encode()).hexdigest()[:40]


def continuity(history: list[tuple[str, str]], prompt: str) -> str:
    """OpenClaw's continuity projection of ``history`` for ``prompt`` (a rotation's first turn)."""
    body = "\n\n".join(f"[{role}]\n{text}" for role, text in history)
    return f"{CONTEXT_HEADER}\n\n<conversation_context>\n{body}\n</conversation_context>\n\n{REQUEST_HEADER}\n{prompt}"


def entries(state_dir, session_id: str) -> list[dict]:
    return [json.loads(line) for line in session_path(state_dir, session_id).read_bytes().splitlines() if line.strip()]


def mirrored(state_dir, session_id: str) -> list[tuple[str, str]]:
    return roles_texts([e["message"] for e in entries(state_dir, session_id) if e.get("type") == "message"])


def users(state_dir, session_id: str) -> list[str]:
    return [t for r, t in mirrored(state_dir, session_id) if r == "user"]


def everything_the_engine_got(engine) -> str:
    """Every message text and prompt of every engine call."""
    out = []
    for call in engine.calls:
        params = call.params
        for message in getattr(params, "messages", None) or []:
            out.append(json.dumps(roles_texts([message])))
        out.append(str(getattr(params, "prompt", "")))
    return "\n".join(out)


async def test_a_new_thread_without_openclaw_s_projection_after_history_begins_a_new_engine_session(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        await run.turn(t1, "What is 2+2?")
        before = len(engine.calls)
        # /new: OpenClaw retires t1 and starts t2, same relay id, no projection.
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, "Which word did I ask you to remember?")
        await run.turn(t2, "Thanks.")
        model_saw = [input_texts(t) for t in run.child_turn_starts(t2)]
        after = engine.calls[before:]

    state = tmp_path / "state"
    # The engine: a new session, told once, never given the old turns.
    (reset,) = engine.calls_to("on_session_reset")
    assert (reset.params.session_id, reset.params.previous_session_id) == (t2, RID)
    assert reset.params.session_key == t2 and reset.params.previous_session_key == RID
    assert reset.params.session_file == str(session_path(state, t2))
    assert {c.params.session_id for c in after if c.params is not None} == {t2}
    assert "heron" not in "\n".join(json.dumps(roles_texts(getattr(c.params, "messages", []) or [])) for c in after)
    first, second = [c.params for c in engine.calls_to("assemble")[2:]]
    assert first.messages == [] and [t for r, t in roles_texts(second.messages) if r == "user"] == ["Which word did I ask you to remember?"]
    assert [t for r, t in roles_texts(engine.calls_to("after_turn")[-1].params.messages) if r == "user"] == [
        "Which word did I ask you to remember?",
        "Thanks.",
    ]
    # The model: nothing of the old session.
    assert not any("heron" in text for texts in model_saw for text in texts)
    # The mirror: both transcripts, the reset recorded in each; nothing deleted.
    assert users(state, RID) == [FACT, "What is 2+2?"]
    assert users(state, t2) == ["Which word did I ask you to remember?", "Thanks."]
    (old_mark,) = [e for e in entries(state, RID) if e.get("customType") == RESET_ENTRY]
    (new_mark,) = [e for e in entries(state, t2) if e.get("customType") == RESET_ENTRY]
    assert old_mark["data"] == {"nextSessionId": t2, "threadId": t2}
    assert new_mark["data"] == {"previousSessionId": RID, "threadId": t2}
    assert bindings.load(state, t1) == bindings.Binding(t1, RID, "relay")
    assert bindings.load(state, t2) == bindings.Binding(t2, t2, "reset")
    assert bindings.load_relay(state, RID) == bindings.RelaySession(RID, t2, t2, "reset")


async def test_the_new_session_sticks_across_processes_and_the_next_rotation(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))  # /new
        await run.turn(t2, "Hello again.")

    # --local: a new process resumes the thread of the new session.
    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(t2, **hooks(RID))
        await run.turn(t2, "What is 3+3?")
        # A rotation (web search off): OpenClaw renders its post-reset transcript.
        t3 = await run.start_thread(**hooks(RID))
        post_reset = mirrored(run.state_dir, t2)
        await run.turn(t3, continuity(post_reset, "And 4+4?"))
        rotated = input_texts(run.child_turn_starts(t3)[0])

    state = tmp_path / "state"
    assert {c.params.session_id for c in engine.calls if c.params is not None} == {t2}
    assert engine.calls_to("on_session_reset") == []  # a rotation is no reset
    assert "heron" not in everything_the_engine_got(engine)
    assert not any("heron" in text for text in rotated)
    assert users(state, t2) == ["Hello again.", "What is 3+3?", "And 4+4?"]
    assert users(state, RID) == [FACT]
    assert bindings.load(state, t3) == bindings.Binding(t3, t2, "relay")
    assert {b.thread for b in bindings.threads_of(state, t2)} == {t2, t3}


async def test_a_second_reset_of_the_session_begins_another_and_keeps_both_before_it(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, "Remember the word otter.")
        t3 = await run.start_thread(**hooks(RID))
        await run.turn(t3, "Which words do you know?")

    state = tmp_path / "state"
    assert [(c.params.previous_session_id, c.params.session_id) for c in engine.calls_to("on_session_reset")] == [(RID, t2), (t2, t3)]
    assert engine.calls_to("assemble")[-1].params.messages == []
    assert (users(state, RID), users(state, t2), users(state, t3)) == ([FACT], ["Remember the word otter."], ["Which words do you know?"])
    assert bindings.load_relay(state, RID).session == t3


async def test_an_engine_without_reset_still_gets_a_new_empty_session(tmp_path, sidecar):
    engine = make_engine(omit=["on_session_reset"])
    async with sidecar(tmp_path, engine) as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, "Hello.")

    last = engine.calls_to("assemble")[-1].params
    assert (last.session_id, last.messages) == (t2, [])


async def test_an_engine_whose_reset_fails_still_gets_the_new_session_and_the_turn_goes_on(tmp_path, sidecar, logs):
    engine = make_engine()
    engine.fail("on_session_reset", RuntimeError("boom"))
    async with sidecar(tmp_path, engine) as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, "Hello.")
        (turn_start,) = run.child_turn_starts(t2)

    assert engine.calls_to("assemble")[-1].params.session_id == t2
    assert input_texts(turn_start)[-1].endswith("Hello.")
    assert records_with(logs, "context engine reset failed")


async def test_a_rotation_that_renders_the_transcript_is_no_reset(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, continuity(mirrored(run.state_dir, RID), "Which word?"))

    assert engine.calls_to("on_session_reset") == []
    assert [c.params.session_id for c in engine.calls_to("assemble")] == [RID, RID]
    assert bindings.load_relay(tmp_path / "state", RID) is None


async def test_a_reset_whose_relay_record_a_kill_lost_is_repaired_when_the_thread_opens_again(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        t1 = await run.start_thread(**hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(**hooks(RID))
        await run.turn(t2, "Hello.")
    state = tmp_path / "state"
    bindings.relay_path(state, RID).unlink()  # killed between the binding and the relay's record

    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(t2, **hooks(RID))
        await run.turn(t2, "Still there?")
        t3 = await run.start_thread(**hooks(RID))
        await run.turn(t3, continuity(mirrored(run.state_dir, t2), "And now?"))

    assert {c.params.session_id for c in engine.calls if c.params is not None} == {t2}
    assert bindings.load_relay(state, RID).session == t2


# -- relay ids that change per process (OpenClaw's v2 hash with a generation)


async def test_relay_ids_that_change_every_process_keep_the_session_through_bindings_and_content(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        t1 = await run.start_thread(**hooks(v2("1")))
        await run.turn(t1, FACT)
    engine2 = make_engine()
    async with sidecar(tmp_path, engine2, name="run2") as run:
        await run.resume_thread(t1, **hooks(v2("2")))  # another process, another relay id
        await run.turn(t1, "What is 2+2?")
    engine3 = make_engine()
    async with sidecar(tmp_path, engine3, name="run3") as run:
        # A rotation: a new binding, a relay id nothing knows; OpenClaw renders its transcript.
        t2 = await run.start_thread(**hooks(v2("3")))
        await run.turn(t2, continuity(mirrored(run.state_dir, v2("1")), "Which word?"))
    engine4 = make_engine()
    async with sidecar(tmp_path, engine4, name="run4") as run:
        await run.resume_thread(t2, **hooks(v2("4")))
        await run.turn(t2, "Thanks.")

    state = tmp_path / "state"
    session = v2("1")
    for engine in (engine2, engine3, engine4):
        assert {c.params.session_id for c in engine.calls_to("assemble")} == {session}
    assert [t for r, t in roles_texts(engine3.calls_to("assemble")[0].params.messages) if r == "user"] == [FACT, "What is 2+2?"]
    assert users(state, session) == [FACT, "What is 2+2?", "Which word?", "Thanks."]
    assert bindings.load(state, t2) == bindings.Binding(t2, session, "continuity")
    assert bindings.load_relay(state, v2("3")).session == session
    assert not session_path(state, v2("3")).exists()  # the provisional transcript is gone
    assert engine3.calls_to("on_session_reset") == []


async def test_a_reset_under_relay_ids_that_change_is_a_new_session_with_nothing_of_the_old(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        t1 = await run.start_thread(**hooks(v2("1")))
        await run.turn(t1, FACT)
    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:
        t2 = await run.start_thread(**hooks(v2("2")))  # /new: a new binding, no projection
        await run.turn(t2, "Hello.")
        (turn_start,) = run.child_turn_starts(t2)

    assert engine.calls_to("assemble")[0].params.session_id == v2("2")
    assert engine.calls_to("assemble")[0].params.messages == []
    assert not any("heron" in t for t in input_texts(turn_start))
    assert users(tmp_path / "state", v2("1")) == [FACT]


TOOLS = [{"type": "function", "name": "message", "description": "d", "inputSchema": {"type": "object"}}]


async def test_the_thread_s_tools_are_known_to_the_new_session_in_later_processes(tmp_path, sidecar):
    async with sidecar(tmp_path, make_engine(), name="run1") as run:
        t1 = await run.start_thread(dynamicTools=TOOLS, **hooks(RID))
        await run.turn(t1, FACT)
        t2 = await run.start_thread(dynamicTools=TOOLS, **hooks(RID))  # /new
        await run.turn(t2, "Hello.")
    engine = make_engine()
    async with sidecar(tmp_path, engine, name="run2") as run:
        await run.resume_thread(t2, **hooks(RID))  # --local: no dynamicTools on a resume
        await run.turn(t2, "Again.")

    (assemble,) = engine.calls_to("assemble")
    assert assemble.params.session_id == t2
    assert assemble.params.available_tools == frozenset({"message"})
