"""A ``turn/start`` on a thread whose turn is still running joins that turn,
as Codex does (issue 25; seen with codex 0.169.0: the same turn id back at
once, the input a further ``userMessage`` item of the running turn). With an
engine the sidecar keeps that meaning: the request goes to Codex at once,
unchanged, and its input is mirrored and ingested with the running turn,
once. The fake app-server (``children/fake_codex.py``) joins like Codex.
"""

from __future__ import annotations

import trio

from sidecar.session.options import LifecycleOptions
from tests.support.lifecycle import calls_for, frame, make_engine, roles_texts, wait_until

JOIN_WAIT = 5.0
"""A join is answered at once; the old gate held it until the turn ended
(never, for a HOLD turn): long enough for a loaded machine, short enough to fail."""


async def test_a_turn_start_during_a_running_turn_joins_it_unchanged_and_is_mirrored_once(tmp_path, sidecar):
    engine = make_engine()
    async with sidecar(tmp_path, engine) as run:
        thread = await run.start_thread()
        first_rid, first = run.turn_start_line(thread, "first HOLD")
        await run.send(first)
        turn_id = (await run.wait_response(first_rid))["result"]["turn"]["id"]

        join_rid, join = run.turn_start_line(thread, "and one more thing")
        await run.send(join)
        with trio.fail_after(JOIN_WAIT):
            answer = await run.wait_response(join_rid)
        assert answer["result"]["turn"]["id"] == turn_id  # the running turn, not a new one
        assert join in run.received_lines()  # byte for byte: no projection, no rewrite
        assert len(engine.calls_to("assemble")) == 1  # the join assembles nothing

        release_rid, release = run.turn_start_line(thread, "RELEASE now")
        await run.send(release)
        done = await run.finish_turn(thread, release_rid)
        assert done["id"] == turn_id

        assert len(engine.calls_to("assemble")) == 1
        users = [text for role, text in roles_texts(run.mirror_messages(thread)) if role == "user"]
        assert users == ["first HOLD", "and one more thing", "RELEASE now"]  # each once, in order
        (after,) = calls_for(engine, "after_turn", thread)
        assert after.pre_prompt_message_count == 0
        assert [text for role, text in roles_texts(after.messages) if role == "user"] == users

        # The thread is free again: the next turn/start is a turn of its own, assembled.
        # (Its projected history names HOLD, so the fake keeps it running.)
        nxt_rid, nxt = run.turn_start_line(thread, "a new turn")
        await run.send(nxt)
        assert (await run.wait_response(nxt_rid))["result"]["turn"]["id"] != turn_id
        assert len(engine.calls_to("assemble")) == 2
        assert calls_for(engine, "assemble", thread)[-1].prompt == "a new turn"


async def test_a_turn_start_sent_while_the_first_is_held_follows_it_and_joins_without_assembling(tmp_path, sidecar):
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        thread = await run.start_thread()
        await run.settle_thread(thread)
        engine.hang("assemble", release)
        first_rid, first = run.turn_start_line(thread, "first HOLD")
        await run.send(first)
        await engine.wait_for_call("assemble")
        join_rid, join = run.turn_start_line(thread, "second")
        await run.send(join)
        await trio.sleep(0.2)
        assert run.child_turn_starts(thread) == []  # both wait while the first assembles

        release.set()
        with trio.fail_after(JOIN_WAIT):
            first_answer = await run.wait_response(first_rid)
            join_answer = await run.wait_response(join_rid)
        # Codex saw them in the client's order, so it joined the second to the first.
        assert [m["id"] for m in run.child_turn_starts(thread)] == [first_rid, join_rid]
        assert join_answer["result"]["turn"]["id"] == first_answer["result"]["turn"]["id"]
        assert join in run.received_lines()
        assert len(engine.calls_to("assemble")) == 1

        engine.reset("assemble")
        await run.request("turn/interrupt", {"threadId": thread, "turnId": first_answer["result"]["turn"]["id"]})
        await run.wait_frame(lambda f: f.get("method") == "turn/completed")
        await run.finalized(thread, first_answer["result"]["turn"]["id"])
        users = [text for role, text in roles_texts(run.mirror_messages(thread)) if role == "user"]
        assert users == ["first HOLD", "second"]


