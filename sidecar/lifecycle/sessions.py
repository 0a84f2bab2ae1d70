"""Opening a client thread's session: the session it belongs to
(:class:`Identity`), its files opened from disk (mirror, archive, ledger;
a thread the mirror lacks imported, turns a kill left out caught up:
``imports``) by :class:`Sessions`, and Codex's answers to the client's
``thread/start``, ``resume`` and ``fork`` read by :class:`Openings`. Its
release once Codex unloads the thread is ``release``'s."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import trio

from protocol.codex import callable_tool_names

from ..history.archive import TurnArchive, archive_path
from ..relay import Decision, Message, PendingRequest
from ..session import continuity
from ..session.context import LifecycleContext
from ..session.identity import Via, decide, first_turn, match_transcript, relay_id, session_key
from ..session.state import AdditionSent, ThreadSession, ToolsGiven, Unfollowed, new_session
from ..store import bindings
from ..store.inspect import InspectLog, inspect_path
from ..store.ledger import Ledger, ledger_path
from ..store.mirror import MirrorError, TranscriptMirror, session_path
from ..thread.events import ResetLedger, SwitchRolledBack
from ..thread.files import Mirror
from ..thread.session_events import (
    FilesOpened,
    ForkedAtFraming,
    ForkOpened,
    HistoryKnown,
    InheritAddition,
    LedgerRestored,
    MirrorOpened,
    NewThreadOfHistory,
    SessionBound,
    ThreadOpened,
)
from ..thread.state import handle
from . import resets
from .calls import GIVEN_TOOLS, EngineCalls
from .context import HistoryMoves
from .imports import HistoryImport
from .injections import Injections
from .reverts import INTO_ARCHIVE, ClientReverts

log = logging.getLogger("codex_sidecar.lifecycle")

CONTINUITY_CANDIDATES = 32
"""Session files (newest first) a continuity projection is matched against."""


class Identity:
    """The session a thread belongs to (``sidecar.session.identity``):
    found as it opens, bound and persisted, and changed by its first turn
    (a continuity projection, OpenClaw's reset: ``resets``)."""

    def __init__(self, ctx: LifecycleContext, calls: EngineCalls) -> None:
        self.sessions = ctx.sessions
        self.state_dir = ctx.state_dir
        self.options = ctx.options
        self.calls = calls

    def session(self, thread_id: str) -> ThreadSession:
        session = self.sessions.get(thread_id)
        if session is None:
            key = session_key(self.options.session_key_template, thread_id)
            session = new_session(thread_id, key, session_path(self.state_dir, thread_id))
            self.sessions[thread_id] = session
        return session

    def set_session(self, session: ThreadSession, session_id: str, via: str) -> None:
        path = session_path(self.state_dir, session_id)  # first: raises on an unusable id
        handle(session, SessionBound(session_id, session_key(self.options.session_key_template, session_id), path, via))

    async def bind(self, session: ThreadSession) -> None:
        """Find the thread's session before its mirror opens: the relay id it
        was started or resumed with, else its persisted binding, else itself.
        A binding found on the wire is persisted before any turn goes on."""
        # A thread Codex just started has no binding yet: no disk read for it.
        bound = None if session.fresh else await trio.to_thread.run_sync(bindings.load, self.state_dir, session.thread_id)
        # The session the relay id names now (after a reset, or a content
        # match of a relay id nothing knew): read only when it decides.
        moved = await trio.to_thread.run_sync(bindings.load_relay, self.state_dir, session.relay) if session.relay and bound is None else None
        session_id, via = decide(relay=session.relay, bound=bound.session if bound else None, thread_id=session.thread_id,
                                 relay_session=moved.session if moved else None)
        try:
            self.set_session(session, session_id, bound.via if via == "bound" and bound and bound.via else via)
        except ValueError:
            return  # not usable as a file name: the thread stays its own session
        if via == "relay" and (bound is None or bound.session != session_id):
            await self.save_binding(session, via)
        await resets.repair_relay(self, session)
        if session.session_id != session.thread_id:
            log.info("thread bound to its session", extra={"fields": self.calls.fields(session, via=session.via)})

    async def save_binding(self, session: ThreadSession, via: Via | str) -> bool:
        try:
            await trio.to_thread.run_sync(bindings.save, self.state_dir, bindings.Binding(session.thread_id, session.session_id, str(via)))
        except (OSError, ValueError) as exc:
            log.warning("thread binding not persisted; a later resume without a relay id sees the thread as its own session",
                        extra={"fields": self.calls.fields(session, error=type(exc).__name__)})
            return False
        return True

    async def holds_nothing(self, session: ThreadSession) -> None:
        """The Codex thread holds none of the session's history (a new
        thread of a known session): the planner projects what the engine
        assembles, and the ledger says so before any turn (a kill before
        the first turn is finalised must not make it claim the history)."""
        for action in handle(session, NewThreadOfHistory()):
            if isinstance(action, ResetLedger) and session.ledger is not None:
                await trio.to_thread.run_sync(session.ledger.reset, action.holdings)

    async def first_turn(self, session: ThreadSession, items: list[Any]) -> None:
        """The first turn of a thread started in this process, before it
        assembles: what it says of the thread's session
        (``identity.first_turn``): a continuity projection may name a known
        session (:meth:`continue_session`); none, on a new thread of a
        relay-named session with history, is OpenClaw's reset (``resets``)."""
        if not session.fresh or session.turns_this_opening or session.mirror is None:
            return
        step = first_turn(via=session.via, had_history=session.had_history, projected=continuity.context_text(items) is not None)
        if step == "match":
            await self.continue_session(session, items)
        elif step == "reset":
            await resets.begin(self, session)

    async def continue_session(self, session: ThreadSession, items: list[Any]) -> bool:
        """A new thread's first turn carries OpenClaw's continuity projection
        and nothing known told its session (no relay id, or one no session
        has: a relay id that changes with each binding): bind it to the one
        known session whose transcript the projection renders (by content),
        persist the binding (and what the relay id names), and switch the
        thread onto that session's mirror. False when nothing matches (the
        thread stays in its own session)."""
        context = continuity.context_text(items)
        if context is None or not session.fresh or session.via not in ("thread", "relay") or session.mirror is None:
            return False
        candidates = await self._candidates(session)
        found = await trio.to_thread.run_sync(match_transcript, context, candidates)
        if found is None:
            log.info("continuity projection matched no known session; the thread is a session of its own",
                     extra={"fields": self.calls.fields(session, candidates=len(candidates))})
            return False
        old = session.mirror
        provisional, provisional_via = session.session_id, session.via
        try:
            self.set_session(session, found, "continuity")
            mirror = await trio.to_thread.run_sync(lambda: TranscriptMirror.open(session.path, found, session.cwd))
        except (OSError, MirrorError, ValueError):
            self.set_session(session, provisional, provisional_via)
            return False
        if not await self.save_binding(session, "continuity"):
            mirror.close()
            self.set_session(session, provisional, provisional_via)
            return False
        if session.relay is not None:
            await resets.name_relay(self, session)
        handle(session, MirrorOpened(mirror))
        await trio.to_thread.run_sync(_drop_if_empty, old)
        handle(session, HistoryKnown(bool(await trio.to_thread.run_sync(mirror.messages))))
        if session.had_history:
            await self.holds_nothing(session)
        log.info("thread bound to its session by its continuity projection", extra={"fields": self.calls.fields(session, via="continuity")})
        return True

    async def _candidates(self, session: ThreadSession) -> dict[str, list[Any]]:
        """Known sessions' transcripts: those open in this process, then the
        newest session files of the state dir."""
        out: dict[str, list[Any]] = {}
        for other in list(self.sessions.values()):
            if other is session or other.mirror is None or other.session_id == session.session_id:
                continue
            if other.session_id not in out:
                cached = other.mirror.cached_messages()
                out[other.session_id] = cached if cached is not None else await trio.to_thread.run_sync(other.mirror.messages)
        disk = await trio.to_thread.run_sync(_recent_sessions, self.state_dir, {session.session_id, *out})
        out.update(disk)
        return out


class Sessions:
    """A thread's session opened: found (:class:`Identity`), its files
    opened from disk, its history imported or caught up (``imports``), a
    client revert a restart interrupted followed; a turn/start waits for it."""

    def __init__(
        self, ctx: LifecycleContext, identity: Identity, moves: HistoryMoves, reverts: ClientReverts, injections: Injections, history: HistoryImport
    ) -> None:
        self.state_dir = ctx.state_dir
        self.identity = identity
        self.archived = moves.archived
        self.spares = moves.spares
        self.reverts = reverts
        self.injections = injections
        self.history = history

    def session(self, thread_id: str) -> ThreadSession:
        """The thread's session in this process (made, not opened, if new)."""
        return self.identity.session(thread_id)

    async def open(self, session: ThreadSession, method: str, params: dict[str, Any], thread: dict[str, Any]) -> None:
        """Open (fork, import) the mirror; a turn/start waits for this."""
        opened = False
        try:
            if session.mirror is None and method != "thread/fork":
                await self.identity.bind(session)
            if session.mirror is None:
                parent_id = params.get("threadId") if method == "thread/fork" else None
                forked = isinstance(parent_id, str) and parent_id != session.thread_id
                mirror: TranscriptMirror
                if isinstance(parent_id, str) and forked:
                    # The archive first: the fork's mirror existing is what says
                    # the fork was opened (a kill in between must not leave a
                    # mirror without the archived turns the fork inherits).
                    mirror = await trio.to_thread.run_sync(self.history.fork_archive_then_mirror, parent_id, session, params)
                else:
                    mirror = await trio.to_thread.run_sync(lambda: TranscriptMirror.open(session.path, session.thread_id, session.cwd))
                handle(session, MirrorOpened(mirror))
                opened = True
                # A fork's copy of its parent's mirror is its history (keyed by
                # the parent's ids: importing Codex's copy too would store it twice).
                handle(session, HistoryKnown((mirror.existed_before or forked) and bool(await trio.to_thread.run_sync(mirror.messages))))
            await self.archived.load(session.thread_id)
            if opened:
                order = await trio.to_thread.run_sync(TurnArchive(archive_path(self.state_dir, session.thread_id)).turn_order)
                await self.injections.load(session, order[-1] if order else None)
            if session.inspect is None:
                handle(session, FilesOpened(inspect=InspectLog(inspect_path(self.state_dir, session.thread_id))))
            if session.ledger is None:
                handle(session, FilesOpened(ledger=Ledger(ledger_path(self.state_dir, session.thread_id))))
                await trio.to_thread.run_sync(_restore_ledger, session)
            if method == "thread/start" and session.had_history:
                # A new Codex thread of a session with history holds none of it.
                await self.identity.holds_nothing(session)
            if opened and session.mirror is not None:
                # First opening in this process (within it, a failed follow is
                # retried by the next turn instead, holding the turn slot).
                archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
                pending = await trio.to_thread.run_sync(archive.pending_forget)
                if pending is not None:
                    # Killed after Codex reverted for the client, before the
                    # mirror followed: follow it now, before any turn assembles.
                    log.warning("following a client revert a restart interrupted", extra={"fields": {"threadId": session.thread_id}})
                    before, into_archive = pending
                    await self.reverts.follow(session, archive, Unfollowed(before, into_archive, frozenset(), None))
                await self.reverts.settle_unanswered(session, archive)
            if self.spares.take_rolled_back(session.thread_id):
                # Back from a switch Codex never accepted: what the thread holds is not known.
                handle(session, SwitchRolledBack())
            if session.framing_only:
                # A fork of Codex's framing (the client forked at an archived turn).
                handle(session, ForkedAtFraming())
            # Import only when the session is first seen: a thread started or
            # imported earlier in this run is mirrored turn by turn already, and
            # importing it again would bootstrap an engine that saw every turn.
            if opened and method in ("thread/resume", "thread/fork") and not session.had_history:
                await self.history.import_history(session, thread)
            elif opened and method == "thread/resume":
                await self.history.catch_up(session, thread)
        except (MirrorError, OSError) as exc:
            log.warning(
                "transcript mirror unavailable; turns of this thread pass through",
                extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}},
            )
            handle(session, MirrorOpened(None))
        finally:
            session.ready.set()


