"""A thread's state: what the sidecar knows of one client thread (a session)
and of its turns, in this process, and what it learned of the thread across
processes.

Structs (with a few small helpers) holding what the lifecycle's jobs
share about a thread: its open files (mirror, ledger, inspect log), the
ledger's view, and the trio primitives the jobs wait on (``ready``, the
one-turn-at-a-time ``slot`` semaphore, ``reverts_answered``, the revert
``tickets``), so not plain data. The jobs read and update it, one turn at a
time per thread. The ledger fields (``held``, ``turns_since_rebuild``,
``force_rebuild``, ``projected_epoch``, ``sizes``)
are what :mod:`sidecar.session.planner` plans a turn from.

**What a thread's processes learned** (the second half below), sans I/O.

OpenClaw runs one sidecar process per ``--local`` turn, so anything a
process learns only in memory is gone by the next turn. Four facts matter:

* the model's **context window** (Codex reports it in
  ``thread/tokenUsage/updated``; without it the first turn of a fresh
  process has no budget);
* the **client's tools** as ``thread/start`` gave them (``dynamicTools``:
  OpenClaw sends them with ``thread/start`` only, never with
  ``thread/resume``, so a resumed thread would otherwise offer the engine
  no ``available_tools``);
* whether the engine's session is **bootstrapped** (bootstrap runs once a
  session, not once a process; see :meth:`LearnedMachine.opening_step`);
* which engine **system-prompt addition** the thread's history already
  carries (Codex keeps a turn's ``additionalContext`` in the thread, so a
  new process sending the same addition again would double it in every later
  model request); kept as a digest, never the text.

:class:`LearnedMachine` owns them for one thread, the way h11's connection
owns its state: events go in (:meth:`LearnedMachine.handle`), the new state
and the actions to carry out come out. It does no I/O; the only action is
:class:`Journal`, an entry the store appends to the session's journal
(``sidecar.store.learned``) before anything relies on it. An event that
changes nothing yields no action, so Codex reporting the same window on every
turn costs no write. :func:`replay` turns a journal back into the state.

The journal is the session's (today a session is one thread, keyed by the
thread's ``session_key``); entries about one thread carry its id, so after
OpenClaw moves a session to a new Codex thread the window learned on the
old one gives the new one a budget from its first turn, while tools stay
with the thread that was given them.

The budget rules (:func:`token_budget`) are pure too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import msgspec
import trio

from engines import AgentMessage, PromptCacheInfo, Usage

from ..store.injected import Injection
from ..store.inspect import InspectLog
from ..store.ledger import Ledger
from ..store.mirror import TranscriptMirror
from .planner import FingerprintCache


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


class TurnState(msgspec.Struct):
    client_id: Any
    original_input: list[dict[str, Any]] | None
    pre_prompt_count: int = 0
    history: list[AgentMessage] = msgspec.field(default_factory=list)
    turn_id: str | None = None
    heartbeat: bool = False
    """OpenClaw's heartbeat run (``turn/start.turnTrigger`` is ``heartbeat``)."""
    trigger: str | None = None
    """``turn/start.turnTrigger`` as sent (OpenClaw: ``user``, ``heartbeat``, ``cron``, ...); a
    ``heartbeat`` trigger makes ``heartbeat`` true."""
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
    received: float = msgspec.field(default_factory=trio.current_time)
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

    def __post_init__(self) -> None:
        if self.trigger == "heartbeat":
            self.heartbeat = True


