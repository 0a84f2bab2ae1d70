"""A thread's state: what the sidecar knows of one client thread (a session)
and of its turns, in this process.

Plain records, no I/O and no trio: the thread's open files (mirror, ledger,
inspect log) and its trio primitives (``ready``, the one-turn-at-a-time
``slot``, ``reverts_answered``) are handles the lifecycle gives it
(:func:`sidecar.session.state.new_session`). Only this package
writes the fields: the lifecycle jobs call its transitions (the records'
methods, :mod:`.holdings`, :mod:`.opening`), and
``tests/docs/test_thread_state_owner.py`` counts every write from outside.
The ledger fields (``held``, ``turns_since_rebuild``, ``force_rebuild``,
``projected_epoch``, ``sizes``) are what :mod:`sidecar.thread.planner`
plans a turn from; :class:`sidecar.thread.holdings.Holdings` is them as
one record (what the ledger's journal records). What the thread's
processes learned is :class:`LearnedMachine`'s (its vocabulary in
:mod:`.learned`): here, as everything a steady ``turn/start`` reads of the
thread, in one module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from engines import AgentMessage, PromptCacheInfo, Usage

from . import events, holdings, machine
from .learned import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_TOKEN_RESERVE,
    MIN_PROMPT_BUDGET_RATIO,
    MIN_PROMPT_BUDGET_TOKENS,
    AdditionSent,
    BootstrapFailed,
    Bootstrapped,
    Journal,
    Learned,
    LearnedEntry,
    LearnedEvent,
    MaintainedOnOpening,
    Restored,
    SessionChanged,
    ToolsGiven,
    WindowReported,
)
from .planner import FingerprintCache, ThreadHoldings, fingerprints, plan_turn

if TYPE_CHECKING:
    import trio

    from .files import Injection, InspectFile, LedgerFile, Mirror


class Unfollowed(msgspec.Struct):
    """A client revert Codex answered that the mirror has not followed yet."""

    before: str
    into_archive: bool
    in_flight: frozenset[str]
    """Turns running or finalising at the answer: the only ones that may be
    mirrored before the follow (Codex interrupted them; they are reverted too)."""
    holder: Any
    """The proxy gate holding the client's later requests on the thread."""


class RevertNoise(msgspec.Struct):
    """What the client must not see of a thread's rebuild reverts: while one
    is unanswered, every status notification of the thread; and one
    ``thread/reverted`` per revert (Codex sends it after the answer). Each
    revert has a ticket; a ``thread/reverted`` takes the oldest."""

    answered: bool = False
    tickets: list[trio.Event] = msgspec.field(default_factory=list)

    def sent(self, ticket: trio.Event) -> None:
        """A rebuild revert went to Codex: its noise is swallowed until answered."""
        self.answered = False
        self.tickets.append(ticket)

    def refused(self, ticket: trio.Event) -> None:
        """Codex refused (or never answered) it: no ``thread/reverted`` comes."""
        self.answered = True
        if ticket in self.tickets:
            self.tickets.remove(ticket)

    def answered_now(self) -> None:
        self.answered = True