class Openings:
    """A client's ``thread/start``, ``resume`` and ``fork``: their params
    kept for the answer, and Codex's answer read: what the session learns
    from it, the archived turns spliced in, the session's opening spawned."""

    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, moves: HistoryMoves, opening: Sessions) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.calls = calls
        self.archived = moves.archived
        self.spares = moves.spares
        self.opening = opening

    def on_resume(self, msg: Message) -> Decision:
        self.remember_params(msg)
        self.spares.backing_resume(msg.params())
        params = msg.remembered()
        return self.archived.on_resume(msg, params) if params else None

    def remember_params(self, msg: Message) -> Decision:
        """thread/start and thread/resume: keep the params for the answer."""
        self.spares.client_start()  # the client's own start: its notifications are its
        return self.remember_request(msg)

    def remember_request(self, msg: Message) -> Decision:
        msg.remember_params()
        return None

    def on_thread_response(self, msg: Message, pending: PendingRequest) -> Decision:
        params = pending.remembered()
        given = pending.noted(GIVEN_TOOLS)
        framing_fork = pending.noted(INTO_ARCHIVE) is True
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if not isinstance(thread, dict) or not isinstance(thread.get("id"), str):
            return None  # an error response, or a shape we do not know: nothing to track
        thread_id = thread["id"]
        try:
            session = self.opening.session(thread_id)
        except ValueError:
            log.warning("thread id unusable as a session file name; lifecycle off for it")
            return None
        model = (result.get("model") if isinstance(result.get("model"), str) else None) or params.get("model")
        handle(session, ThreadOpened(pending.method, relay_id(params), thread.get("cwd") or params.get("cwd"), model, framing_fork))
        if pending.method == "thread/start":
            self.spares.client_started(thread_id, params)
        if given is None and isinstance(params.get("dynamicTools"), list):
            given = callable_tool_names(params["dynamicTools"])
        if given is not None:
            self.calls.learn(session, ToolsGiven(given))
        if pending.method == "thread/fork" and not self.calls.facts(session).tools:
            parent_id = params.get("threadId")
            parent = self.sessions.get(parent_id) if isinstance(parent_id, str) else None
            if parent is not None and self.calls.facts(parent).tools:
                self.calls.learn(session, ToolsGiven(self.calls.tools(parent)))
        if pending.method == "thread/fork" and isinstance(params.get("threadId"), str) and params["threadId"] != thread_id:
            self.archived.seed_fork(thread_id, params["threadId"], params)
            if not framing_fork:
                self._inherit_addition(session, params)
        self.proxy.spawn(self.opening.open, session, pending.method, params, thread)
        if pending.method == "thread/resume":
            return self.archived.splice_resume(msg, result, thread, params)
        if pending.method == "thread/fork" and not params.get("excludeTurns"):
            return self.archived.splice_thread(msg, result, thread)
        return None

    def _inherit_addition(self, session: ThreadSession, params: dict[str, Any]) -> None:
        """A whole fork knows its parent's addition (the machine's ``ForkInherits``);
        a parent is known only if it was opened here (like its tools)."""
        if InheritAddition() not in handle(session, ForkOpened(params)):
            return
        parent = self.sessions.get(params["threadId"])
        if parent is None or self.calls.facts(session).addition is not None:
            return
        digest = self.calls.facts(parent).addition
        if digest is not None:
            self.calls.learn(session, AdditionSent(digest))


