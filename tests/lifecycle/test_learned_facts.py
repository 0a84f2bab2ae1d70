"""What one sidecar process learns, the next one keeps (issue 24): the
client's tools, the model's window (and so the budget), the session's
bootstrap; and the per-turn facts taken from the wire (heartbeat runs,
citations mode). Two sidecar processes in front of the fake app-server,
sharing the state dir and Codex's store, as OpenClaw's ``--local`` turns do."""

from __future__ import annotations

from typing import Any

from engines import ToolCallResult, ToolSpec
from sidecar.lifecycle import LifecycleOptions
from sidecar.projection import CONTEXT_HEADER, REQUEST_HEADER
from sidecar.session.state import DEFAULT_CONTEXT_WINDOW
from tests.support.lifecycle import calls_for, make_engine
from tests.support.lifecycle import sidecar as open_sidecar

WINDOW = 258_400  # what the fake app-server reports, as codex 0.169.0 does
TOOLS = [
    {"type": "function", "name": "message", "description": "d", "inputSchema": {"type": "object"}},
    {"type": "namespace", "name": "openclaw", "description": "d", "tools": [{"type": "function", "name": "memory_search", "description": "d", "inputSchema": {"type": "object"}}]},
]
CLIENT_TOOLS = frozenset({"message", "memory_search"})


def options(**kw: Any) -> LifecycleOptions:
    return LifecycleOptions(engine_deadline=5.0, projection_mode="delta", **kw)


class ToolEngine:
    """A recording engine that also offers the model a tool of its own."""

    def __new__(cls):
        engine = make_engine()
        engine.tools = lambda: [ToolSpec(name="lcm_grep", description="search", input_schema={"type": "object"})]  # type: ignore[attr-defined]

        async def call_tool(params):
            return ToolCallResult(text="no match")

        engine.call_tool = call_tool  # type: ignore[attr-defined]
        return engine


async def test_a_resumed_thread_in_a_new_process_keeps_its_tools_window_and_bootstrap(tmp_path):
    first = ToolEngine()
    async with open_sidecar(tmp_path, first, options=options(), name="run1") as run:
        tid = await run.start_thread(dynamicTools=TOOLS)
        await run.turn(tid, "one")
        (start,) = run.received("thread/start")
        # Codex was offered the engine's tool too; the engine's available_tools are the client's.
        assert "lcm_grep" in {t["name"] for t in start["params"]["dynamicTools"]}

    engine = ToolEngine()
    async with open_sidecar(tmp_path, engine, options=options(), name="run2") as run:
        resumed = await run.resume_thread(tid)  # OpenClaw resumes without dynamicTools
        assert "dynamicTools" not in run.received("thread/resume")[-1]["params"]
        assert resumed["result"]["thread"]["id"] == tid
        await run.turn(tid, "two")

    (before,) = calls_for(first, "assemble", tid)
    (after,) = calls_for(engine, "assemble", tid)
    assert before.available_tools == after.available_tools == CLIENT_TOOLS
    # The first turn of the new process has the window learned by the old one.
    assert after.token_budget == WINDOW - 20_000
    assert after.runtime_context.context_window == WINDOW
    assert calls_for(engine, "bootstrap", tid) == []  # the engine followed the session from its first turn


async def test_the_first_turn_ever_has_a_numeric_budget_within_the_default_window(tmp_path):
    engine = make_engine()
    async with open_sidecar(tmp_path, engine, options=options(token_reserve=30_000)) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.turn(tid, "two")
    first, second = calls_for(engine, "assemble", tid)
    assert first.token_budget == DEFAULT_CONTEXT_WINDOW - 30_000  # nothing known yet: the stated default
    assert first.runtime_context.context_window is None  # ...which is not passed off as the model's
    assert second.token_budget == WINDOW - 30_000  # Codex reported the window after turn one
    (after_turn, _) = calls_for(engine, "after_turn", tid)
    assert after_turn.token_budget == WINDOW - 30_000


async def test_an_explicit_token_budget_wins(tmp_path):
    engine = make_engine()
    async with open_sidecar(tmp_path, engine, options=options(token_budget=12_345)) as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        await run.turn(tid, "two")
    assert [c.token_budget for c in calls_for(engine, "assemble", tid)] == [12_345, 12_345]


async def test_heartbeat_runs_are_told_apart_by_their_turn_trigger(tmp_path):
    engine = make_engine()
    async with open_sidecar(tmp_path, engine, options=options(citations_mode="off")) as run:
        tid = await run.start_thread()
        await run.turn(tid, "user turn", turnTrigger="user")
        await run.turn(tid, "heartbeat turn", turnTrigger="heartbeat")
        await run.turn(tid, "no trigger")
    flags = [c.is_heartbeat for c in calls_for(engine, "after_turn", tid)]
    assert flags == [False, True, False]
    assert [c.turn_trigger for c in calls_for(engine, "after_turn", tid)] == ["user", "heartbeat", None]
    assert {c.citations_mode for c in calls_for(engine, "assemble", tid)} == {"off"}