class TurnState(msgspec.Struct):
    client_id: Any
    original_input: list[dict[str, Any]] | None
    pre_prompt_count: int = 0
    history: list[AgentMessage] = msgspec.field(default_factory=list)
    turn_id: str | None = None
    trigger: str | None = None
    """``turn/start.turnTrigger`` as sent (OpenClaw: ``user``, ``heartbeat``, ``cron``, ...)."""
    items: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    item_times: dict[str, int] = msgspec.field(default_factory=dict)
    projected: bool = False
    assembled_count: int | None = None
    estimated_tokens: int | None = None
    fallback_reason: str | None = None
    mode: str | None = None
    epoch: str | None = None
    assembled_roles: list[list[Any]] = msgspec.field(default_factory=list)
    channels: list[str] = msgspec.field(default_factory=list)
    context_chars: int = 0
    rendered: int = 0
    dropped: int = 0
    original_chars: int = 0
    sent_chars: int = 0
    stale: int = 0
    addition_pending: str | None = None
    epoch_pending: str | None = None
    received: float = 0.0
    """When the client's ``turn/start`` came (trio's clock; 0: a turn the sidecar did not hold)."""
    hold_ms: float | None = None
    revert_ms: float | None = None
    """How long Codex took to answer this turn's rebuild revert (part of hold_ms)."""
    switched: bool = False
    """The rebuild moved the thread onto a fresh backing thread (not a revert)."""
    held_plan: list[str] | None = None
    """Fingerprints of what the Codex thread holds once this turn's projection
    is in (before the turn's own messages); None when nothing was tracked."""
    rebuilt: bool = False
    forwarded: bool = False
    """Codex has been sent this turn's ``turn/start``: until its
    ``turn/completed`` (or until Codex says otherwise that it is over, see
    ``ended``), a ``turn/start`` on the thread joins it."""
    ended: bool = False
    """Codex said the turn is over though its ``turn/completed`` has not come
    (lost, or still on its way): the thread went idle, or a ``turn/start``
    sent to join it started a turn of its own. A ``turn/start`` no longer
    joins it; its ``turn/completed``, if it comes, is finalised as usual."""
    params: dict[str, Any] | None = None
    """The client's ``turn/start`` params as the projection started from
    (before it): what a retry of a turn that overflowed projects again."""
    attempt: int = 0
    """0: the client's own ``turn/start``; 1: the sidecar's retry of it after
    it overflowed the context window (``sidecar.session.overflow``)."""
    budget: int | None = None
    """The token budget the engine assembled against (inspection records)."""
    engine_tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """The engine's tool calls the sidecar answered in this turn (bounded
    text): inspection records, for ``view``."""
    sent_text: dict[str, str] | None = None
    """What the projection put into the ``turn/start`` (``input``,
    ``additionalContext``), bounded: inspection records, for ``view``."""
    openclaw_context: str | None = None
    """The input came with an assembled context of OpenClaw's own:
    ``continuity`` (its one-off rendering on a new thread, replaced by the
    engine's) or ``engine`` (its own engine projecting: passed as it is)."""

    # -- transitions (the turns job, the overflow retry) ------------------

    @property
    def heartbeat(self) -> bool:
        """OpenClaw's heartbeat run (``turn/start.turnTrigger`` is ``heartbeat``)."""
        return self.trigger == "heartbeat"

    def retry(self) -> TurnState:
        """The sidecar's retry of this turn (it overflowed the context window),
        from the input it projected from (OpenClaw's continuity already cut)."""
        given = (self.params or {}).get("input")
        return TurnState(client_id=self.client_id, original_input=given if isinstance(given, list) else self.original_input,
                         trigger=self.trigger, attempt=self.attempt + 1, params=self.params)

    def retry_forwarded(self, first: TurnState) -> None:
        self.openclaw_context = first.openclaw_context  # for its inspection record: what the client's input carried
        self.forwarded = True

    def fell_back(self, reason: str) -> None:
        """The client's own request goes (fail open), for ``reason``."""
        self.fallback_reason = reason

    def context_carried(self, whose: str | None) -> None:
        """Whose assembled context the client's input carries (``continuity``, ``engine``)."""
        self.openclaw_context = whose

    def history_read(self, history: list[AgentMessage]) -> None:
        """The mirrored messages as the last turn left them (the turn's own come after)."""
        self.history, self.pre_prompt_count = history, len(history)

    def continuity_cut(self, params: dict[str, Any], stripped: list[Any]) -> dict[str, Any]:
        """OpenClaw's continuity block cut from the input: the params a retry starts from."""
        self.params = {**params, "input": stripped}
        return self.params

    def note_assembly(self, *, count: int, tokens: int | None, budget: int, roles: list[list[Any]], mode: str, epoch: str | None) -> None:
        self.assembled_count, self.estimated_tokens, self.budget = count, tokens, budget
        self.assembled_roles, self.mode, self.epoch = roles, mode, epoch

    def note_plan(self, held_after: list[str], epoch_pending: str | None, stale: int | None) -> None:
        """The planner's verdict: what the thread holds once the projection is
        in, the epoch it starts, and (a tail) how much of it is stale."""
        self.held_plan, self.epoch_pending = held_after, epoch_pending
        if stale is not None:
            self.stale = stale

    def rebuild_unavailable(self) -> None:
        self.held_plan, self.epoch_pending = None, None
        self.fallback_reason = "rebuild-unavailable"

    def mark_rebuilt(self) -> None:
        self.rebuilt = True

    def projection_failed(self, reason: str) -> None:
        """The projection could not be rendered: after a rebuild, nothing was projected after all."""
        if self.rebuilt:
            self.held_plan = []
        self.fallback_reason = reason

    def note_render(self, *, rendered: int, dropped: int, context_chars: int, original_chars: int, sent_chars: int) -> None:
        self.rendered, self.dropped, self.context_chars = rendered, dropped, context_chars
        self.original_chars, self.sent_chars = original_chars, sent_chars

    def note_projection(self, channels: list[str], addition: str | None, sent: dict[str, str] | None) -> None:
        """The projection changed the request, through ``channels``, with an
        addition held once Codex accepts the turn."""
        self.projected = True
        self.channels.extend(channels)
        if addition is not None:
            self.addition_pending = addition
        self.sent_text = sent

    def refused_by_codex(self) -> None:
        """Codex refused the projected ``turn/start`` and took the client's own:
        nothing of the projection reached the thread."""
        self.projected, self.channels = False, []
        self.addition_pending = self.epoch_pending = None
        self.held_plan = [] if self.rebuilt else None
        self.fallback_reason = "codex-refused"