async def test_a_turn_start_behind_a_finalising_turn_is_still_a_turn_of_its_own(tmp_path, sidecar):
    """Once Codex said the turn completed, a turn/start starts a new turn in
    Codex too: the sidecar holds and assembles it as before."""
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        thread = await run.start_thread()
        engine.hang("after_turn", release)
        first = await run.turn(thread, "one", settle=False)
        await engine.wait_for_call("after_turn")
        rid, line = run.turn_start_line(thread, "two")
        await run.send(line)
        await trio.sleep(0.2)
        assert len(run.child_turn_starts(thread)) == 1  # held behind the finalisation
        release.set()
        second = await run.finish_turn(thread, rid)
        assert second["id"] != first["id"]
        await wait_until(lambda: len(engine.calls_to("assemble")) == 2, what="second assemble")


async def test_a_join_codex_starts_as_a_turn_of_its_own_is_tracked_so_later_input_joins_it(tmp_path, sidecar):
    """The first turn/start is refused by Codex after the second was sent
    behind it as a join: Codex starts a turn for the second. The sidecar
    tracks that turn, so a third turn/start joins it, and mirrors it."""
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        thread = await run.start_thread()
        await run.settle_thread(thread)
        engine.hang("assemble", release)
        bad_rid = run.new_id()
        bad = frame({"id": bad_rid, "method": "turn/start", "params": {"threadId": thread, "input": [{"type": "no-such-input"}]}})
        await run.send(bad)
        await engine.wait_for_call("assemble")
        second_rid, second = run.turn_start_line(thread, "second HOLD")
        await run.send(second)
        release.set()
        assert "error" in await run.wait_response(bad_rid)
        turn_id = (await run.wait_response(second_rid))["result"]["turn"]["id"]
        assert second in run.received_lines()  # unassembled: sent as a join
        third_rid, third = run.turn_start_line(thread, "third RELEASE")
        await run.send(third)
        with trio.fail_after(JOIN_WAIT):
            assert (await run.wait_response(third_rid))["result"]["turn"]["id"] == turn_id
        assert third in run.received_lines()
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == turn_id)
        await run.finalized(thread, turn_id)
        assert len(engine.calls_to("assemble")) == 1
        users = [text for role, text in roles_texts(run.mirror_messages(thread)) if role == "user"]
        assert users == ["second HOLD", "third RELEASE"]


async def test_an_interrupt_sent_while_a_turn_start_is_held_reaches_codex_after_it(tmp_path, sidecar):
    """turn/interrupt keeps Codex's meaning behind a held turn/start: Codex
    sees the two in the client's order (it then answers the interrupt as it
    would have without the sidecar)."""
    engine = make_engine()
    release = trio.Event()
    async with sidecar(tmp_path, engine) as run:
        thread = await run.start_thread()
        first = await run.turn(thread, "warm up")
        engine.hang("assemble", release)
        rid, line = run.turn_start_line(thread, "stop me HOLD")
        await run.send(line)
        await engine.wait_for_call("assemble", 2)
        irid = run.new_id()
        await run.send(frame({"id": irid, "method": "turn/interrupt", "params": {"threadId": thread, "turnId": first["id"]}}))
        await trio.sleep(0.2)
        methods = [m.get("method") for m in run.received() if m.get("method") in ("turn/start", "turn/interrupt")]
        assert methods == ["turn/start"]  # the held one has not gone yet, nor the interrupt behind it
        release.set()
        with trio.fail_after(JOIN_WAIT):
            await run.wait_response(rid)
            await run.wait_response(irid)
        methods = [m.get("method") for m in run.received() if m.get("method") in ("turn/start", "turn/interrupt")]
        assert methods == ["turn/start", "turn/start", "turn/interrupt"]


