"""The per-thread machine's rules of a thread's session half: its opening,
its release, the client's own reverts, compaction and a turn's overflow
retry. Each rule takes the thread and one event of
:mod:`.session_events`, changes the records through the package's
transitions (:mod:`.opening`, :mod:`.holdings`) and returns the actions the
job carries out; none does I/O. :data:`RULES` joins
:data:`sidecar.thread.machine.RULES` (and so :func:`sidecar.thread.state.handle`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import holdings, opening
from .events import Learn, ResetLedger
from .learned import AdditionSent
from .session_events import (
    EngineToolAnswered,
    FilesOpened,
    FollowEnded,
    ForkedAtFraming,
    ForkOpened,
    HistoryImported,
    HistoryKnown,
    HoldingsChanged,
    InheritAddition,
    LearnedRead,
    LedgerAfterRead,
    LedgerRestored,
    MirrorOpened,
    NativeCompactionAnswered,
    NativeCompactionSent,
    NewThreadOfHistory,
    ReadLedgerAfter,
    Release,
    ReleaseAsked,
    Reported,
    RetryAbandoned,
    RetryAccepted,
    RetryForwarded,
    RetryStarted,
    RevertAnswered,
    RevertFollowed,
    RevertSent,
    RevertsSettled,
    RevertTurnsGone,
    RevertUnfollowed,
    SessionBound,
    ThreadClosed,
    ThreadOpened,
    TurnsCaughtUp,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .events import ThreadAction, ThreadEvent
    from .state import ThreadSession


# ------------------------------------------------------------------ opening


def on_thread_opened(session: ThreadSession, event: ThreadOpened) -> list[ThreadAction]:
    opening.answered_open(session, event.method, relay=event.relay, cwd=event.cwd, model=event.model, framing_fork=event.framing_fork)
    return []


def on_session_bound(session: ThreadSession, event: SessionBound) -> list[ThreadAction]:
    opening.bound(session, event.session_id, event.session_key, event.path, event.via)
    return []


def on_mirror_opened(session: ThreadSession, event: MirrorOpened) -> list[ThreadAction]:
    opening.mirror_opened(session, event.mirror)
    return []


def on_history_known(session: ThreadSession, event: HistoryKnown) -> list[ThreadAction]:
    opening.history_known(session, event.had_history)
    return []


def on_files_opened(session: ThreadSession, event: FilesOpened) -> list[ThreadAction]:
    opening.files_opened(session, inspect=event.inspect, ledger=event.ledger)
    return []


def on_ledger_restored(session: ThreadSession, event: LedgerRestored) -> list[ThreadAction]:
    holdings.restored(session, event.recorded, event.last_inspect)
    return []


def on_history_imported(session: ThreadSession, event: HistoryImported) -> list[ThreadAction]:
    opening.history_imported(session, event.some)
    return []


def on_turns_caught_up(session: ThreadSession, event: TurnsCaughtUp) -> list[ThreadAction]:
    """Recorded as finalisation would have; the ledger says so."""
    holdings.caught_up(session, event.added, event.per_turn)
    return [] if session.ledger is None else [ResetLedger(holdings.holdings(session))]


def on_learned_read(session: ThreadSession, event: LearnedRead) -> list[ThreadAction]:
    opening.learned_read(session, event.machine, event.key)
    return []


def on_new_thread_of_history(session: ThreadSession, event: NewThreadOfHistory) -> list[ThreadAction]:
    """The planner projects what the engine assembles, and the ledger says
    so before any turn (a kill before the first turn is finalised must not
    make it claim the history); nothing when what it holds is known."""
    if session.ledger is None or not holdings.holds_nothing(session):
        return []
    return [ResetLedger(holdings.holdings(session))]


def on_forked_at_framing(session: ThreadSession, event: ForkedAtFraming) -> list[ThreadAction]:
    holdings.framing_only(session)
    return []


def on_fork_opened(session: ThreadSession, event: ForkOpened) -> list[ThreadAction]:
    """A whole fork knows its parent's addition (:func:`opening.fork_keeps_addition`);
    one cut at a turn sends it again."""
    return [InheritAddition()] if opening.fork_keeps_addition(event.params) else []


# ------------------------------------------------------------------ release


def on_thread_closed(session: ThreadSession, event: ThreadClosed) -> list[ThreadAction]:
    opening.closed(session)
    return []


def on_release_asked(session: ThreadSession, event: ReleaseAsked) -> list[ThreadAction]:
    """Closed and idle (no native compaction unanswered either), still the
    thread's session, and no rebuild revert of it under way."""
    return [Release()] if opening.releasable(session) and event.ours and not event.reverting else []


# ------------------------------------------------------------------ client reverts