class ThreadSession(msgspec.Struct):
    """One Codex thread the client uses, and the OpenClaw session it belongs
    to (``session_id``: the engine's session, the mirror's file; the thread
    id itself until :mod:`sidecar.session.identity` says otherwise)."""

    thread_id: str
    session_key: str
    path: Path
    ready: trio.Event
    """Set once the session is open."""
    slot: trio.Semaphore
    """One turn at a time per thread, in arrival order (trio semaphores are
    FIFO and, unlike locks, may be released by the finalising task)."""
    reverts_answered: trio.Event
    """Set whenever the last unanswered client revert is answered."""
    session_id: str = ""
    via: str = "thread"
    """How the session was found (``sidecar.session.identity.Via``)."""
    relay: str | None = None
    """OpenClaw's hook relay id the thread was last started or resumed with."""
    fresh: bool = False
    """Started (``thread/start``) in this process and no turn accepted yet."""
    turns_this_opening: int = 0
    """Turns accepted since the thread was last started or resumed here."""
    cwd: str | None = None
    model: str | None = None
    mirror: Mirror | None = None
    had_history: bool = False
    turns: dict[str, TurnState] = msgspec.field(default_factory=dict)
    current: TurnState | None = None
    last_usage: Usage | None = None
    prompt_cache: PromptCacheInfo | None = None
    current_token_count: int | None = None
    warned_double_projection: bool = False
    native_compactions: int = 0
    """Client ``thread/compact/start`` requests forwarded after the engine's
    compaction that Codex has not answered yet (the session is not released meanwhile)."""
    completed_turns: set[str] = msgspec.field(default_factory=set)
    """Turn ids whose ``turn/completed`` was taken (a replay is not finalised twice)."""
    marking: set[trio.Event] = msgspec.field(default_factory=set)
    """Finalized markers being written (each set once written): the next
    turn need not wait for them, the session's release does."""
    projected_epoch: str | None = None
    held: list[str] | None = None
    """Fingerprints of the mirrored messages the Codex thread holds, in order
    (its own turns plus what the sidecar projected); None: not known."""
    turns_since_rebuild: list[str] | None = None
    force_rebuild: bool = False
    revert_unsupported: bool = False
    rebuilds: int = 0
    sizes: dict[str, int] = msgspec.field(default_factory=dict)
    """Characters of each fingerprinted message (for the stale slack)."""
    inspect: InspectFile | None = None
    ledger: LedgerFile | None = None
    fingerprints: FingerprintCache = msgspec.field(default_factory=FingerprintCache)
    injected: list[Injection] = msgspec.field(default_factory=list)
    """What the client injected into the thread outside turn/start, in order."""
    injected_framing: int = 0
    """How many of the first sit before the Codex thread's first turn (put
    back there by a rebuild): an in-place revert keeps those, as Codex does."""
    injected_unsure: bool = False
    """A replay of them was cut short (``sidecar.store.injected``): what the
    Codex thread holds before its first turn is not known."""
    last_turn: str | None = None
    """The thread's newest client turn this process knows (where an injection goes)."""
    """The ledger's durable record (``sidecar.store.ledger``)."""
    framing_only: bool = False
    """A fork the sidecar made from Codex's framing: its ledger starts empty."""
    reverts_unanswered: int = 0
    """Client thread/reverts sent to Codex and not answered yet."""
    unfollowed: Unfollowed | None = None
    """A client revert the mirror has not followed yet: whichever comes first
    with the turn slot (the forget, or a turn/start queued before the revert)
    follows it before anything assembles; after a failed follow, the next turn."""
    live_turns: list[str] | None = None
    """Archived turns Codex still holds (a revert to the framing drops them
    all); None: not known in this process, the archive knows."""
    last_items: dict[str, str | None] = msgspec.field(default_factory=dict)
    """Turn id -> id of its last item (None: none), for the turns finalised in
    this process: where a client revert's ``itemsBackwardsCursor`` points."""
    stats: dict[str, Any] = msgspec.field(default_factory=dict)
    learned: LearnedMachine | None = None
    """What the thread's processes learned (window, client tools, bootstrap,
    addition sent), read from its session's journal once in this process
    (``sidecar.lifecycle.calls.EngineCalls.machine``)."""
    learned_key: str | None = None
    """The session key ``learned`` was read under: another key (the session
    got known) reads it again."""
    closed: bool = False
    """Codex sent ``thread/closed`` (it unloaded the thread) and no request
    has opened the thread again since: the session is released once idle."""

    def __post_init__(self) -> None:
        if not self.session_id:
            self.session_id = self.thread_id

    @property
    def busy(self) -> bool:
        return self.slot.value == 0

    @property
    def settled(self) -> bool:
        """No turn under way and every finalized marker written."""
        return not self.busy and not self.marking

    def joins_running_turn(self) -> bool:
        """Whether a ``turn/start`` now joins the thread's running turn in
        Codex: its current turn was sent to Codex and Codex has not said it is
        over (``turn/completed``, or an ``ended`` signal)."""
        current = self.current
        return current is not None and current.forwarded and not current.ended and current.turn_id not in self.completed_turns

    def turn_over_in_codex(self) -> bool:
        """The current turn (holding the slot) no longer runs in Codex: its
        ``turn/completed`` was taken (finalising) or Codex said it ended."""
        current = self.current
        return current is not None and (current.ended or current.turn_id in self.completed_turns)

    def codex_idle(self) -> bool:
        """Codex says no turn runs on the thread (``thread/status/changed``
        to idle, notLoaded or systemError). A current turn Codex accepted
        (its ``turn/start`` answered, so the status is not an earlier one)
        and whose ``turn/completed`` has not come is over: returns whether
        that is news. Its completion normally follows at once; if it was
        lost, the next ``turn/start`` is held like any other and takes the
        slot over after ``previous_turn_wait``."""
        current = self.current
        if current is None or not current.forwarded or current.ended or current.turn_id is None or current.turn_id in self.completed_turns:
            return False
        current.ended = True
        return True

    def started_by_join(self, turn_id: str) -> tuple[TurnState, bool]:
        """Codex answered a joining ``turn/start`` with ``turn_id``, a turn
        other than the current one: it had ended that turn (its
        ``turn/completed`` taken, lost or on its way) and started a turn of
        its own. Returns the new turn's state (untracked, like a turn the
        sidecar did not hold, so finalisation reads its input from its
        items) and whether it is now the thread's running turn, so that later
        ``turn/start``s join it and its end frees the thread:

        - the thread is free: it takes the slot;
        - the current turn's ``turn/completed`` was taken (finalising): it
          waits for the slot, finalised after that turn, in order;
        - the current turn has no ``turn/completed``: Codex ended it, so the
          new turn takes its slot over (that turn, should its completion
          still come, is finalised without freeing the slot)."""
        state = self.turns.get(turn_id) or TurnState(client_id=None, original_input=None, turn_id=turn_id)
        state.forwarded = True
        self.turns[turn_id] = state
        current = self.current
        if turn_id in self.completed_turns or current is state:
            return state, current is state
        if current is None:
            if self.slot.value == 0:
                return state, False
            self.slot.acquire_nowait()
            self.current = state
            return state, True
        if current.turn_id in self.completed_turns:
            return state, False
        current.ended = True
        self.current = state
        return state, True

    # -- the turn slot's transitions -------------------------------------

    def take_slot(self, state: TurnState) -> None:
        """The turn holds the thread's slot (its own, or taken over from a turn that never finished)."""
        self.current = state

    def turn_forwarded(self, state: TurnState, hold_ms: float) -> None:
        """The turn's ``turn/start`` leaves for Codex: from now a ``turn/start``
        on the thread joins it. OpenClaw's continuity comes with a thread's
        first turn only."""
        state.hold_ms, state.forwarded = hold_ms, True
        self.fresh = False
        self.turns_this_opening += 1

    def accept(self, state: TurnState, turn_id: str) -> None:
        """Codex took the turn's ``turn/start``: the turn has its id. A turn
        Codex joined it to that the sidecar did not start (one a join
        began) gives it what it collected."""
        state.turn_id = turn_id
        known = self.turns.get(turn_id)
        if known is not None and known is not state:
            state.items = {**known.items, **state.items}
            state.item_times = {**known.item_times, **state.item_times}
            if known.forwarded:  # its first userMessage is the join's input, not this request's
                state.original_input = known.original_input
        self.turns[turn_id] = state

    def retry_accepted(self, first: TurnState) -> None:
        """The retry is the turn: the first attempt is never finalised."""
        if first.turn_id is not None:
            self.turns.pop(first.turn_id, None)

    def item_completed(self, turn_id: str, item: dict[str, Any], stamp: Any) -> None:
        """An item of the turn completed (a turn not known yet gets a record)."""
        state = self.turns.get(turn_id)
        if state is None:
            state = self.turns[turn_id] = TurnState(client_id=None, original_input=None, turn_id=turn_id)
        state.items[item["id"]] = item
        if isinstance(stamp, int):
            state.item_times[item["id"]] = stamp

    def finalising(self, turn_id: str) -> TurnState:
        """The turn's ``turn/completed`` is being finalised: its record leaves the table."""
        return self.turns.pop(turn_id, None) or TurnState(client_id=None, original_input=None, turn_id=turn_id)

    def finalising_join(self, state: TurnState) -> None:
        """A turn Codex made of a joining ``turn/start`` took the slot (after the turn it had ended)."""
        self.current = state

    def finalised(self, turn_id: str, last_item: str | None) -> None:
        """The turn is mirrored: the newest client turn (where an injection
        goes), Codex holds it, and its last item (a revert's cursor)."""
        if self.live_turns is not None:
            self.live_turns.append(turn_id)
        self.last_items[turn_id] = last_item
        self.last_turn = turn_id

    def warn_double_projection(self) -> bool:
        """Whether this is the first time (the warning goes once a thread)."""
        first, self.warned_double_projection = not self.warned_double_projection, True
        return first

    def end_turn(self, state: TurnState) -> None:
        """The turn is over (finalised, refused or never forwarded): free the slot."""
        if self.current is state:
            self.current = None
            if self.slot.value == 0:
                self.slot.release()