async def test_cron_runs_reach_the_engine_as_their_turn_trigger(tmp_path):
    """OpenClaw's scheduled jobs say ``turnTrigger: "cron"``: not a heartbeat,
    told apart by ``turn_trigger``."""
    engine = make_engine()
    async with open_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "nightly report", turnTrigger="cron")
        await run.turn(tid, "a user turn", turnTrigger="user")
    calls = calls_for(engine, "after_turn", tid)
    assert [(c.turn_trigger, c.is_heartbeat) for c in calls] == [("cron", False), ("user", False)]


async def test_an_unchanged_addition_is_not_sent_again_by_a_new_process(tmp_path):
    """Codex keeps a turn's ``additionalContext`` in the thread's history: a
    new process that sent the same addition again doubled it in every later
    model request (seen live with OpenClaw's ``--local`` turns)."""
    from engines import AssembleResult
    from sidecar.projection import ADDITIONAL_CONTEXT_KEY

    def engine_with(addition: str) -> Any:
        engine = make_engine()
        engine.set_result("assemble", lambda p: AssembleResult(messages=list(p.messages), estimated_tokens=1, system_prompt_addition=addition))
        return engine

    async with open_sidecar(tmp_path, engine_with("Prefer metric units."), options=options(), name="run1") as run:
        tid = await run.start_thread()
        await run.turn(tid, "one")
        (t1,) = run.child_turn_starts(tid)
    async with open_sidecar(tmp_path, engine_with("Prefer metric units."), options=options(), name="run2") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "two")
        (t2,) = run.child_turn_starts(tid)
    async with open_sidecar(tmp_path, engine_with("Answer in French."), options=options(), name="run3") as run:
        await run.resume_thread(tid)
        await run.turn(tid, "three")
        (t3,) = run.child_turn_starts(tid)

    assert t1["params"]["additionalContext"] == {ADDITIONAL_CONTEXT_KEY: {"kind": "application", "value": "Prefer metric units."}}
    assert ADDITIONAL_CONTEXT_KEY not in (t2["params"].get("additionalContext") or {})  # already in the thread's history
    assert t3["params"]["additionalContext"] == {ADDITIONAL_CONTEXT_KEY: {"kind": "application", "value": "Answer in French."}}  # changed: sent


async def test_a_whole_fork_knows_the_addition_its_parent_s_history_carries(tmp_path):
    """A fork holds its parent's history, the addition's turn included:
    sending the addition again would hold it twice in every later model
    request of the fork. A fork cut at a turn may have lost the turn that
    carried it: it sends it again (never missing, at worst twice)."""
    from engines import AssembleResult
    from sidecar.projection import ADDITIONAL_CONTEXT_KEY

    engine = make_engine()
    engine.set_result("assemble", lambda p: AssembleResult(messages=list(p.messages), estimated_tokens=1, system_prompt_addition="Prefer metric units."))
    async with open_sidecar(tmp_path, engine, options=options()) as run:
        tid = await run.start_thread()
        first = await run.turn(tid, "one")
        await run.turn(tid, "two")
        whole = (await run.request("thread/fork", {"threadId": tid}))["result"]["thread"]["id"]
        cut = (await run.request("thread/fork", {"threadId": tid, "lastTurnId": first["id"]}))["result"]["thread"]["id"]
        await run.settle_thread(whole)
        await run.settle_thread(cut)
        await run.turn(whole, "three")
        await run.turn(cut, "four")
        (parent_first, parent_second) = run.child_turn_starts(tid)
        (w,) = run.child_turn_starts(whole)
        (c,) = run.child_turn_starts(cut)
    assert ADDITIONAL_CONTEXT_KEY in parent_first["params"]["additionalContext"]
    assert ADDITIONAL_CONTEXT_KEY not in (parent_second["params"].get("additionalContext") or {})
    assert ADDITIONAL_CONTEXT_KEY not in (w["params"].get("additionalContext") or {})  # in the history it forked
    assert c["params"]["additionalContext"][ADDITIONAL_CONTEXT_KEY] == {"kind": "application", "value": "Prefer metric units."}


RID = "codex-" + "ab12" * 10  # OpenClaw's hook relay id (tests/lifecycle/test_sessions.py)


def rotated(history: list[str], prompt: str) -> str:
    """A rotated thread's first turn: OpenClaw renders its transcript into it
    (without it, a new thread of a session with history is OpenClaw's reset)."""
    body = "\n\n".join(f"[user]\n{text}" for text in history)
    return f"{CONTEXT_HEADER}\n\n<conversation_context>\n{body}\n</conversation_context>\n\n{REQUEST_HEADER}\n{prompt}"


