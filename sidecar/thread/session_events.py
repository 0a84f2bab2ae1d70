"""The per-thread machine's vocabulary for a thread's session half (issue
34): its opening (Codex's answer to ``thread/start``, ``resume`` and
``fork``, the session found, its files opened), its release, the client's
own reverts, compaction and a turn's overflow retry. Frozen events in and
action records out, as :mod:`.events` (which holds the vocabulary of a
turn); the rules are :mod:`.session_rules`. Data only, no I/O."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .events import ThreadAction, ThreadEvent

if TYPE_CHECKING:
    import trio

    from .files import InspectFile, LedgerFile, Mirror, Recorded
    from .state import LearnedMachine, TurnState, Unfollowed


# ------------------------------------------------------------------ events: opening


class ThreadOpened(ThreadEvent, frozen=True):
    """Codex answered the client's ``thread/start``, ``resume`` or ``fork`` (``method``)."""

    method: str
    relay: str | None
    cwd: Any
    model: Any
    framing_fork: bool
    """A fork of Codex's framing (the client forked at an archived turn)."""


class SessionBound(ThreadEvent, frozen=True):
    """The thread belongs to this session (``sidecar.session.identity``)."""

    session_id: str
    session_key: str
    path: Path
    via: str


class MirrorOpened(ThreadEvent, frozen=True):
    """The session's mirror is open (None: unavailable, turns pass through)."""

    mirror: Mirror | None


class HistoryKnown(ThreadEvent, frozen=True):
    """Whether the session's mirror holds history (as read from it)."""

    had_history: bool


class FilesOpened(ThreadEvent, frozen=True):
    """The thread's inspection log or ledger (None: unchanged) is open."""

    inspect: InspectFile | None = None
    ledger: LedgerFile | None = None


class LedgerRestored(ThreadEvent, frozen=True):
    """What the ledger's journal last recorded (and the inspection log's last record, for an older state dir)."""

    recorded: Recorded
    last_inspect: dict[str, Any] | None


class HistoryImported(ThreadEvent, frozen=True):
    """The thread's history was imported into the mirror (``some``: it held any)."""

    some: bool


class TurnsCaughtUp(ThreadEvent, frozen=True):
    """Turns Codex holds natively that the mirror lacked were mirrored
    (``per_turn``: the fingerprints of each, when what the thread holds is known)."""

    added: list[str]
    per_turn: list[list[str]]


class LearnedRead(ThreadEvent, frozen=True):
    """The thread's learned facts, as read from the journal under ``key``."""

    machine: LearnedMachine
    key: str


class NewThreadOfHistory(ThreadEvent, frozen=True):
    """A new Codex thread of a session with history: it holds none of it."""


class ForkedAtFraming(ThreadEvent, frozen=True):
    """The thread is a fork of Codex's framing: it holds the framing only."""


class ForkOpened(ThreadEvent, frozen=True):
    """Codex answered a fork of another thread (the fork's ``params``)."""

    params: dict[str, Any]


# ------------------------------------------------------------------ events: release


class ThreadClosed(ThreadEvent, frozen=True):
    """Codex unloaded the thread (``thread/closed``, ``thread/archived``, ``thread/deleted``)."""


class ReleaseAsked(ThreadEvent, frozen=True):
    """May the thread's session be released? ``ours``: it is still the
    thread's session; ``reverting``: a rebuild revert of it is under way."""

    ours: bool
    reverting: bool


# ------------------------------------------------------------------ events: client reverts


class RevertSent(ThreadEvent, frozen=True):
    """A client ``thread/revert`` went to Codex; ``answered`` (a new event) is set when the last is answered."""

    answered: trio.Event


class RevertAnswered(ThreadEvent, frozen=True):
    """A client revert was answered (or given up on)."""


class RevertUnfollowed(ThreadEvent, frozen=True):
    """Codex reverted for the client: the mirror must follow ``pending`` before anything assembles."""

    pending: Unfollowed


class RevertTurnsGone(ThreadEvent, frozen=True):
    """The client reverted these turns: Codex no longer holds them."""

    gone: list[str]


class RevertFollowed(ThreadEvent, frozen=True):
    """Archive and mirror forgot the turns from ``before`` on."""

    before: str
    into_archive: bool


class LedgerAfterRead(ThreadEvent, frozen=True):
    """What the ledger recorded after the last turn kept: (held,
    projectedEpoch, forceRebuild); None: not known."""

    found: tuple[list[str], Any, bool] | None


class HoldingsChanged(ThreadEvent, frozen=True):
    """What the thread holds changed outside a turn: the ledger says so."""


class FollowEnded(ThreadEvent, frozen=True):
    """The mirror followed ``pending`` (or failed to: the next turn retries)."""

    pending: Unfollowed
    followed: bool


# ------------------------------------------------------------------ events: compaction, overflow


class EngineToolAnswered(ThreadEvent, frozen=True):
    """An engine tool the model called was answered: the turn's inspect
    record keeps the call (its first ``kept`` calls; none outside a turn)."""

    call: dict[str, Any]
    kept: int


class Reported(ThreadEvent, frozen=True):
    """The last ``name`` the sidecar did for the thread (``lastOverflow``,
    ``lastEngineCompaction``...), for ``sidecar/status``: diagnostics only."""

    name: str
    value: Any


class NativeCompactionSent(ThreadEvent, frozen=True):
    """The client's ``thread/compact/start`` went to Codex after the engine's compaction."""


class NativeCompactionAnswered(ThreadEvent, frozen=True):
    """Codex answered it (or it could not be sent)."""


class RetryStarted(ThreadEvent, frozen=True):
    """A turn overflowed Codex's window and is retried as ``retry``."""

    first: TurnState
    retry: TurnState


class RetryForwarded(ThreadEvent, frozen=True):
    """The retry's ``turn/start`` goes to Codex."""

    first: TurnState
    retry: TurnState


class RetryAccepted(ThreadEvent, frozen=True):
    """Codex took the retry: the first attempt is never finalised."""

    first: TurnState


class RetryAbandoned(ThreadEvent, frozen=True):
    """The retry was given up (``retry``: None before it was made)."""

    first: TurnState
    retry: TurnState | None


# ------------------------------------------------------------------ actions


class Release(ThreadAction, frozen=True):
    """Release the session: closed by Codex and nothing of it under way."""


class RevertsSettled(ThreadAction, frozen=True):
    """No client revert is left unanswered: set the thread's ``reverts_answered``."""


class ReadLedgerAfter(ThreadAction, frozen=True):
    """Read the ledger as it stood after ``turn_id`` (None: not known), then
    send :class:`LedgerAfterRead`."""

    turn_id: str | None


class InheritAddition(ThreadAction, frozen=True):
    """The fork knows its parent's system-prompt addition (when the parent
    was opened here and the fork knows none yet): learn it."""
