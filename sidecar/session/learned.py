"""What the sidecar learns about a thread, kept across processes: sans I/O.

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
from typing import Any, Literal

import msgspec

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


Event = WindowReported | ToolsGiven | Bootstrapped | BootstrapFailed | MaintainedOnOpening | AdditionSent | Restored | SessionChanged


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

    def handle(self, event: Event) -> list[Journal]:
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