def hooks(rid: str) -> dict:
    command = f"exec 'node' 'entry.js' 'hooks' 'relay' '--provider' 'codex' '--relay-id' '{rid}' '--generation' 'g1' '--event' 'permission_request'"
    return {"config": {"features.hooks": True, "hooks.PermissionRequest": [{"hooks": [{"type": "command", "command": command}]}]}}


async def test_a_session_s_new_thread_in_a_new_process_has_the_window_its_earlier_processes_learned(tmp_path):
    """OpenClaw rotates a session onto a new Codex thread (web search turned
    off) in a new process: the new thread's first turn has the window the
    session's earlier processes learned, not the stated default (seen live:
    the facts of a fresh thread's first process were journaled under the
    thread's key, before OpenClaw's session was known)."""
    async with open_sidecar(tmp_path, make_engine(), options=options(), name="run1") as run:
        t1 = await run.start_thread(dynamicTools=TOOLS, **hooks(RID))
        await run.turn(t1, "one")
    async with open_sidecar(tmp_path, make_engine(), options=options(), name="run2") as run:
        await run.resume_thread(t1, **hooks(RID))
        await run.turn(t1, "two")

    engine = make_engine()
    async with open_sidecar(tmp_path, engine, options=options(), name="run3") as run:
        t2 = await run.start_thread(dynamicTools=TOOLS, **hooks(RID))
        assert t2 != t1
        await run.turn(t2, rotated(["one", "two"], "three"))
    (first,) = calls_for(engine, "assemble", RID)  # by session id: the relay id
    assert first.token_budget == WINDOW - 20_000
    assert first.runtime_context.context_window == WINDOW


async def test_a_window_a_thread_learned_as_its_own_session_reaches_the_session_it_joins(tmp_path):
    """A thread kept as a session of its own (an older sidecar, or hooks off)
    later resumed with OpenClaw's relay id: the window it learned is the
    session's too, so the session's next Codex thread starts with it."""
    async with open_sidecar(tmp_path, make_engine(), options=options(), name="run1") as run:
        t1 = await run.start_thread(dynamicTools=TOOLS)
        await run.turn(t1, "one")
    async with open_sidecar(tmp_path, make_engine(), options=options(), name="run2") as run:
        await run.resume_thread(t1, **hooks(RID))
        await run.turn(t1, "two")

    engine = make_engine()
    async with open_sidecar(tmp_path, engine, options=options(), name="run3") as run:
        t2 = await run.start_thread(dynamicTools=TOOLS, **hooks(RID))
        await run.turn(t2, rotated(["one", "two"], "three"))
    (first,) = calls_for(engine, "assemble", RID)  # by session id: the relay id
    assert first.token_budget == WINDOW - 20_000


# -- the facts as the session holds them (sidecar.lifecycle.calls) ---------------


class NoJournal:
    """A journal store that must not be touched."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the journal was used: {name}")


def test_a_thread_s_turns_read_its_facts_from_the_session_not_the_journal(tmp_path):
    """Once the thread's facts are read (the first use in a process), a turn
    asks for its budget, tools and opening step and reports facts it already
    has without reading or writing the journal."""
    from sidecar.lifecycle.calls import EngineCalls
    from sidecar.session.state import Bootstrapped, ToolsGiven, WindowReported, new_session

    calls = EngineCalls(None, options(), tmp_path)
    session = new_session("t1", "t1", tmp_path / "t1.jsonl")
    calls.learn(session, WindowReported(WINDOW))
    calls.learn(session, ToolsGiven(CLIENT_TOOLS))
    calls.learn(session, Bootstrapped())
    calls.learned = NoJournal()  # type: ignore[assignment]
    assert calls.budget(session) == WINDOW - 20_000
    assert calls.tools(session) == CLIENT_TOOLS
    assert calls.machine(session).opening_step(had_history=True) is None
    assert calls.learn(session, Bootstrapped()).bootstrapped  # nothing new: nothing written
    assert calls.learn(session, WindowReported(WINDOW)).window == WINDOW


def test_a_thread_s_facts_are_read_again_once_its_session_is_known(tmp_path):
    """Facts used under the thread's own key before OpenClaw's session was
    known: once the session's key is the thread's, its journal is read (what
    earlier processes of the session learned) and the thread's window goes
    to it."""
    from sidecar.lifecycle.calls import EngineCalls
    from sidecar.lifecycle.learned import LearnedFacts
    from sidecar.session.state import Bootstrapped, WindowReported, new_session

    LearnedFacts(tmp_path).learn("t0", "codex-abc", Bootstrapped())  # an earlier process of the session
    calls = EngineCalls(None, options(), tmp_path)
    session = new_session("t1", "t1", tmp_path / "t1.jsonl")
    calls.learn(session, WindowReported(WINDOW))  # before the binding was read
    assert not calls.facts(session).bootstrapped
    session.session_key = "codex-abc"  # the session got known
    assert calls.facts(session).bootstrapped
    assert LearnedFacts(tmp_path).get("t2", "codex-abc").window == WINDOW