def on_revert_sent(session: ThreadSession, event: RevertSent) -> list[ThreadAction]:
    opening.revert_sent(session, event.answered)
    return []


def on_revert_answered(session: ThreadSession, event: RevertAnswered) -> list[ThreadAction]:
    return [RevertsSettled()] if opening.revert_answered(session) else []


def on_revert_unfollowed(session: ThreadSession, event: RevertUnfollowed) -> list[ThreadAction]:
    opening.unfollowed(session, event.pending)
    return []


def on_revert_turns_gone(session: ThreadSession, event: RevertTurnsGone) -> list[ThreadAction]:
    holdings.turns_gone(session, event.gone)
    return []


def on_revert_followed(session: ThreadSession, event: RevertFollowed) -> list[ThreadAction]:
    """What Codex holds after the revert; when it is the ledger as it stood
    after the last turn kept, the job reads it (:class:`ReadLedgerAfter`)."""
    if not holdings.revert_followed(session, event.before, into_archive=event.into_archive):
        return []
    return [ReadLedgerAfter(holdings.last_kept(session))]


def on_ledger_after_read(session: ThreadSession, event: LedgerAfterRead) -> list[ThreadAction]:
    """Found: the addition may have come in a reverted turn, so it is sent again."""
    holdings.ledger_found(session, event.found)
    return [] if event.found is None else [Learn(AdditionSent(None))]


def on_holdings_changed(session: ThreadSession, event: HoldingsChanged) -> list[ThreadAction]:
    return [] if session.ledger is None else [ResetLedger(holdings.holdings(session))]


def on_follow_ended(session: ThreadSession, event: FollowEnded) -> list[ThreadAction]:
    opening.follow_ended(session, event.pending, event.followed)
    return []


# ------------------------------------------------------------------ compaction, overflow


def on_engine_tool_answered(session: ThreadSession, event: EngineToolAnswered) -> list[ThreadAction]:
    opening.engine_tool_called(session, event.call, kept=event.kept)
    return []


def on_reported(session: ThreadSession, event: Reported) -> list[ThreadAction]:
    opening.reported(session, event.name, event.value)
    return []


def on_native_compaction_sent(session: ThreadSession, event: NativeCompactionSent) -> list[ThreadAction]:
    opening.native_compaction_sent(session)
    return []


def on_native_compaction_answered(session: ThreadSession, event: NativeCompactionAnswered) -> list[ThreadAction]:
    opening.native_compaction_answered(session)
    return []


def on_retry_started(session: ThreadSession, event: RetryStarted) -> list[ThreadAction]:
    holdings.retry_started(session, event.first, event.retry)
    return []


def on_retry_forwarded(session: ThreadSession, event: RetryForwarded) -> list[ThreadAction]:
    event.retry.retry_forwarded(event.first)
    return []


def on_retry_accepted(session: ThreadSession, event: RetryAccepted) -> list[ThreadAction]:
    session.retry_accepted(event.first)
    return []


def on_retry_abandoned(session: ThreadSession, event: RetryAbandoned) -> list[ThreadAction]:
    holdings.retry_abandoned(session, event.first, event.retry)
    return []


RULES: dict[type[ThreadEvent], Callable[[ThreadSession, Any], list[ThreadAction]]] = {
    ThreadOpened: on_thread_opened,
    SessionBound: on_session_bound,
    MirrorOpened: on_mirror_opened,
    HistoryKnown: on_history_known,
    FilesOpened: on_files_opened,
    LedgerRestored: on_ledger_restored,
    HistoryImported: on_history_imported,
    TurnsCaughtUp: on_turns_caught_up,
    LearnedRead: on_learned_read,
    NewThreadOfHistory: on_new_thread_of_history,
    ForkedAtFraming: on_forked_at_framing,
    ForkOpened: on_fork_opened,
    ThreadClosed: on_thread_closed,
    ReleaseAsked: on_release_asked,
    RevertSent: on_revert_sent,
    RevertAnswered: on_revert_answered,
    RevertUnfollowed: on_revert_unfollowed,
    RevertTurnsGone: on_revert_turns_gone,
    RevertFollowed: on_revert_followed,
    LedgerAfterRead: on_ledger_after_read,
    HoldingsChanged: on_holdings_changed,
    FollowEnded: on_follow_ended,
    EngineToolAnswered: on_engine_tool_answered,
    Reported: on_reported,
    NativeCompactionSent: on_native_compaction_sent,
    NativeCompactionAnswered: on_native_compaction_answered,
    RetryStarted: on_retry_started,
    RetryForwarded: on_retry_forwarded,
    RetryAccepted: on_retry_accepted,
    RetryAbandoned: on_retry_abandoned,
}
"""Session-half ThreadEvent type -> its rule."""