# -- the machine: one entry for every change (events in, actions out) -------


def handle(session: ThreadSession, event: events.ThreadEvent) -> list[events.ThreadAction]:
    """The thread's machine: ``event`` (:mod:`.events`) changes the thread's
    records by its rule (:data:`RULES`), which returns what the job must do.
    Pure: no I/O, no clock, no trio; a job builds the event, calls this and
    carries the actions out in order."""
    return RULES[type(event)](session, event)


def turn_requested(session: ThreadSession, event: events.TurnRequested) -> list[events.ThreadAction]:
    """A ``turn/start`` joins the running turn (Codex makes it part of it), or
    is held while the engine assembles. While it is held, the client's later
    requests on the thread wait behind it: from now when the thread is idle
    or only finalising its last turn; from when the slot is free otherwise."""
    if session.joins_running_turn():
        return [events.Join()]
    if not session.busy or session.turn_over_in_codex():
        return [events.Gate(), events.Hold(True)]
    return [events.Hold(False)]


def turn_held(session: ThreadSession, event: events.TurnHeld) -> list[events.ThreadAction]:
    """The held turn has the slot: it gates now if it did not, waits for the
    client's unanswered reverts, then assembles."""
    session.take_slot(event.turn)
    actions: list[events.ThreadAction] = [] if event.gated else [events.Gate()]
    if session.reverts_unanswered:
        actions.append(events.WaitReverts())
    actions.append(events.Assemble())
    return actions