class ThreadSession(msgspec.Struct):
    """One Codex thread the client uses, and the OpenClaw session it belongs
    to (``session_id``: the engine's session, the mirror's file; the thread
    id itself until :mod:`sidecar.session.identity` says otherwise)."""

    thread_id: str
    session_key: str
    path: Path
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
    mirror: TranscriptMirror | None = None
    had_history: bool = False
    ready: trio.Event = msgspec.field(default_factory=trio.Event)
    slot: trio.Semaphore = msgspec.field(default_factory=lambda: trio.Semaphore(1))
    """One turn at a time per thread, in arrival order (trio semaphores are
    FIFO and, unlike locks, may be released by the finalising task)."""
    turns: dict[str, TurnState] = msgspec.field(default_factory=dict)
    current: TurnState | None = None
    last_usage: Usage | None = None
    prompt_cache: PromptCacheInfo | None = None
    current_token_count: int | None = None
    warned_double_projection: bool = False
    compactions: int = 0
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
    inspect: InspectLog | None = None
    ledger: Ledger | None = None
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
    reverts_answered: trio.Event = msgspec.field(default_factory=trio.Event)
    """Set whenever the last of them is answered."""
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
            try:
                self.slot.acquire_nowait()
            except trio.WouldBlock:
                return state, False
            self.current = state
            return state, True
        if current.turn_id in self.completed_turns:
            return state, False
        current.ended = True
        self.current = state
        return state, True

    def end_turn(self, state: TurnState) -> None:
        """The turn is over (finalised, refused or never forwarded): free the slot."""
        if self.current is state:
            self.current = None
            if self.slot.value == 0:
                self.slot.release()


class RequestParams:
    """The params of client requests whose answers the lifecycle reads
    (thread/start, resume, fork, revert, ...), by client request id."""

    def __init__(self) -> None:
        self._params: dict[Any, dict[str, Any]] = {}

    def remember(self, client_id: Any, params: Any) -> None:
        if isinstance(params, dict):
            self._params[client_id] = params

    def get(self, client_id: Any) -> dict[str, Any] | None:
        return self._params.get(client_id)

    def pop(self, client_id: Any) -> dict[str, Any] | None:
        return self._params.pop(client_id, None)


def log_fields(session: ThreadSession, engine_id: str, **more: Any) -> dict[str, Any]:
    """The structured log fields naming a session (ids only, never text)."""
    fields = {"sessionId": session.session_id, "threadId": session.thread_id, "engineId": engine_id}
    if session.current is not None and session.current.turn_id:
        fields["turnId"] = session.current.turn_id
    fields.update(more)
    return fields


# -- what a thread's processes learned (sans I/O) --------------------------------


DEFAULT_CONTEXT_WINDOW = 200_000
"""The window assumed while nothing is known (a fresh session's first turn in
a fresh process): OpenClaw's own default context size (``DEFAULT_CONTEXT_TOKENS``).
Codex 0.169.0's ``model/list`` does not report windows, so this is the fallback
until the first ``thread/tokenUsage/updated``; it is below every current GPT-5
window (Codex reports 258,400), so the budget it gives is a safe one."""

DEFAULT_TOKEN_RESERVE = 20_000
"""Tokens kept out of the default budget: OpenClaw's Codex projection reserve."""

MIN_PROMPT_BUDGET_TOKENS = 8_000
MIN_PROMPT_BUDGET_RATIO = 0.5
"""A window too small for the reserve still leaves the engine
``min(8,000, window / 2)`` tokens (OpenClaw's own floor for its projection)."""


class Learned(msgspec.Struct, frozen=True, kw_only=True):
    """A thread's learned facts; ``None``: not known yet."""

    window: int | None = None
    tools: frozenset[str] | None = None
    bootstrapped: bool = False
    addition: str | None = None
    """:func:`addition_digest` of the system-prompt addition the thread's
    history carries; ``None``: none (or not known)."""
    opened_here: bool = False
    """This process already ran (or tried) the session's opening step,
    bootstrap or bootstrap maintenance. Never journaled."""


# ---------------------------------------------------------------- events


class WindowReported(msgspec.Struct, frozen=True):
    """Codex reported the model's context window (``modelContextWindow``)."""

    tokens: int


class ToolsGiven(msgspec.Struct, frozen=True):
    """The client gave the thread these tools (``thread/start``'s
    ``dynamicTools``; a fork inherits its parent's)."""

    names: frozenset[str]


class Bootstrapped(msgspec.Struct, frozen=True):
    """The engine's session is bootstrapped: bootstrap ran, or the engine
    followed the session from its first turn (nothing to bootstrap)."""


