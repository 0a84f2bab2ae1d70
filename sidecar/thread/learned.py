"""What a thread's processes learned: the facts, the events that change them
and the journal entries they give, sans I/O.

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
  session, not once a process; see ``LearnedMachine.opening_step``);
* which engine **system-prompt addition** the thread's history already
  carries (Codex keeps a turn's ``additionalContext`` in the thread, so a
  new process sending the same addition again would double it in every later
  model request); kept as a digest, never the text.

:class:`sidecar.thread.state.LearnedMachine` owns them for one thread, the way h11's connection
owns its state: events go in (``LearnedMachine.handle``), the new state
and the actions to carry out come out. It does no I/O; the only action is
:class:`Journal`, an entry the store appends to the session's journal
(``sidecar.store.learned``, as a :class:`LearnedEntry`) before anything relies on it. An event that
changes nothing yields no action, so Codex reporting the same window on every
turn costs no write. :func:`replay` turns a journal back into the state.

The journal is the session's (today a session is one thread, keyed by the
thread's ``session_key``); entries about one thread carry its id, so after
OpenClaw moves a session to a new Codex thread the window learned on the
old one gives the new one a budget from its first turn, while tools stay
with the thread that was given them.

The budget rule (``sidecar.thread.state.token_budget``) is pure too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec
from msgspec import UNSET, UnsetType

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


class LearnedEntry(msgspec.Struct, frozen=True):
    """One journal line: a fact a thread learned, one member set a line
    (``{"thread", "window"}``, ``{"thread", "tools"}``, ``{"thread",
    "bootstrapped"}``, ``{"thread", "addition"}``; an ``addition`` of
    ``null``: the thread's history no longer carries one). Members not set
    are not written; members a later version adds are ignored. The store's
    journal (``sidecar.store.learned``) reads and writes it as it is."""

    thread: str = ""
    window: int | UnsetType = UNSET
    tools: tuple[str, ...] | UnsetType = UNSET
    bootstrapped: bool | UnsetType = UNSET
    addition: str | None | UnsetType = UNSET


class Journal(msgspec.Struct, frozen=True):
    """Append this entry to the session's journal."""

    entry: LearnedEntry


def replay(entries: Iterable[LearnedEntry], thread_id: str) -> Learned:
    """The state a session journal gives a thread: the newest window any of
    the session's threads reported, this thread's tools and addition,
    bootstrapped if any entry says so. (Lines of unknown shape never get
    here: the store's typed decoder reports and skips them.)"""
    window: int | None = None
    tools: frozenset[str] | None = None
    bootstrapped = False
    addition: str | None = None
    for entry in entries:
        if isinstance(entry.window, int) and entry.window > 0:
            window = entry.window
        if entry.thread == thread_id and isinstance(entry.tools, tuple):
            tools = frozenset(entry.tools)
        if entry.bootstrapped is True:
            bootstrapped = True
        if entry.thread == thread_id and not isinstance(entry.addition, UnsetType):
            addition = entry.addition
    return Learned(window=window, tools=tools, bootstrapped=bootstrapped, addition=addition)


def restore(own: Iterable[LearnedEntry], session: Iterable[LearnedEntry], thread_id: str) -> Learned:
    """The state a thread's first read in a process gives it: the journal
    kept under the thread's own key (``own``: until its session was known,
    or while it was a session of its own) read before the session's. The
    thread's facts and the window come from both; whether the session is
    bootstrapped from the session's journal alone (the thread's own journal
    says so of the session it was then, not of this one)."""
    session = list(session)
    state = replay([*own, *session], thread_id)
    return msgspec.structs.replace(state, bootstrapped=replay(session, thread_id).bootstrapped)