def mirror_read(session: ThreadSession, event: events.HistoryRead) -> list[events.ThreadAction]:
    event.turn.history_read(event.history)
    return []


def turn_assembled(session: ThreadSession, event: events.TurnAssembled) -> list[events.ThreadAction]:
    """What of the engine's assembly the turn projects. ``per_turn``: all of
    it, in the input (it then sits in the history untracked). ``delta`` and
    ``epoch``: the planner decides from the ledger alone: the tail the
    thread lacks, nothing, or a rebuild."""
    state = event.turn
    state.note_assembly(count=len(event.messages), tokens=event.estimated_tokens, budget=event.budget, roles=event.roles, mode=event.mode, epoch=event.epoch)
    if event.mode not in ("delta", "epoch"):
        holdings.untracked_projection(session)
        return [events.ProjectWhole()]
    fps = fingerprints(session.sizes, event.messages, session.fingerprints)
    held = session.held if session.held is not None else fingerprints(session.sizes, event.history, session.fingerprints)
    thread = ThreadHoldings(held=held, sizes=session.sizes, force_rebuild=session.force_rebuild,
                            projected_epoch=session.projected_epoch, has_turns=bool(session.turns_since_rebuild))
    plan = plan_turn(thread, fps, mode="epoch" if event.mode == "epoch" else "delta", epoch=event.epoch,
                     estimated_tokens=event.estimated_tokens, history_empty=not event.history, slack=event.slack)
    state.note_plan(list(plan.held_after), plan.epoch_pending, plan.stale if plan.action == "tail" else None)
    actions: list[events.ThreadAction] = [events.ExpectRebuilds()] if event.engine_epochs or plan.drops_content else []
    if plan.action == "rebuild":
        return [*actions, events.Rebuild()]
    return [*actions, events.ProjectTail(plan.tail_from if plan.action == "tail" else len(event.messages))]


