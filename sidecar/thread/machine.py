"""The per-thread machine's rules off a steady ``turn/start``'s path: a turn
answered, its items, its completion and finalisation, the client's
injections. Each rule takes the thread and one event of
:mod:`sidecar.thread.events`, changes the thread's records through the
package's transitions, and returns the actions the job carries out; none
does I/O. :func:`sidecar.thread.state.handle` is the one entry: it looks a
rule up in :data:`sidecar.thread.state.RULES`, which holds these and the
rules of a turn's start (kept in :mod:`.state`, so a steady ``turn/start``
crosses no more modules). A new transition is an event, a rule here and a
row of :data:`RULES`, and a test in ``tests/thread/test_machine.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import holdings, opening, session_rules
from .events import (
    AlreadyFinalized,
    CodexCompacted,
    ConfirmSpare,
    ContextFound,
    ContinuityFound,
    DropInjections,
    Finalising,
    Finalize,
    FinalizeEnded,
    FinalizeStarted,
    FirstTurnLost,
    ForwardFailed,
    ForwardOriginal,
    GiveUpRevert,
    InjectionReady,
    InjectionsLoaded,
    ItemCompleted,
    ItemsInjected,
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
    ThreadIdle,
    ThreadMoved,
    TurnAccepted,
    TurnAnswered,
    TurnCompleted,
    TurnFellBack,
    TurnIngested,
    TurnMirroring,
    TurnOverInCodex,
    TurnsReverted,
    UsageReported,
    WantSpare,
    WarnDoubleProjection,
    WriteFraming,
    WriteInspect,
    WriteLedger,
)
from .files import Injection
from .learned import AdditionSent, WindowReported, addition_digest
from .planner import fingerprints

if TYPE_CHECKING:
    from .events import ThreadAction, ThreadEvent
    from .state import RevertNoise, ThreadSession, TurnState

Rule = Callable[["ThreadSession", Any], "list[ThreadAction]"]


def finalized_key(thread_id: str, turn_id: str) -> str:
    """The mirror key of a turn's finalized marker."""
    return f"codex-app-server:{thread_id}:{turn_id}:finalized"


# ------------------------------------------------------------------ a turn answered


def fell_back(session: ThreadSession, event: TurnFellBack) -> list[ThreadAction]:
    event.turn.fell_back(event.reason)
    return []


def context_found(session: ThreadSession, event: ContextFound) -> list[ThreadAction]:
    """OpenClaw's own engine projected the input: it goes as it is, and the
    client is told (once a thread) to leave context to one engine.
    OpenClaw's continuity: the job cuts it and the engine assembles."""
    event.turn.context_carried(event.whose)
    if event.whose != "engine":
        return []
    event.turn.fell_back("already-projected")
    return [WarnDoubleProjection(), ForwardOriginal()] if session.warn_double_projection() else [ForwardOriginal()]


def continuity_found(session: ThreadSession, event: ContinuityFound) -> list[ThreadAction]:
    """OpenClaw's continuity: when nothing of the session is known here (or
    the block cannot be cut), its rendering is the model's only copy of it
    and goes as it is; else the engine assembles and projects in its place
    (the model must not get both), from the input without it."""
    if event.stripped is None or event.history_empty:
        event.turn.fell_back("openclaw-continuity-kept")
        return [ForwardOriginal()]
    return [ProjectFrom(event.turn.continuity_cut(event.params, event.stripped))]


def projection_failed(session: ThreadSession, event: ProjectionFailed) -> list[ThreadAction]:
    """Nothing was projected after all (after a rebuild: the thread holds only its framing)."""
    event.turn.projection_failed(event.reason)
    return []


def forward_failed(session: ThreadSession, event: ForwardFailed) -> list[ThreadAction]:
    session.end_turn(event.turn)
    return []


def answered(session: ThreadSession, event: TurnAnswered) -> list[ThreadAction]:
    """Codex answered the thread's held ``turn/start`` (an answer to any
    other request, or to a turn that has its id already, changes nothing)."""
    state = session.current
    if state is None or state.client_id != event.client_id or state.turn_id is not None:
        return []
    if event.turn_id is None:
        return refused(session, state)
    if event.fell_back:
        # Codex refused the projected turn/start and took the client's own:
        # nothing of the projection reached the thread.
        state.refused_by_codex()
    return accepted(session, state, event.turn_id)