def _drop_if_empty(mirror: Mirror | None) -> None:
    """Close a provisional mirror a thread left for its session's, and
    remove its file when nothing but the header was ever written."""
    if mirror is None:
        return
    try:
        mirror.refresh()
        empty = mirror.entry_count == 0
    except (MirrorError, OSError):
        empty = False
    mirror.close()
    if empty:
        try:
            mirror.path.unlink()
        except OSError:
            pass


def _recent_sessions(state_dir: Path, skip: set[str]) -> dict[str, list[Any]]:
    """The newest session files' transcripts (at most
    :data:`CONTINUITY_CANDIDATES`, by modification time, then name)."""
    folder = Path(state_dir) / "sessions"
    try:
        files = [(f.stat().st_mtime_ns, f.name, f) for f in folder.iterdir() if f.suffix == ".jsonl" and f.stem not in skip]
    except OSError:
        return {}
    files.sort(key=lambda t: (-t[0], t[1]))
    out: dict[str, list[Any]] = {}
    for _, _, path in files[:CONTINUITY_CANDIDATES]:
        try:
            out[path.stem] = TranscriptMirror.read_messages(path)
        except (MirrorError, OSError):
            continue
    return out


def _restore_ledger(session: ThreadSession) -> None:
    """What the Codex thread holds, as the ledger's journal last recorded it."""
    assert session.ledger is not None and session.inspect is not None
    handle(session, LedgerRestored(session.ledger.load(), session.inspect.last()))