def turn_projected(session: ThreadSession, event: events.TurnProjected) -> list[events.ThreadAction]:
    """The figures of what the turn sends; a projection that changed the
    request goes in, through the channels it used."""
    state = event.turn
    state.note_render(rendered=event.rendered, dropped=event.dropped, context_chars=event.context_chars, original_chars=event.original_chars, sent_chars=event.sent_chars)
    if not event.changed:
        return []
    channels = ["turn/start.input" if event.placement == "input" else "turn/start.additionalContext[openclaw_context]"] if event.has_context else []
    if event.addition is not None:
        channels.append("turn/start.additionalContext[openclaw_system_prompt_addition]")
    state.note_projection(channels, event.addition, event.sent)
    return [events.ApplyProjection()]


def turn_released(session: ThreadSession, event: events.TurnReleased) -> list[events.ThreadAction]:
    """The turn leaves for Codex, projected or as the client sent it: from
    now a ``turn/start`` on the thread joins it."""
    state = event.turn
    session.turn_forwarded(state, event.hold_ms)
    session.stats["lastTurn"] = {
        "holdMs": state.hold_ms,
        "projected": state.projected,
        "assembledMessageCount": state.assembled_count,
        "estimatedTokens": state.estimated_tokens,
        "fallback": state.fallback_reason,
    }
    return [events.ForwardOriginal()] if event.edited is None else [events.ForwardParams(event.edited)]


RULES: dict[type[events.ThreadEvent], Callable[[ThreadSession, Any], list[events.ThreadAction]]] = {
    events.TurnRequested: turn_requested,
    events.TurnHeld: turn_held,
    events.HistoryRead: mirror_read,
    events.TurnAssembled: turn_assembled,
    events.TurnProjected: turn_projected,
    events.TurnReleased: turn_released,
    **machine.RULES,
}
"""Event type -> its rule: a turn's start here (on a steady ``turn/start``'s
path, which then crosses no more modules), the rest :mod:`.machine`'s."""


def log_fields(session: ThreadSession, engine_id: str, **more: Any) -> dict[str, Any]:
    """The structured log fields naming a session (ids only, never text)."""
    fields = {"sessionId": session.session_id, "threadId": session.thread_id, "engineId": engine_id}
    if session.current is not None and session.current.turn_id:
        fields["turnId"] = session.current.turn_id
    fields.update(more)
    return fields