def accepted(session: ThreadSession, state: TurnState, turn_id: str) -> list[ThreadAction]:
    """Codex took the turn's ``turn/start`` (the client's, or the sidecar's
    own retry of it): the turn has its id, an addition it carried is in the
    thread's history from now, an epoch it started is the thread's."""
    session.accept(state, turn_id)  # with what a turn a join began collected
    actions: list[ThreadAction] = [ConfirmSpare()]
    if state.addition_pending is not None:
        actions.append(Learn(AdditionSent(addition_digest(state.addition_pending))))
    if state.epoch_pending is not None:
        holdings.epoch_accepted(session, state.epoch_pending)
    return actions


def turn_accepted(session: ThreadSession, event: TurnAccepted) -> list[ThreadAction]:
    return accepted(session, event.turn, event.turn_id)


def refused(session: ThreadSession, state: TurnState) -> list[ThreadAction]:
    """Codex refused the turn's ``turn/start``: no turn will complete, the thread is free again."""
    if state.rebuilt:  # the revert went through; the projection did not land
        holdings.projection_lost(session)
    session.end_turn(state)
    return []


def join_answered(session: ThreadSession, event: JoinAnswered) -> list[ThreadAction]:
    """Normally the running turn's id. Another id means Codex had ended (or
    refused) that turn before the join reached it and started a turn of its
    own: the session tracks it as its running turn when it can
    (:meth:`ThreadSession.started_by_join`)."""
    turn_id = event.turn_id
    if turn_id is None:
        return []
    current = session.current
    if current is not None and current.turn_id in (None, turn_id):
        return []
    ended = current.turn_id if current is not None and current.turn_id not in session.completed_turns else None
    _, running = session.started_by_join(turn_id)
    return [OwnTurnStarted(turn_id, ended if running else None)]


def idle(session: ThreadSession, event: ThreadIdle) -> list[ThreadAction]:
    """No turn runs on the thread: a turn Codex accepted and did not complete is over."""
    return [TurnOverInCodex()] if session.codex_idle() else []


def turn_rebuilt(session: ThreadSession, event: Rebuilt) -> list[ThreadAction]:
    """The thread was rebuilt for the turn: it holds the framing and, once
    the turn is accepted, the projection. The addition went with the turns
    the rebuild took out: it is sent again."""
    event.turn.mark_rebuilt()
    holdings.rebuilt(session)
    return [Learn(AdditionSent(None))]


def rebuild_unavailable(session: ThreadSession, event: RebuildUnavailable) -> list[ThreadAction]:
    """No rebuild: the client's own request goes, and nothing is tracked."""
    event.turn.rebuild_unavailable()
    return []


def framing_found(session: ThreadSession, event: RebuildAtFraming) -> list[ThreadAction]:
    holdings.at_framing(session)
    return []


def first_turn_lost(session: ThreadSession, event: FirstTurnLost) -> list[ThreadAction]:
    holdings.first_turn_unknown(session)
    return []


def revert_refused(session: ThreadSession, event: RevertRefused) -> list[ThreadAction]:
    """A revert Codex cannot do for this thread (its history is not paginated) is never tried again."""
    if event.unsupported:
        holdings.revert_unsupported(session)
    return []


def thread_moved(session: ThreadSession, event: ThreadMoved) -> list[ThreadAction]:
    holdings.moved(session, event.revert_ms, switched=event.switched)
    return []


def switch_rolled_back(session: ThreadSession, event: SwitchRolledBack) -> list[ThreadAction]:
    """What the thread holds is not known: the next turn rebuilds."""
    holdings.unknown(session)
    return []


def nothing_moved(session: ThreadSession, event: NothingMoved) -> list[ThreadAction]:
    """The rebuild's marker is undone: the ledger is written as the thread still holds it."""
    return [] if session.ledger is None else [ResetLedger(holdings.holdings(session))]


