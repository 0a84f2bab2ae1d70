"""The per-thread machine (``sidecar/thread/``): one ``handle(session,
event)`` per change, frozen events in, action records out. Each test is a
pure call (no processes, no fake app-server): a thread's records and an
event in, the actions and the fields they changed out."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import trio

from engines import AssistantMessage, PromptCacheInfo, TextBlock, Usage, UserMessage
from sidecar.session.state import RevertNoise, ThreadSession, TurnState, Unfollowed, new_session
from sidecar.thread import events, session_events
from sidecar.thread.events import (
    AlreadyFinalized,
    ApplyProjection,
    Assemble,
    CodexCompacted,
    ConfirmSpare,
    ContextFound,
    ContinuityFound,
    DropInjections,
    ExpectRebuilds,
    Finalising,
    Finalize,
    FinalizeEnded,
    FinalizeStarted,
    FirstTurnLost,
    ForwardFailed,
    ForwardOriginal,
    ForwardParams,
    Gate,
    GiveUpRevert,
    HistoryRead,
    Hold,
    InjectionReady,
    ItemCompleted,
    ItemsInjected,
    Join,
    JoinAnswered,
    JoinSlotTaken,
    JournalInjection,
    Learn,
    Maintain,
    MarkerPending,
    MarkerWritten,
    MarkFinalized,
    NoiseSettled,
    NothingMoved,
    OwnTurnStarted,
    ProjectFrom,
    ProjectionFailed,
    ProjectTail,
    ProjectWhole,
    Rebuild,
    RebuildAtFraming,
    RebuildRevertAnswered,
    RebuildRevertRefused,
    RebuildRevertSent,
    RebuildUnavailable,
    Rebuilt,
    RecordInjection,
    ReplayAnswered,
    ReplayMissed,
    ReplayWanted,
    ResetLedger,
    RevertedNoticeCame,
    RevertedNoticeMissed,
    RevertRefused,
    SendInjections,
    SkipMaintenance,
    SwallowNotice,
    SwitchRolledBack,
    ThreadEvent,
    ThreadIdle,
    ThreadMoved,
    TurnAccepted,
    TurnAnswered,
    TurnAssembled,
    TurnCompleted,
    TurnFellBack,
    TurnHeld,
    TurnIngested,
    TurnMirroring,
    TurnOverInCodex,
    TurnProjected,
    TurnReleased,
    TurnRequested,
    TurnsReverted,
    UsageReported,
    WaitReverts,
    WantSpare,
    WarnDoubleProjection,
    WriteFraming,
    WriteInspect,
    WriteLedger,
)
from sidecar.thread.files import Injection
from sidecar.thread.holdings import holdings
from sidecar.thread.learned import AdditionSent, WindowReported, addition_digest
from sidecar.thread.machine import finalized_key
from sidecar.thread.planner import Slack, fingerprint
from sidecar.thread.state import RULES, handle


class Handle:
    """Stands in for an open file of the thread (ledger, inspection log): the machine only asks whether there is one."""


def thread(**fields: Any) -> ThreadSession:
    session = new_session("thr", "key", Path("/dev/null"))
    for name, value in fields.items():
        setattr(session, name, value)
    return session


def turn(**fields: Any) -> TurnState:
    return TurnState(client_id=fields.pop("client_id", 7), original_input=fields.pop("original_input", None), **fields)


def holding(session: ThreadSession, state: TurnState) -> ThreadSession:
    """The thread with ``state`` holding its slot, as a held turn/start leaves it."""
    session.slot.acquire_nowait()
    handle(session, TurnHeld(state, gated=True))
    return session


def test_every_event_has_a_rule() -> None:
    kinds = {c for module in (events, session_events) for _, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, ThreadEvent) and c is not ThreadEvent}
    assert kinds == set(RULES)


# ------------------------------------------------------------------ a turn's start


def test_a_turn_start_on_an_idle_thread_gates_the_thread_at_once_and_is_held() -> None:
    assert handle(thread(), TurnRequested()) == [Gate(), Hold(gated=True)]


def test_a_turn_start_while_another_turn_holds_the_slot_unforwarded_is_held_and_gates_once_it_has_the_slot() -> None:
    session = holding(thread(), turn(client_id=1))
    assert handle(session, TurnRequested()) == [Hold(gated=False)]
    session.slot.release()
    assert handle(session, TurnHeld(turn(client_id=2), gated=False)) == [Gate(), Assemble()]


def test_a_turn_start_while_codex_runs_the_thread_s_turn_joins_it() -> None:
    session = holding(thread(), state := turn())
    handle(session, TurnReleased(state, None, 1.0))
    assert handle(session, TurnRequested()) == [Join()]


def test_a_turn_start_while_the_running_turn_is_finalising_gates_at_once_and_waits_for_the_slot() -> None:
    session = holding(thread(), state := turn())
    handle(session, TurnReleased(state, None, 1.0))
    handle(session, TurnAnswered(7, "t1", fell_back=False))
    handle(session, TurnCompleted("t1"))
    assert handle(session, TurnRequested()) == [Gate(), Hold(gated=True)]


def test_a_held_turn_takes_the_slot_and_waits_for_the_client_s_unanswered_reverts_before_it_assembles() -> None:
    session = thread(reverts_unanswered=1)
    state = turn()
    assert handle(session, TurnHeld(state, gated=True)) == [WaitReverts(), Assemble()]
    assert session.current is state


def test_a_failed_assembly_falls_back_to_the_client_s_request_for_its_reason() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, TurnFellBack(state, "KeyError")) == []
    assert state.fallback_reason == "KeyError"


def test_a_turn_start_carrying_openclaw_s_own_engine_context_goes_as_it_is_with_a_warning_once_a_thread() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, ContextFound(state, "engine")) == [WarnDoubleProjection(), ForwardOriginal()]
    assert handle(session, ContextFound(turn(), "engine")) == [ForwardOriginal()]
    assert (state.openclaw_context, state.fallback_reason) == ("engine", "already-projected")


def test_openclaw_s_continuity_in_a_turn_start_is_left_to_the_engine_to_replace() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, ContextFound(state, "continuity")) == []
    assert (state.openclaw_context, state.fallback_reason) == ("continuity", None)


def test_the_mirror_read_for_a_turn_is_what_its_engine_call_counts_as_before_the_prompt() -> None:
    session = holding(thread(), state := turn())
    history = [UserMessage(content="q0", timestamp=1), UserMessage(content="q1", timestamp=2)]
    assert handle(session, HistoryRead(state, history)) == []
    assert (state.history, state.pre_prompt_count) == (history, 2)


def test_openclaw_s_continuity_is_replaced_by_the_engine_s_assembly_from_the_input_without_it() -> None:
    session = holding(thread(), state := turn())
    params = {"input": ["block", "prompt"], "model": "m"}
    assert handle(session, ContinuityFound(state, params, ["prompt"], history_empty=False)) == [ProjectFrom({"input": ["prompt"], "model": "m"})]
    assert state.params == {"input": ["prompt"], "model": "m"} and params["input"] == ["block", "prompt"]


def test_openclaw_s_continuity_goes_as_it_is_when_the_sidecar_knows_nothing_of_the_session_or_cannot_cut_it() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, ContinuityFound(state, {"input": []}, ["prompt"], history_empty=True)) == [ForwardOriginal()]
    assert state.fallback_reason == "openclaw-continuity-kept"
    assert handle(session, ContinuityFound(turn(), {"input": []}, None, history_empty=False)) == [ForwardOriginal()]


def test_a_projection_that_cannot_be_rendered_after_a_rebuild_leaves_the_thread_holding_nothing_projected() -> None:
    session = holding(thread(), state := turn(rebuilt=True, held_plan=["a"]))
    assert handle(session, ProjectionFailed(state, "projection-too-large")) == []
    assert (state.held_plan, state.fallback_reason) == ([], "projection-too-large")


def assembled(state: TurnState, messages: list[Any], history: list[Any], mode: str = "delta", **more: Any) -> TurnAssembled:
    return TurnAssembled(state, messages, more.pop("tokens", 100), 1000, [], mode, more.pop("epoch", None),
                         engine_epochs=more.pop("engine_epochs", False), history=history, slack=Slack(token_budget=1000))


def test_a_per_turn_assembly_is_projected_whole_and_sits_in_the_history_untracked() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, assembled(state, [UserMessage(content="a", timestamp=1)], [], mode="per_turn")) == [ProjectWhole()]
    assert (state.assembled_count, state.mode, session.force_rebuild) == (1, "per_turn", True)


def test_a_delta_assembly_projects_only_the_tail_the_thread_lacks() -> None:
    history = [UserMessage(content="q0", timestamp=1)]
    new = UserMessage(content="recalled", timestamp=2)
    session = holding(thread(held=[fingerprint(history[0])], turns_since_rebuild=["t0"]), state := turn())
    assert handle(session, assembled(state, [history[0], new], history)) == [ProjectTail(1)]
    assert state.held_plan == [fingerprint(history[0]), fingerprint(new)]


def test_an_assembly_that_no_longer_holds_what_the_thread_holds_rebuilds_and_an_engine_with_epochs_expects_rebuilds() -> None:
    history = [UserMessage(content="q0 " * 5000, timestamp=1)]
    session = holding(thread(held=[fingerprint(history[0])], turns_since_rebuild=["t0"]), state := turn())
    summary = [UserMessage(content="summary", timestamp=2)]
    assert handle(session, assembled(state, summary, history, engine_epochs=True)) == [ExpectRebuilds(), Rebuild()]
    assert state.held_plan == [fingerprint(summary[0])]


def test_an_empty_thread_and_an_empty_assembly_project_nothing() -> None:
    session = holding(thread(held=[], turns_since_rebuild=[]), state := turn())
    assert handle(session, assembled(state, [], [])) == [ProjectTail(0)]


def projected(state: TurnState, **more: Any) -> TurnProjected:
    return TurnProjected(state, 3, 1, more.pop("context_chars", 10), 4, 14, changed=more.pop("changed", True), placement=more.pop("placement", "additional_context"),
                         has_context=more.pop("has_context", True), addition=more.pop("addition", None), sent=more.pop("sent", {"input": "x"}))


def test_a_projection_that_changed_the_request_goes_in_through_the_channels_it_used() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, projected(state, addition="be brief")) == [ApplyProjection()]
    assert state.channels == ["turn/start.additionalContext[openclaw_context]", "turn/start.additionalContext[openclaw_system_prompt_addition]"]
    assert (state.projected, state.addition_pending, state.rendered, state.sent_chars, state.sent_text) == (True, "be brief", 3, 14, {"input": "x"})
    state = turn()
    handle(session, projected(state, placement="input", has_context=True))
    assert state.channels == ["turn/start.input"]


def test_a_projection_that_changed_nothing_leaves_the_request_as_it_came_with_its_figures_noted() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, projected(state, changed=False)) == []
    assert (state.projected, state.channels, state.rendered, state.dropped, state.original_chars) == (False, [], 3, 1, 4)


def test_a_released_turn_forwards_its_projection_and_is_the_thread_s_running_turn() -> None:
    session = holding(thread(fresh=True), state := turn(projected=True, assembled_count=3))
    assert handle(session, TurnReleased(state, {"input": []}, 4.5)) == [ForwardParams({"input": []})]
    assert (state.forwarded, state.hold_ms, session.fresh, session.turns_this_opening) == (True, 4.5, False, 1)
    assert session.stats["lastTurn"] == {"holdMs": 4.5, "projected": True, "assembledMessageCount": 3, "estimatedTokens": None, "fallback": None}


def test_a_released_turn_without_new_params_forwards_the_client_s_own() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, TurnReleased(state, None, 0.1)) == [ForwardOriginal()]


def test_a_turn_start_codex_cannot_be_sent_frees_the_slot() -> None:
    session = holding(thread(), state := turn())
    handle(session, ForwardFailed(state))
    assert (session.current, session.busy) == (None, False)


# ------------------------------------------------------------------ Codex's answer


def test_a_turn_codex_accepts_gets_its_id_confirms_the_spare_and_journals_the_addition_it_carried() -> None:
    session = holding(thread(), state := turn(addition_pending="be brief", epoch_pending="e2"))
    handle(session, TurnReleased(state, {"input": []}, 1.0))
    actions = handle(session, TurnAnswered(7, "t1", fell_back=False))
    assert actions == [ConfirmSpare(), Learn(AdditionSent(addition_digest("be brief")))]
    assert (state.turn_id, session.turns["t1"], session.projected_epoch) == ("t1", state, "e2")


def test_a_retry_codex_accepts_is_the_turn_with_its_id() -> None:
    session = holding(thread(), first := turn())
    retry = first.retry()
    assert handle(session, TurnAccepted(retry, "t2")) == [ConfirmSpare()]
    assert (retry.turn_id, session.turns["t2"]) == ("t2", retry)


def test_codex_taking_the_client_s_own_request_after_refusing_the_projection_keeps_nothing_of_it() -> None:
    session = holding(thread(), state := turn(projected=True, addition_pending="x", epoch_pending="e", channels=["turn/start.input"]))
    assert handle(session, TurnAnswered(7, "t1", fell_back=True)) == [ConfirmSpare()]
    assert (state.projected, state.channels, state.fallback_reason, session.projected_epoch) == (False, [], "codex-refused", None)


def test_a_refused_turn_frees_the_slot_and_after_a_rebuild_the_thread_holds_nothing() -> None:
    session = holding(thread(held=["a"], turns_since_rebuild=["t0"], projected_epoch="e"), turn(rebuilt=True))
    assert handle(session, TurnAnswered(7, None, fell_back=False)) == []
    assert (session.current, session.busy, session.held, session.turns_since_rebuild, session.projected_epoch) == (None, False, [], [], None)


def test_an_answer_to_another_request_or_to_a_turn_with_its_id_changes_nothing() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, TurnAnswered(8, "t9", fell_back=False)) == []
    handle(session, TurnAnswered(7, "t1", fell_back=False))
    assert handle(session, TurnAnswered(7, "t2", fell_back=False)) == []
    assert state.turn_id == "t1"


def test_a_join_answered_with_another_turn_id_makes_codex_s_own_turn_the_running_one() -> None:
    session = holding(thread(), state := turn())
    handle(session, TurnReleased(state, None, 1.0))
    handle(session, TurnAnswered(7, "t1", fell_back=False))
    assert handle(session, JoinAnswered("t1")) == []  # joined the running turn, as asked
    assert handle(session, JoinAnswered("t2")) == [OwnTurnStarted("t2", ended="t1")]
    assert (state.ended, session.current.turn_id if session.current else None) == (True, "t2")


def test_an_idle_thread_ends_the_turn_codex_accepted_once() -> None:
    session = holding(thread(), state := turn())
    handle(session, TurnReleased(state, None, 1.0))
    assert handle(session, ThreadIdle()) == []  # not accepted yet: the status may be an earlier one
    handle(session, TurnAnswered(7, "t1", fell_back=False))
    assert handle(session, ThreadIdle()) == [TurnOverInCodex()]
    assert handle(session, ThreadIdle()) == []
    assert handle(session, TurnRequested()) == [Gate(), Hold(gated=True)]


def test_a_rebuild_for_the_turn_counts_it_and_sends_the_addition_again() -> None:
    session = holding(thread(force_rebuild=True, rebuilds=1), state := turn())
    assert handle(session, Rebuilt(state)) == [Learn(AdditionSent(None))]
    assert (state.rebuilt, session.rebuilds, session.force_rebuild) == (True, 2, False)


def test_a_rebuild_that_cannot_be_made_forwards_the_client_s_request_untracked() -> None:
    session = holding(thread(), state := turn(held_plan=["a"], epoch_pending="e"))
    assert handle(session, RebuildUnavailable(state)) == []
    assert (state.held_plan, state.epoch_pending, state.fallback_reason) == (None, None, "rebuild-unavailable")


def test_reported_usage_is_kept_and_a_window_codex_names_is_journaled() -> None:
    session = thread()
    usage = Usage(input=3, output=2, cache_read=5, cache_write=0, total_tokens=10)
    cache = PromptCacheInfo(cached_input_tokens=5, input_tokens=8)
    assert handle(session, UsageReported((usage, cache, 8), None)) == []
    assert (session.last_usage, session.prompt_cache, session.current_token_count) == (usage, cache, 8)
    assert handle(session, UsageReported(None, 200_000)) == [Learn(WindowReported(200_000))]
    assert session.last_usage == usage


def test_a_rebuild_that_finds_only_the_framing_counts_no_turn_since() -> None:
    session = thread(turns_since_rebuild=None)
    assert handle(session, RebuildAtFraming()) == []
    assert session.turns_since_rebuild == []


def test_a_revert_that_finds_the_ledger_s_first_turn_gone_asks_codex_next_time() -> None:
    session = thread(turns_since_rebuild=["t1"])
    handle(session, FirstTurnLost())
    assert session.turns_since_rebuild is None


def test_a_revert_codex_cannot_do_on_this_thread_is_not_tried_again_and_a_plain_refusal_is() -> None:
    session = thread()
    handle(session, RevertRefused(unsupported=False))
    assert session.revert_unsupported is False
    handle(session, RevertRefused(unsupported=True))
    assert session.revert_unsupported is True


def test_a_moved_thread_holds_no_archived_turn_and_its_turn_notes_how() -> None:
    session = holding(thread(live_turns=["t1"], turns_since_rebuild=["t1"]), state := turn())
    assert handle(session, ThreadMoved(12.5, switched=True)) == []
    assert (session.live_turns, session.turns_since_rebuild, state.switched, state.revert_ms) == ([], [], True, 12.5)


def test_a_switch_codex_never_accepted_leaves_what_the_thread_holds_unknown() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1"])
    handle(session, SwitchRolledBack())
    assert (session.held, session.force_rebuild, session.turns_since_rebuild) == (None, True, None)


def test_a_rebuild_that_moved_nothing_writes_the_ledger_as_the_thread_still_holds_it() -> None:
    assert handle(thread(), NothingMoved()) == []  # no ledger
    session = thread(held=["a"], sizes={"a": 1}, turns_since_rebuild=["t1"], rebuilds=1, ledger=Handle())
    [reset] = handle(session, NothingMoved())
    assert isinstance(reset, ResetLedger) and reset.holdings == holdings(session)


# ------------------------------------------------------------------ a turn's end


def test_a_completed_item_is_kept_with_its_turn_and_a_native_compaction_forces_a_rebuild() -> None:
    session = thread()
    assert handle(session, ItemCompleted("t1", {"id": "i1", "type": "agentMessage"}, 5)) == []
    assert handle(session, ItemCompleted("t1", {"id": "i2", "type": "contextCompaction"}, None)) == [CodexCompacted("t1")]
    assert (list(session.turns["t1"].items), session.turns["t1"].item_times, session.force_rebuild) == (["i1", "i2"], {"i1": 5}, True)


def test_a_completed_turn_is_finalised_once() -> None:
    session = thread()
    assert handle(session, TurnCompleted("t1")) == [Finalize("t1")]
    assert handle(session, TurnCompleted("t1")) == [AlreadyFinalized("t1")]


def test_finalising_takes_the_turn_s_record_and_a_turn_a_join_began_waits_for_the_slot() -> None:
    session = holding(thread(), first := turn())
    handle(session, TurnAnswered(7, "t1", fell_back=False))
    handle(session, TurnCompleted("t1"))
    session.started_by_join("t2")  # Codex made a join a turn of its own while t1 finalises
    assert handle(session, FinalizeStarted("t1")) == [Finalising(first, wait_slot=False)]
    [finalising] = handle(session, FinalizeStarted("t2"))
    assert isinstance(finalising, Finalising) and finalising.wait_slot
    handle(session, JoinSlotTaken(finalising.turn))
    assert session.current is finalising.turn


def test_a_mirrored_turn_is_the_newest_and_gives_up_a_client_revert_the_mirror_never_followed() -> None:
    holder = object()
    session = thread(unfollowed=Unfollowed("t0", False, frozenset({"t1"}), holder), live_turns=[])
    assert handle(session, TurnMirroring(turn(), "t1", "i9")) == []  # it ran under the revert: still to follow
    assert handle(session, TurnMirroring(turn(), "t2", None)) == [GiveUpRevert(holder)]
    assert (session.unfollowed, session.last_turn, session.last_items, session.live_turns) == (None, "t2", {"t1": "i9", "t2": None}, ["t1", "t2"])


def _steady_thread() -> tuple[ThreadSession, TurnState]:
    history = [UserMessage(content="q0", timestamp=1)]
    session = thread(held=[fingerprint(history[0])], turns_since_rebuild=["t0"], ledger=Handle(), inspect=Handle())
    state = turn(held_plan=[fingerprint(history[0])])
    state.history_read(history)
    return session, state


def test_an_ingested_client_turn_marks_it_finalized_writes_what_it_added_to_the_ledger_records_it_and_maintains() -> None:
    session, state = _steady_thread()
    before = list(session.held or [])
    new = [UserMessage(content="q1", timestamp=2), AssistantMessage(content=[TextBlock(text="a1")], timestamp=3)]
    actions = handle(session, TurnIngested(state, "t1", "completed", True, [*state.history, *new]))
    added = [fingerprint(m) for m in new]
    mark, ledger, record, maintain = actions
    assert mark == MarkFinalized(finalized_key("thr", "t1"), {"turnId": "t1", "status": "completed", "ok": True})
    assert isinstance(ledger, WriteLedger) and (ledger.turn_id, [f for f, _ in ledger.added], ledger.reset, ledger.turns) == ("t1", added, False, ["t0", "t1"])
    assert isinstance(record, WriteInspect) and record.record["turnId"] == "t1" and record.text is None
    assert maintain == Maintain()
    assert session.held == before + added


def test_an_ingested_turn_after_a_rebuild_resets_the_ledger_to_everything_the_thread_holds() -> None:
    session, state = _steady_thread()
    state.mark_rebuilt()
    state.held_plan = ["p1", "p2"]
    ledger = handle(session, TurnIngested(state, "t1", "completed", True, list(state.history)))[1]
    assert isinstance(ledger, WriteLedger) and ([f for f, _ in ledger.added], ledger.reset, ledger.turns) == (["p1", "p2"], True, ["t1"])


def test_a_turn_that_failed_or_whose_finalize_failed_skips_maintenance() -> None:
    session, state = _steady_thread()
    assert handle(session, TurnIngested(state, "t1", "interrupted", True, []))[-1] == SkipMaintenance("turn interrupted")
    session, state = _steady_thread()
    assert handle(session, TurnIngested(state, "t1", "completed", False, []))[-1] == SkipMaintenance("finalize failed")
    assert session.stats["lastMaintainTurn"] == "skipped: finalize failed"


def test_a_turn_the_client_did_not_start_writes_no_ledger_and_no_inspection_record() -> None:
    session, _ = _steady_thread()
    held = session.held
    assert handle(session, TurnIngested(turn(client_id=None), "t1", "completed", True, [])) == [
        MarkFinalized(finalized_key("thr", "t1"), {"turnId": "t1", "status": "completed", "ok": True}),
        Maintain(),
    ]
    assert session.held == held


def test_the_inspection_record_carries_the_text_the_turn_sent() -> None:
    session, state = _steady_thread()
    state.note_projection(["turn/start.input"], None, {"input": "hello"})
    record = handle(session, TurnIngested(state, "t1", "completed", True, list(state.history)))[2]
    assert isinstance(record, WriteInspect) and record.text == {"turnId": "t1", "sent": {"input": "hello"}}


def test_a_marker_being_written_keeps_the_thread_unsettled_until_written() -> None:
    session = thread()
    written = object()
    handle(session, MarkerPending(written))
    assert not session.settled
    handle(session, MarkerWritten(written))
    assert session.settled


def test_a_finalised_turn_frees_the_slot_and_wants_a_spare() -> None:
    session = holding(thread(), state := turn())
    assert handle(session, FinalizeEnded(state)) == [WantSpare()]
    assert (session.current, session.busy) == (None, False)


def test_a_steady_turn_end_to_end_through_the_machine_alone() -> None:
    """requested -> held -> released -> accepted -> completed -> finalised:
    the actions a job carries out, in order, and the thread free again."""
    session, _ = _steady_thread()
    done: list[Any] = []
    done += handle(session, TurnRequested())
    state = turn(held_plan=list(session.held or []))
    session.slot.acquire_nowait()
    done += handle(session, TurnHeld(state, gated=True))
    done += handle(session, TurnReleased(state, {"input": ["projected"]}, 2.0))
    assert handle(session, TurnRequested()) == [Join()]
    done += handle(session, TurnAnswered(7, "t1", fell_back=False))
    done += handle(session, TurnCompleted("t1"))
    [finalising] = handle(session, FinalizeStarted("t1"))
    assert isinstance(finalising, Finalising) and finalising.turn is state and not finalising.wait_slot
    done += handle(session, TurnMirroring(state, "t1", "i1"))
    done += handle(session, TurnIngested(state, "t1", "completed", True, [UserMessage(content="q1", timestamp=2)]))
    done += handle(session, FinalizeEnded(state))
    kinds = [type(a).__name__ for a in done]
    assert kinds == ["Gate", "Hold", "Assemble", "ForwardParams", "ConfirmSpare", "Finalize", "MarkFinalized", "WriteLedger", "WriteInspect", "Maintain", "WantSpare"]
    assert (session.busy, session.current, session.last_turn, session.turns_since_rebuild) == (False, None, "t1", ["t0", "t1"])


# ------------------------------------------------------------------ injections


def test_injected_items_codex_took_are_held_and_recorded_once_the_session_is_open() -> None:
    session = thread()
    [record] = handle(session, ItemsInjected([{"a": 1}]))
    assert isinstance(record, RecordInjection) and session.injected == [record.injection]
    session.last_turn = "t3"
    assert handle(session, InjectionReady(record.injection)) == [JournalInjection(Injection("t3", [{"a": 1}]), 0)]
    assert session.injected == [Injection("t3", [{"a": 1}])]


def test_an_injection_on_an_unsure_thread_leaves_the_framing_count_unwritten() -> None:
    session = thread(injected_unsure=True)
    [record] = handle(session, ItemsInjected([{"a": 1}]))
    assert isinstance(record, RecordInjection)
    [journal] = handle(session, InjectionReady(record.injection))
    assert isinstance(journal, JournalInjection) and journal.framing is None


def test_a_rebuild_onto_a_fresh_thread_sends_every_injection_back_and_an_in_place_revert_keeps_the_framing() -> None:
    first, second = Injection(None, [{"a": 1}]), Injection("t1", [{"b": 2}])
    session = thread(injected=[first, second], injected_framing=1)
    assert handle(session, ReplayWanted(kept_framing=False)) == [SendInjections([{"a": 1}, {"b": 2}], kept=0, target=2)]
    session = thread(injected=[first, second], injected_framing=1)
    assert handle(session, ReplayWanted(kept_framing=True)) == [SendInjections([{"b": 2}], kept=1, target=2)]


def test_a_replay_with_nothing_to_send_settles_the_framing_count_and_an_unsure_thread_is_not_reverted_in_place() -> None:
    session = thread(injected=[Injection(None, [{"a": 1}])], injected_framing=1)
    assert handle(session, ReplayWanted(kept_framing=True)) == []
    session = thread(injected_unsure=True)
    assert handle(session, ReplayWanted(kept_framing=True)) == []
    assert handle(session, ReplayWanted(kept_framing=False)) == [WriteFraming(0)]
    assert session.injected_unsure is False


@pytest.mark.parametrize(("applied", "actions", "framing", "unsure"), [
    (True, [WriteFraming(2)], 2, False),
    (False, [WriteFraming(0), ReplayMissed()], 0, False),
    (None, [ReplayMissed()], None, True),
])
def test_a_replay_answered_settles_on_what_the_thread_holds_and_one_not_answered_stays_unsure(applied: bool | None, actions: list[Any], framing: int | None, unsure: bool) -> None:
    session = thread(injected=[Injection(None, [{"a": 1}]), Injection("t1", [{"b": 2}])])
    handle(session, ReplayWanted(kept_framing=False))
    assert handle(session, ReplayAnswered(applied, kept=0, target=2)) == actions
    assert session.injected_unsure is unsure
    if framing is not None:
        assert session.injected_framing == framing


def test_reverted_turns_drop_the_injections_that_followed_them() -> None:
    session = thread(injected=[Injection("t1", [{"a": 1}]), Injection("t2", [{"b": 2}])])
    assert handle(session, TurnsReverted(["t2", "t9"])) == [DropInjections(["t2", "t9"])]
    assert session.injected == [Injection("t1", [{"a": 1}])]
    assert handle(session, TurnsReverted(["t5"])) == []


# ------------------------------------------------------------------ a rebuild revert's noise


def test_a_rebuild_revert_s_noise_is_kept_from_the_client_until_answered_and_its_reverted_notice_seen() -> None:
    noise, ticket = RevertNoise(), trio.Event()
    session = thread()
    assert handle(session, RebuildRevertSent(noise, ticket)) == [] and not noise.answered
    assert handle(session, RebuildRevertAnswered(noise)) == [] and noise.answered
    assert handle(session, RevertedNoticeCame(noise)) == [SwallowNotice(ticket), NoiseSettled()]
    assert handle(session, RevertedNoticeCame(noise)) == []  # no revert of the sidecar's waits for it


def test_a_refused_rebuild_revert_waits_for_no_reverted_notice() -> None:
    noise, ticket = RevertNoise(), trio.Event()
    handle(thread(), RebuildRevertSent(noise, ticket))
    assert handle(thread(), RebuildRevertRefused(noise, ticket)) == [NoiseSettled()]
    assert noise.tickets == []


def test_a_reverted_notice_that_never_came_is_given_up_and_a_later_revert_still_unanswered_keeps_the_noise() -> None:
    noise, first, second = RevertNoise(), trio.Event(), trio.Event()
    session = thread()
    handle(session, RebuildRevertSent(noise, first))
    handle(session, RebuildRevertAnswered(noise))
    handle(session, RebuildRevertSent(noise, second))
    assert handle(session, RevertedNoticeMissed(noise, first)) == []  # the second is unanswered
    assert noise.tickets == [second]
    handle(session, RebuildRevertAnswered(noise))
    assert handle(session, RevertedNoticeMissed(noise, second)) == [NoiseSettled()]
