"""The per-thread machine's vocabulary: the events a lifecycle job builds
from what the client and Codex sent (frozen records in), and the actions
:func:`sidecar.thread.state.handle` answers with (frozen records out, for
the job to carry out: the gate, the engine, the relay, the files).

Data only, no I/O: a msgspec Struct is built without running Python code
of this module, so a steady ``turn/start`` crosses no more modules for its
events. An event names what happened, in the past tense or as a request
(``TurnRequested``); an action names what the job must do
(``ForwardParams``, ``WriteLedger``). The rules that turn one into the other
are :data:`sidecar.thread.state.RULES` and :data:`sidecar.thread.machine.RULES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    import trio

    from engines import AgentMessage, PromptCacheInfo, Usage

    from .files import Injection
    from .holdings import Holdings
    from .learned import LearnedEvent
    from .planner import Slack
    from .state import RevertNoise, TurnState


class ThreadEvent(msgspec.Struct, frozen=True):
    """Something the client or Codex did to the thread (or a job's I/O finished)."""


class ThreadAction(msgspec.Struct, frozen=True):
    """Something a job must do for the thread (the rules never do I/O)."""


# ------------------------------------------------------------------ events: a turn's start


class TurnRequested(ThreadEvent, frozen=True):
    """The client's ``turn/start`` on this thread, understood (its typed view decoded)."""


class TurnHeld(ThreadEvent, frozen=True):
    """The held ``turn/start`` has the thread's turn slot (``turn`` is its new record)."""

    turn: TurnState
    gated: bool
    """The client's later requests on the thread already wait behind it."""


class TurnFellBack(ThreadEvent, frozen=True):
    """The held turn sends the client's own request (fail open), for ``reason``
    (no mirror, OpenClaw's continuity kept, the engine past its deadline or
    failing, anything raised while assembling)."""

    turn: TurnState
    reason: str


class ContextFound(ThreadEvent, frozen=True):
    """The held turn's input carries an assembled context of OpenClaw's own
    (``sidecar.session.continuity.classify``): ``continuity`` (its one-off
    rendering, replaced by the engine's) or ``engine`` (its own engine
    projecting every turn: passed as it is); None: neither."""

    turn: TurnState
    whose: str | None


class ProjectionFailed(ThreadEvent, frozen=True):
    """The assembly could not be rendered into the ``turn/start`` (the client's own request goes)."""

    turn: TurnState
    reason: str


class HistoryRead(ThreadEvent, frozen=True):
    """The mirrored messages as the last turn left them (the held turn's own come after)."""

    turn: TurnState
    history: list[AgentMessage]


class ContinuityFound(ThreadEvent, frozen=True):
    """The held turn's input carries OpenClaw's continuity (its transcript
    rendered once into a new or stale thread); ``stripped``: the input
    without it (None: the block cannot be cut)."""

    turn: TurnState
    params: dict[str, Any]
    stripped: list[Any] | None
    history_empty: bool


class TurnAssembled(ThreadEvent, frozen=True):
    """The engine assembled the held turn's context: what to project is planned from the ledger."""

    turn: TurnState
    messages: list[AgentMessage]
    estimated_tokens: int | None
    budget: int
    roles: list[list[Any]]
    """The newest assembled messages' role and size (the inspection record's)."""
    mode: str
    """``per_turn``, ``delta`` or ``epoch`` (``auto`` resolved)."""
    epoch: str | None
    engine_epochs: bool
    """The engine manages projection epochs (rebuilds will come)."""
    history: list[AgentMessage]
    slack: Slack


class TurnProjected(ThreadEvent, frozen=True):
    """The assembly was rendered into the held turn's ``turn/start``."""

    turn: TurnState
    rendered: int
    dropped: int
    context_chars: int
    original_chars: int
    sent_chars: int
    """What the turn adds to the model's input, before and after the projection."""
    changed: bool
    """The projection changed the request."""
    placement: str
    """``input`` or ``additional_context``."""
    has_context: bool
    addition: str | None
    """The system prompt addition sent (None: none, or the thread holds it already)."""
    sent: dict[str, str] | None
    """The text the projection put in, bounded (the inspection record's)."""


class TurnReleased(ThreadEvent, frozen=True):
    """The held turn is done assembling: ``edited`` params (None: the client's own) go to Codex."""

    turn: TurnState
    edited: dict[str, Any] | None
    hold_ms: float


class ForwardFailed(ThreadEvent, frozen=True):
    """The relay could not send the ``turn/start`` to Codex (it is gone)."""

    turn: TurnState


class TurnAnswered(ThreadEvent, frozen=True):
    """Codex answered a held ``turn/start``: with the turn's id, or refused it (None)."""

    client_id: Any
    turn_id: str | None
    fell_back: bool
    """The relay sent the client's own request after Codex refused the projected one."""


class TurnAccepted(ThreadEvent, frozen=True):
    """Codex took this turn's ``turn/start`` (the sidecar's own retry of an overflowed turn, say)."""

    turn: TurnState
    turn_id: str


class JoinAnswered(ThreadEvent, frozen=True):
    """Codex answered a ``turn/start`` that was sent to join the running turn."""

    turn_id: str | None


class ThreadIdle(ThreadEvent, frozen=True):
    """``thread/status/changed`` to idle, notLoaded or systemError."""


class Rebuilt(ThreadEvent, frozen=True):
    """The held turn's plan said rebuild, and the rebuild went through."""

    turn: TurnState


class RebuildUnavailable(ThreadEvent, frozen=True):
    """The held turn's plan said rebuild, and the thread could not be rebuilt."""

    turn: TurnState


class RebuildAtFraming(ThreadEvent, frozen=True):
    """A rebuild found no turn in the Codex thread: it holds its framing only."""


class FirstTurnLost(ThreadEvent, frozen=True):
    """A rebuild's revert found the ledger's first turn gone from Codex (Codex is asked instead)."""


class RevertRefused(ThreadEvent, frozen=True):
    """Codex refused a rebuild's revert; ``unsupported``: it cannot revert this thread at all."""

    unsupported: bool


class ThreadMoved(ThreadEvent, frozen=True):
    """A rebuild moved the thread: reverted it (Codex answered in ``revert_ms``) or ``switched`` it."""

    revert_ms: float
    switched: bool


class SwitchRolledBack(ThreadEvent, frozen=True):
    """Codex never accepted a switch onto a fresh backing thread: back on the thread before it."""


class NothingMoved(ThreadEvent, frozen=True):
    """No rebuild strategy moved the thread: the ledger stands as before its marker."""


class RebuildRevertSent(ThreadEvent, frozen=True):
    """A rebuild's revert went to Codex: its noise (``noise``, the in-place
    rebuild's record of the thread) is swallowed until it is answered, and
    its ``thread/reverted`` (``ticket``) when it comes."""

    noise: RevertNoise
    ticket: trio.Event


class RebuildRevertRefused(ThreadEvent, frozen=True):
    """Codex refused (or never answered) the revert of ``ticket``: no ``thread/reverted`` comes."""

    noise: RevertNoise
    ticket: trio.Event


class RebuildRevertAnswered(ThreadEvent, frozen=True):
    """Codex answered a rebuild's revert: status notices are the next turn's again."""

    noise: RevertNoise


class RevertedNoticeMissed(ThreadEvent, frozen=True):
    """The ``thread/reverted`` of ``ticket`` did not come in time: it is no longer waited for."""

    noise: RevertNoise
    ticket: trio.Event


class RevertedNoticeCame(ThreadEvent, frozen=True):
    """A ``thread/reverted`` of a thread whose rebuild reverts are being kept from the client."""

    noise: RevertNoise


class UsageReported(ThreadEvent, frozen=True):
    """``thread/tokenUsage/updated``: the last request's usage (None: not
    given) with its prompt cache and input tokens (cached included), and the
    window if Codex says it."""

    last: tuple[Usage, PromptCacheInfo, int] | None
    window: int | None


# ------------------------------------------------------------------ events: a turn's end


class ItemCompleted(ThreadEvent, frozen=True):
    """``item/completed`` of a turn of the thread."""

    turn_id: str
    item: dict[str, Any]
    stamp: Any


class TurnCompleted(ThreadEvent, frozen=True):
    """``turn/completed`` (forwarded to the client first)."""

    turn_id: str


class FinalizeStarted(ThreadEvent, frozen=True):
    """The finalising task for a completed turn runs."""

    turn_id: str


class JoinSlotTaken(ThreadEvent, frozen=True):
    """A turn Codex made of a joining ``turn/start`` got the slot (after the turn it had ended)."""

    turn: TurnState


class TurnMirroring(ThreadEvent, frozen=True):
    """The completed turn was not finalised before and is about to be mirrored."""

    turn: TurnState
    turn_id: str
    last_item: str | None
    """The id of the turn's last item (a client revert's cursor points there)."""


class TurnIngested(ThreadEvent, frozen=True):
    """The turn is mirrored and the engine's ``after_turn`` ran (``ok``: it did not fail)."""

    turn: TurnState
    turn_id: str
    status: Any
    ok: bool
    snapshot: list[AgentMessage]
    """The session's messages as the mirror holds them once the turn is in."""


class MarkerPending(ThreadEvent, frozen=True):
    """A finalized marker is being written; ``written`` is set once it is."""

    written: Any


class MarkerWritten(ThreadEvent, frozen=True):
    written: Any


class FinalizeEnded(ThreadEvent, frozen=True):
    """Finalising the turn is over, whatever happened."""

    turn: TurnState


# ------------------------------------------------------------------ events: injections


class ItemsInjected(ThreadEvent, frozen=True):
    """Codex accepted the client's ``thread/inject_items`` (non-empty ``items``)."""

    items: list[Any]


class InjectionReady(ThreadEvent, frozen=True):
    """The session is open: the injection goes after its newest turn, on disk."""

    injection: Injection


class InjectionsLoaded(ThreadEvent, frozen=True):
    """The session opened: the injection journal as read, and its newest turn."""

    loaded: list[Injection]
    framing: int
    unsure: bool
    last_turn: str | None


class ReplayWanted(ThreadEvent, frozen=True):
    """A rebuild moved the thread: the client's injected items go back in."""

    kept_framing: bool
    """The rebuild reverted in place (what sits before the first turn stays)."""


class ReplayAnswered(ThreadEvent, frozen=True):
    """Codex answered the replay: ``applied`` (True), refused (False) or not in time (None)."""

    applied: bool | None
    kept: int
    target: int


class TurnsReverted(ThreadEvent, frozen=True):
    """The client reverted these turns: what it injected after them goes too."""

    gone: list[str]


# ------------------------------------------------------------------ actions


class Join(ThreadAction, frozen=True):
    """Send the ``turn/start`` to Codex at once, unchanged: it joins the running turn."""


class Gate(ThreadAction, frozen=True):
    """The client's later requests on the thread wait behind this ``turn/start``."""


class Hold(ThreadAction, frozen=True):
    """Hold the ``turn/start`` (a task that waits for the slot, then assembles)."""

    gated: bool


class WaitReverts(ThreadAction, frozen=True):
    """Wait (bounded) for the client's unanswered reverts of the thread to be answered."""


class Assemble(ThreadAction, frozen=True):
    """Follow a pending client revert, then assemble and project the turn."""


class ApplyProjection(ThreadAction, frozen=True):
    """Put the projection into the ``turn/start``'s params (else the request goes as it came)."""


class WarnDoubleProjection(ThreadAction, frozen=True):
    """OpenClaw's own context engine projects every turn too (warned once a thread)."""


class ProjectFrom(ThreadAction, frozen=True):
    """Assemble and project from these params (OpenClaw's continuity cut: a retry starts from them too)."""

    params: dict[str, Any]


class ProjectWhole(ThreadAction, frozen=True):
    """Project the whole assembly into the turn's input (``per_turn``, trimmed to the budget)."""


class ProjectTail(ThreadAction, frozen=True):
    """Project ``assembly[start:]`` in ``additionalContext``: what the Codex thread lacks."""

    start: int


class Rebuild(ThreadAction, frozen=True):
    """Move the thread back to its framing, then project the whole assembly
    (:class:`Rebuilt` or :class:`RebuildUnavailable` follows)."""


class ExpectRebuilds(ThreadAction, frozen=True):
    """The engine will make the thread rebuild (it manages epochs, or drops held content): keep a spare."""


class ForwardOriginal(ThreadAction, frozen=True):
    """Send the client's own ``turn/start`` to Codex."""


class ForwardParams(ThreadAction, frozen=True):
    """Send the ``turn/start`` with these params (encoded once, as it leaves)."""

    params: dict[str, Any]


class ConfirmSpare(ThreadAction, frozen=True):
    """Codex took the turn: a spare thread waiting for it is confirmed."""


class Learn(ThreadAction, frozen=True):
    """Journal a fact the thread learned (before it is relied on)."""

    event: LearnedEvent


class OwnTurnStarted(ThreadAction, frozen=True):
    """A joining ``turn/start`` started a turn of its own in Codex (log it)."""

    turn_id: str
    ended: str | None


class TurnOverInCodex(ThreadAction, frozen=True):
    """Codex said the thread is idle before its running turn completed (log it)."""


class CodexCompacted(ThreadAction, frozen=True):
    """Codex compacted the thread natively inside the turn (log it)."""

    turn_id: str


class AlreadyFinalized(ThreadAction, frozen=True):
    """A replayed ``turn/completed``: not ingested twice (log it)."""

    turn_id: str


class Finalize(ThreadAction, frozen=True):
    """Finalise the completed turn (a task, after the notification is forwarded)."""

    turn_id: str


class Finalising(ThreadAction, frozen=True):
    """The record of the turn being finalised; ``wait_slot``: wait for the thread's slot first."""

    turn: TurnState
    wait_slot: bool


class GiveUpRevert(ThreadAction, frozen=True):
    """The mirror never followed a client revert and the thread went on: stop
    waiting for it (let the requests held behind it go) and log it."""

    holder: Any


class MarkFinalized(ThreadAction, frozen=True):
    """Append the turn's finalized marker to the mirror (a replay is not ingested twice)."""

    key: str
    data: dict[str, Any]


class WriteLedger(ThreadAction, frozen=True):
    """Append what the turn added to what the Codex thread holds to the ledger's journal."""

    turn_id: str
    added: list[tuple[str, int]]
    reset: bool
    turns: list[str] | None
    rebuilds: int
    force: bool
    epoch: str | None


class WriteInspect(ThreadAction, frozen=True):
    """Append the turn's inspection record (and the text it sent, if any)."""

    record: dict[str, Any]
    text: dict[str, Any] | None


class Maintain(ThreadAction, frozen=True):
    """Run the engine's turn maintenance."""


class SkipMaintenance(ThreadAction, frozen=True):
    """No turn maintenance after this turn, for ``reason`` (log it)."""

    reason: str


class WantSpare(ThreadAction, frozen=True):
    """The thread is free again: a spare thread may be prepared."""


class ResetLedger(ThreadAction, frozen=True):
    """Write the ledger's journal afresh with what the Codex thread holds."""

    holdings: Holdings


class SwallowNotice(ThreadAction, frozen=True):
    """The ``thread/reverted`` is the rebuild revert's of ``ticket``: keep it from the client and set the ticket."""

    ticket: trio.Event


class NoiseSettled(ThreadAction, frozen=True):
    """Every rebuild revert of the thread is answered and its notice seen or
    given up: stop keeping the thread's notifications from the client."""


class RecordInjection(ThreadAction, frozen=True):
    """Once the session is open, journal the injection (a task)."""

    injection: Injection


class JournalInjection(ThreadAction, frozen=True):
    """Append the placed injection to the injection journal (and the framing count, if sure)."""

    injection: Injection
    framing: int | None


class WriteFraming(ThreadAction, frozen=True):
    """Write how many injections sit before the Codex thread's first turn."""

    framing: int


class SendInjections(ThreadAction, frozen=True):
    """Journal that a replay of ``target`` injections starts, then send ``items`` to Codex."""

    items: list[Any]
    kept: int
    target: int


class ReplayMissed(ThreadAction, frozen=True):
    """The replay did not go through: the model misses the items (log it)."""


class DropInjections(ThreadAction, frozen=True):
    """Drop from the injection journal what followed these turns."""

    turns: list[str]