def usage_known(session: ThreadSession, event: UsageReported) -> list[ThreadAction]:
    """What the last request cost; a window Codex names is learned (journaled)."""
    if event.last is not None:
        opening.usage_reported(session, *event.last)
    return [] if event.window is None else [Learn(WindowReported(event.window))]


def settled(noise: RevertNoise) -> list[ThreadAction]:
    return [NoiseSettled()] if noise.answered and not noise.tickets else []


def rebuild_revert_sent(session: ThreadSession, event: RebuildRevertSent) -> list[ThreadAction]:
    event.noise.sent(event.ticket)
    return []


def rebuild_revert_refused(session: ThreadSession, event: RebuildRevertRefused) -> list[ThreadAction]:
    event.noise.refused(event.ticket)  # no thread/reverted for a refused revert
    return settled(event.noise)


def rebuild_revert_answered(session: ThreadSession, event: RebuildRevertAnswered) -> list[ThreadAction]:
    event.noise.answered_now()
    return []


def reverted_notice_missed(session: ThreadSession, event: RevertedNoticeMissed) -> list[ThreadAction]:
    if event.ticket in event.noise.tickets:
        event.noise.tickets.remove(event.ticket)
    return settled(event.noise)


def reverted_notice_came(session: ThreadSession, event: RevertedNoticeCame) -> list[ThreadAction]:
    """It takes the oldest revert's ticket; none waiting: not one of the sidecar's reverts."""
    if not event.noise.tickets:
        return []
    return [SwallowNotice(event.noise.tickets.pop(0)), *settled(event.noise)]


# ------------------------------------------------------------------ a turn's end


def item_completed(session: ThreadSession, event: ItemCompleted) -> list[ThreadAction]:
    session.item_completed(event.turn_id, event.item, event.stamp)
    if event.item.get("type") != "contextCompaction":
        return []
    holdings.codex_compacted(session)  # Codex rewrote its history: the ledger no longer holds
    return [CodexCompacted(event.turn_id)]


def completed(session: ThreadSession, event: TurnCompleted) -> list[ThreadAction]:
    """A turn completed: finalised once (a replay while the first copy is
    still being finalised is caught here; one after it, by the marker)."""
    if event.turn_id in session.completed_turns:
        return [AlreadyFinalized(event.turn_id)]
    session.completed_turns.add(event.turn_id)
    return [Finalize(event.turn_id)]


def finalize_started(session: ThreadSession, event: FinalizeStarted) -> list[ThreadAction]:
    """The turn's record leaves the table. A joining ``turn/start`` that
    Codex made a turn of its own (the turn it was to join had ended) is
    finalised after that turn, in order: it waits for the slot."""
    state = session.finalising(event.turn_id)
    return [Finalising(state, state.forwarded and state.client_id is None and session.current is not state)]


def join_slot_taken(session: ThreadSession, event: JoinSlotTaken) -> list[ThreadAction]:
    session.finalising_join(event.turn)
    return []


def mirroring(session: ThreadSession, event: TurnMirroring) -> list[ThreadAction]:
    """The turn goes to the mirror: it is the thread's newest. A client
    revert the mirror has not followed, and that this turn did not run
    under, is given up: following it later would cut this turn."""
    actions: list[ThreadAction] = []
    unfollowed = session.unfollowed
    if unfollowed is not None and event.turn_id not in unfollowed.in_flight:
        opening.unfollowed(session, None)
        actions.append(GiveUpRevert(unfollowed.holder))
    session.finalised(event.turn_id, event.last_item)
    return actions


def ingested(session: ThreadSession, event: TurnIngested) -> list[ThreadAction]:
    """The turn is mirrored and the engine has it: the finalized marker, what
    the Codex thread holds now (the ledger), the inspection record, and the
    turn's maintenance (only after a completed turn the engine took)."""
    state, turn_id, status, ok = event.turn, event.turn_id, event.status, event.ok
    actions: list[ThreadAction] = [MarkFinalized(finalized_key(session.thread_id, turn_id), {"turnId": turn_id, "status": status, "ok": ok})]
    session.stats["lastFinalize"] = {"turnId": turn_id, "status": status, "ok": ok}  # busy until the marker is written
    if state.client_id is not None:
        before = session.held
        holdings.turn_finalised(session, state, turn_id, fingerprints(session.sizes, event.snapshot[state.pre_prompt_count :], session.fingerprints))
        ledger = ledger_entry(session, turn_id, before, state.rebuilt)
        if ledger is not None:
            actions.append(ledger)
    if session.inspect is not None and state.client_id is not None:
        actions.append(inspect_record(session, state, turn_id, status))
    if status == "completed" and ok:
        actions.append(Maintain())
    else:
        reason = "finalize failed" if not ok else f"turn {status}"
        session.stats["lastMaintainTurn"] = f"skipped: {reason}"
        actions.append(SkipMaintenance(reason))
    return actions