class BootstrapFailed(msgspec.Struct, frozen=True):
    """Bootstrap raised or timed out: not done, and not retried in this process."""


class MaintainedOnOpening(msgspec.Struct, frozen=True):
    """This process ran bootstrap maintenance for a session bootstrapped earlier."""


class AdditionSent(msgspec.Struct, frozen=True):
    """Codex accepted a turn carrying this addition (its digest), or, with
    ``None``, the thread's history no longer holds the one it had (a revert
    took the turn that carried it)."""

    digest: str | None


def addition_digest(addition: str) -> str:
    """What the journal keeps of an addition: no prompt text on disk twice."""
    return hashlib.sha256(addition.strip().encode("utf-8", "surrogatepass")).hexdigest()


class Restored(msgspec.Struct, frozen=True):
    """What the journal held when the thread was first used in this process.
    Facts learned in this process before it was read are newer and win."""

    state: Learned


class SessionChanged(msgspec.Struct, frozen=True):
    """The thread now belongs to another session, whose journal holds
    ``state`` (OpenClaw's session got known mid-process). What is the
    thread's own (its tools, the addition its history carries) and the
    window stay as :class:`Restored` keeps them; what is the session's (its
    bootstrap, this process's opening step) is the new session's: a thread
    that was a session of its own bootstrapped that session, not this one."""

    state: Learned


LearnedEvent = WindowReported | ToolsGiven | Bootstrapped | BootstrapFailed | MaintainedOnOpening | AdditionSent | Restored | SessionChanged


# --------------------------------------------------------------- actions


class Journal(msgspec.Struct, frozen=True):
    """Append this entry to the session's journal."""

    entry: dict[str, Any]


# ----------------------------------------------------------------- state


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
                return [Journal({"thread": self.thread_id, "window": tokens})]
            case ToolsGiven(names):
                if names == state.tools:
                    return []
                self.state = msgspec.structs.replace(state, tools=frozenset(names))
                return [Journal({"thread": self.thread_id, "tools": sorted(names)})]
            case Bootstrapped():
                self.state = msgspec.structs.replace(state, bootstrapped=True, opened_here=True)
                if state.bootstrapped:
                    return []
                return [Journal({"thread": self.thread_id, "bootstrapped": True})]
            case AdditionSent(digest):
                if digest == state.addition:
                    return []
                self.state = msgspec.structs.replace(state, addition=digest)
                return [Journal({"thread": self.thread_id, "addition": digest})]
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
        return [Journal({"thread": self.thread_id, "window": window})]

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


def replay(entries: Iterable[Any], thread_id: str) -> Learned:
    """The state a session journal gives a thread: the newest window any of
    the session's threads reported, this thread's tools and addition,
    bootstrapped if any entry says so. Entries of unknown shape are skipped."""
    window: int | None = None
    tools: frozenset[str] | None = None
    bootstrapped = False
    addition: str | None = None
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        value = entry.get("window")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            window = value
        names = entry.get("tools")
        if entry.get("thread") == thread_id and isinstance(names, list):
            tools = frozenset(n for n in names if isinstance(n, str))
        if entry.get("bootstrapped") is True:
            bootstrapped = True
        if entry.get("thread") == thread_id and "addition" in entry:
            digest = entry["addition"]
            addition = digest if isinstance(digest, str) else None
    return Learned(window=window, tools=tools, bootstrapped=bootstrapped, addition=addition)


def restore(own: Iterable[Any], session: Iterable[Any], thread_id: str) -> Learned:
    """The state a thread's first read in a process gives it: the journal
    kept under the thread's own key (``own``: until its session was known,
    or while it was a session of its own) read before the session's. The
    thread's facts and the window come from both; whether the session is
    bootstrapped from the session's journal alone (the thread's own journal
    says so of the session it was then, not of this one)."""
    session = list(session)
    state = replay([*own, *session], thread_id)
    return msgspec.structs.replace(state, bootstrapped=replay(session, thread_id).bootstrapped)


# ---------------------------------------------------------------- budget


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