LOST_WAIT = 1.0
"""previous_turn_wait in the lost-completion tests: how long a held turn/start
waits for a turn whose turn/completed never comes before taking its slot."""


def after_response(rid, pred):
    """A frame predicate: ``pred``, among the frames after the answer to ``rid``."""
    answered = [False]

    def check(f):
        if f.get("id") == rid and "method" not in f:
            answered[0] = True
            return False
        return answered[0] and pred(f)

    return check


def lost_options():
    return LifecycleOptions(engine_deadline=5.0, projection_mode="per_turn", previous_turn_wait=LOST_WAIT)


async def test_a_turn_whose_completion_is_lost_takes_no_joins_once_codex_says_the_thread_is_idle(tmp_path, sidecar):
    """Codex says the thread went idle, but the turn's turn/completed never
    comes: the next turn/start is no join (Codex would make it a turn of its
    own, unassembled), but held and assembled, taking the lost turn's slot
    after ``previous_turn_wait``; and so is every later one."""
    engine = make_engine()
    async with sidecar(tmp_path, engine, options=lost_options(), script={"turns": [{"dropCompleted": True}]}) as run:
        thread = await run.start_thread()
        rid, line = run.turn_start_line(thread, "one")
        await run.send(line)
        lost = (await run.wait_response(rid))["result"]["turn"]["id"]
        await run.wait_frame(after_response(rid, lambda f: f.get("method") == "thread/status/changed" and f["params"]["status"]["type"] == "idle"))

        two_rid, two = run.turn_start_line(thread, "two")
        await run.send(two)
        second = await run.finish_turn(thread, two_rid)
        assert second["id"] != lost
        assert len(engine.calls_to("assemble")) == 2  # held and assembled, not a join
        assert calls_for(engine, "assemble", thread)[-1].prompt == "two"

        third = await run.turn(thread, "three")
        assert third["id"] not in (lost, second["id"])
        assert [c.prompt for c in calls_for(engine, "assemble", thread)] == ["one", "two", "three"]
        # Each input reached Codex once; the lost turn is not in the mirror
        # (its turn/completed never came), the others are, once each.
        assert [m["params"]["input"][-1]["text"] for m in run.child_turn_starts(thread)] == ["one", "two", "three"]
        users = [text for role, text in roles_texts(run.mirror_messages(thread)) if role == "user"]
        assert users == ["two", "three"]


async def test_a_join_codex_makes_a_turn_of_its_own_ends_a_turn_whose_end_was_lost(tmp_path, sidecar):
    """Neither the idle status nor the turn/completed of the running turn
    comes: the next turn/start joins (the sidecar cannot know), and Codex
    answers it with a new turn. That says the old turn is over: the new one
    is the thread's running turn, finalised when it completes, and the
    turn/start after it is held and assembled again."""
    engine = make_engine()
    script = {"turns": [{"dropCompleted": True, "dropIdle": True}]}
    async with sidecar(tmp_path, engine, options=lost_options(), script=script) as run:
        thread = await run.start_thread()
        rid, line = run.turn_start_line(thread, "one")
        await run.send(line)
        lost = (await run.wait_response(rid))["result"]["turn"]["id"]

        join_rid, join = run.turn_start_line(thread, "two")
        await run.send(join)
        with trio.fail_after(JOIN_WAIT):
            new = (await run.wait_response(join_rid))["result"]["turn"]["id"]
        assert new != lost  # Codex had no running turn: a turn of its own
        assert join in run.received_lines()  # sent as the client sent it
        await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == new)
        await run.finalized(thread, new)
        assert len(engine.calls_to("assemble")) == 1

        third = await run.turn(thread, "three")
        assert third["id"] not in (lost, new)
        assert [c.prompt for c in calls_for(engine, "assemble", thread)] == ["one", "three"]
        users = [text for role, text in roles_texts(run.mirror_messages(thread)) if role == "user"]
        assert users == ["two", "three"]  # each once; "one" went with its lost turn/completed