def ledger_entry(session: ThreadSession, turn_id: str, before: list[str] | None, rebuilt: bool) -> WriteLedger | None:
    """What the turn added, or everything after a rebuild or when what the
    thread held before was not known (None: no ledger, or nothing known)."""
    if session.ledger is None or session.held is None:
        return None
    held = session.held
    extends = not rebuilt and before is not None and len(held) >= len(before) and held[: len(before)] == before
    added = held[len(before) :] if extends and before is not None else held
    return WriteLedger(
        turn_id,
        [(f, session.sizes.get(f, 0)) for f in added],
        reset=not extends,
        turns=session.turns_since_rebuild,
        rebuilds=session.rebuilds,
        force=session.force_rebuild,
        epoch=session.projected_epoch,
    )


def inspect_record(session: ThreadSession, state: TurnState, turn_id: str, status: Any) -> WriteInspect:
    """The turn's inspection record (``codex-sidecar inspect`` and ``view``)."""
    usage = session.last_usage
    count = state.assembled_count or 0
    record = {
        "turnId": turn_id,
        "status": status,
        "mode": state.mode,
        "epoch": state.epoch,
        "projectedEpoch": session.projected_epoch,
        "projected": state.projected,
        "fallback": state.fallback_reason,
        "historyMessages": state.pre_prompt_count,
        # The newest assembled messages (role and size): bounded, so a
        # record costs the same at turn 1,000 as at turn 10.
        "assembled": {
            "count": state.assembled_count,
            "estimatedTokens": state.estimated_tokens,
            "messages": state.assembled_roles,
            **({"omitted": count - len(state.assembled_roles)} if count > len(state.assembled_roles) else {}),
        },
        "injected": {"channels": state.channels, "contextChars": state.context_chars, "rendered": state.rendered, "dropped": state.dropped},
        # The turn's contribution to model input, before and after projection.
        "turnInputChars": {"original": state.original_chars, "sent": state.sent_chars or state.original_chars},
        "codexInputTokens": (usage.input + usage.cache_read) if usage else None,
        "cachedInputTokens": usage.cache_read if usage else None,
        "rebuilt": state.rebuilt,
        "staleHeld": state.stale,
        "holdMs": state.hold_ms,
        "revertMs": state.revert_ms,
        "budget": state.budget,
        **({"switched": True} if state.switched else {}),
        **({"attempt": state.attempt} if state.attempt else {}),
        **({"openclawContext": state.openclaw_context} if state.openclaw_context else {}),
        "rebuilds": session.rebuilds,
        "heldMessages": None if session.held is None else len(session.held),
        "forceRebuild": session.force_rebuild,
    }
    text = None
    if state.sent_text or state.engine_tools:
        sent = {"sent": state.sent_text} if state.sent_text else {}
        text = {"turnId": turn_id, **sent, **({"engineTools": state.engine_tools} if state.engine_tools else {})}
    return WriteInspect(record, text)


def marker_pending(session: ThreadSession, event: MarkerPending) -> list[ThreadAction]:
    session.marking.add(event.written)
    return []


def marker_written(session: ThreadSession, event: MarkerWritten) -> list[ThreadAction]:
    session.marking.discard(event.written)
    return []


def finalize_ended(session: ThreadSession, event: FinalizeEnded) -> list[ThreadAction]:
    session.end_turn(event.turn)
    return [WantSpare()]


# ------------------------------------------------------------------ injections