# -- what a thread's processes learned (:mod:`.learned`) ----------------------------


class LearnedMachine:
    """One thread's learned facts. Pure: :meth:`handle` returns the journal
    entries its caller must write; nothing else changes outside it."""

    def __init__(self, thread_id: str, state: Learned | None = None) -> None:
        self.thread_id = thread_id
        self.state = state or Learned()

    def handle(self, event: LearnedEvent) -> list[Journal]:
        state = self.state
        match event:
            case WindowReported(tokens):
                if tokens <= 0 or tokens == state.window:
                    return []
                self.state = msgspec.structs.replace(state, window=tokens)
                return [Journal(LearnedEntry(self.thread_id, window=tokens))]
            case ToolsGiven(names):
                if names == state.tools:
                    return []
                self.state = msgspec.structs.replace(state, tools=frozenset(names))
                return [Journal(LearnedEntry(self.thread_id, tools=tuple(sorted(names))))]
            case Bootstrapped():
                self.state = msgspec.structs.replace(state, bootstrapped=True, opened_here=True)
                if state.bootstrapped:
                    return []
                return [Journal(LearnedEntry(self.thread_id, bootstrapped=True))]
            case AdditionSent(digest):
                if digest == state.addition:
                    return []
                self.state = msgspec.structs.replace(state, addition=digest)
                return [Journal(LearnedEntry(self.thread_id, addition=digest))]
            case BootstrapFailed() | MaintainedOnOpening():
                self.state = msgspec.structs.replace(state, opened_here=True)
                return []
            case Restored(disk):
                self.state = Learned(
                    window=state.window if state.window is not None else disk.window,
                    tools=state.tools if state.tools is not None else disk.tools,
                    bootstrapped=state.bootstrapped or disk.bootstrapped,
                    addition=state.addition if state.addition is not None else disk.addition,
                    opened_here=state.opened_here,
                )
                return []
            case SessionChanged(disk):
                self.handle(Restored(disk))
                self.state = msgspec.structs.replace(self.state, bootstrapped=disk.bootstrapped, opened_here=False)
                return []
        raise TypeError(f"not a learned-state event: {event!r}")

    def joined(self, session: Learned) -> list[Journal]:
        """The thread's session journal, read once its session is known,
        holds ``session``: a window the thread learned before (under its own
        key: a resume's usage reported before the binding was read, a thread
        that was a session of its own) goes to it when it has none, so the
        session's next Codex thread has a budget from its first turn."""
        window = self.state.window
        if window is None or session.window is not None:
            return []
        return [Journal(LearnedEntry(self.thread_id, window=window))]

    def opening_step(self, had_history: bool) -> Literal["bootstrap", "maintain"] | None:
        """What the first turn of the session in this process runs before it
        assembles. ``bootstrap`` (with its maintenance) once a session: for
        one with history that no process bootstrapped yet (a failed one is
        tried again by the next process). ``maintain``: bootstrap
        maintenance alone, once a process, for a session bootstrapped
        earlier, so an engine redoes background maintenance a kill
        interrupted before it assembles. A session without history needs
        neither: the engine follows it from its first turn
        (:class:`Bootstrapped` then says so for later processes)."""
        if self.state.opened_here or not had_history:
            return None
        return "maintain" if self.state.bootstrapped else "bootstrap"



def token_budget(window: int | None, *, explicit: int | None = None, reserve: int = DEFAULT_TOKEN_RESERVE) -> int:
    """The budget the engine gets: an explicit setting as it is; else the
    window (:data:`DEFAULT_CONTEXT_WINDOW` while unknown) minus ``reserve``,
    leaving at least ``min(8,000, window / 2)`` tokens, as OpenClaw does.
    Never ``None``, never more than the window."""
    if explicit is not None and explicit > 0:
        return explicit
    known = window if window is not None and window > 0 else DEFAULT_CONTEXT_WINDOW
    floor = min(MIN_PROMPT_BUDGET_TOKENS, max(1, int(known * MIN_PROMPT_BUDGET_RATIO)))
    kept_out = min(max(0, reserve), max(0, known - floor))
    return max(1, known - kept_out)