def items_injected(session: ThreadSession, event: ItemsInjected) -> list[ThreadAction]:
    """Codex took the client's items: the thread holds them; on disk once the session is open."""
    injection = Injection(None, event.items)
    opening.injected(session, injection)
    return [RecordInjection(injection)]


def injection_ready(session: ThreadSession, event: InjectionReady) -> list[ThreadAction]:
    """The injection goes after the session's newest turn; an unsure framing
    count stays unsure (not written) until a rebuild settles it."""
    placed = Injection(session.last_turn, event.injection.items)
    opening.injection_placed(session, event.injection, placed)
    return [JournalInjection(placed, None if session.injected_unsure else session.injected_framing)]


def injections_read(session: ThreadSession, event: InjectionsLoaded) -> list[ThreadAction]:
    opening.injections_loaded(session, event.loaded, event.framing, event.unsure, event.last_turn)
    return []


def replay_wanted(session: ThreadSession, event: ReplayWanted) -> list[ThreadAction]:
    """A rebuild moved the thread: the items go back in, in order. A revert
    in place keeps what sat before the thread's first turn (put back by an
    earlier rebuild; never reverted in place while unsure); a fresh thread
    holds none of them."""
    if event.kept_framing and session.injected_unsure:
        return []
    kept = session.injected_framing if event.kept_framing else 0
    items = [item for injection in session.injected[kept:] for item in injection.items]
    if not items:
        if session.injected_unsure or session.injected_framing != kept:
            opening.replay_settled(session, kept)
            return [WriteFraming(kept)]
        return []
    opening.replaying(session)
    return [SendInjections(items, kept, len(session.injected))]


def replay_answered(session: ThreadSession, event: ReplayAnswered) -> list[ThreadAction]:
    """Applied: the thread holds them all. Refused: what it held before. No
    answer in time: it may yet be applied, so it stays unsure."""
    if event.applied is None:
        return [ReplayMissed()]
    framing = event.target if event.applied else event.kept
    opening.replay_settled(session, framing)
    return [WriteFraming(framing)] if event.applied else [WriteFraming(framing), ReplayMissed()]


def turns_reverted(session: ThreadSession, event: TurnsReverted) -> list[ThreadAction]:
    dropped = set(event.gone)
    if not opening.injections_dropped(session, dropped):
        return []
    return [DropInjections(sorted(dropped))]


RULES: dict[type[ThreadEvent], Rule] = {
    TurnFellBack: fell_back,
    ContextFound: context_found,
    ContinuityFound: continuity_found,
    ProjectionFailed: projection_failed,
    ForwardFailed: forward_failed,
    TurnAnswered: answered,
    TurnAccepted: turn_accepted,
    JoinAnswered: join_answered,
    ThreadIdle: idle,
    Rebuilt: turn_rebuilt,
    RebuildUnavailable: rebuild_unavailable,
    UsageReported: usage_known,
    RebuildAtFraming: framing_found,
    FirstTurnLost: first_turn_lost,
    RevertRefused: revert_refused,
    ThreadMoved: thread_moved,
    SwitchRolledBack: switch_rolled_back,
    NothingMoved: nothing_moved,
    RebuildRevertSent: rebuild_revert_sent,
    RebuildRevertRefused: rebuild_revert_refused,
    RebuildRevertAnswered: rebuild_revert_answered,
    RevertedNoticeMissed: reverted_notice_missed,
    RevertedNoticeCame: reverted_notice_came,
    ItemCompleted: item_completed,
    TurnCompleted: completed,
    FinalizeStarted: finalize_started,
    JoinSlotTaken: join_slot_taken,
    TurnMirroring: mirroring,
    TurnIngested: ingested,
    MarkerPending: marker_pending,
    MarkerWritten: marker_written,
    FinalizeEnded: finalize_ended,
    ItemsInjected: items_injected,
    InjectionReady: injection_ready,
    InjectionsLoaded: injections_read,
    ReplayWanted: replay_wanted,
    ReplayAnswered: replay_answered,
    TurnsReverted: turns_reverted,
    **session_rules.RULES,
}
"""ThreadEvent type -> its rule (the rules of a turn's start are :mod:`.state`'s, those of the session half :mod:`.session_rules`'s)."""
