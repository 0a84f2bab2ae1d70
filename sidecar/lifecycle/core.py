"""The lifecycle: its jobs built, and their rows of the method table
(:data:`sidecar.methods.METHODS`) installed on the relay's hooks.

Each job is a module of this package (sessions, release, turns, finalize,
reverts, injections, compaction, calls); they share the two context objects
(:class:`sidecar.session.context.LifecycleContext` and
:class:`sidecar.lifecycle.context.HistoryMoves`), and each gets the
collaborators it calls. This class owns no turn logic itself.

A thread's history is the client's, not the engine's: the backing-thread
map and the archive of turns rebuilds took out of Codex are applied at the
child's edge and in the client's reads with any engine, with none
(``legacy``, or an engine that failed to load) and with either rebuild
setting, so changing a setting between runs never loses a turn. With no
engine only that part is installed; the turn lifecycle is not.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import trio

from ..history.backing import BackingThreads
from ..history.reads import ArchivedTurns
from ..host import EngineTools, SidecarHost
from ..host.completion import START_KEYS
from ..host.engine_tools import engine_specs
from ..host.offered import OfferedTools
from ..rebuild import InPlace, Rebuilder, Strategy
from ..rebuild.fresh import Spares
from ..relay import Decision, Hooks, Message, PendingRequest, Proxy, RpcError
from ..rows import Part, Row, install
from ..session.context import LifecycleContext
from ..session.options import LifecycleOptions
from ..session.state import ThreadSession
from ..store import bindings
from ..store.inspect import InspectLog, inspect_path
from .calls import EngineCalls
from .compaction import Compaction
from .context import HistoryMoves
from .finalize import Finalizer
from .imports import HistoryImport
from .injections import Injections
from .overflow import Overflow
from .release import Releases
from .reverts import ClientReverts
from .sessions import Identity, Openings, Sessions
from .turns import TurnAssembly, Turns

log = logging.getLogger("codex_sidecar.lifecycle")


class Lifecycle:
    """Installs the hooks that run ``engine`` around the turns ``proxy`` relays."""

    def __init__(
        self,
        proxy: Proxy,
        engine: Any | None,
        state_dir: str | Path,
        options: LifecycleOptions | None = None,
        host: SidecarHost | None = None,
    ) -> None:
        """``proxy``: the relay, built with the history's edge (its
        ``router.edge`` is the :class:`BackingThreads` of ``state_dir``:
        the relay runs before the lifecycle is imported, so the edge is made
        with it, never attached later). ``host``: the engine's host, built
        with its completions before the engine's ``bind``."""
        backing = proxy.router.edge
        if not isinstance(backing, BackingThreads):
            raise TypeError("the lifecycle needs a relay built with the history's edge (BackingThreads)")
        self.proxy = proxy
        self.engine = engine
        """None: history only (no engine, or ``legacy``)."""
        self.state_dir = Path(state_dir)
        self.options = options or LifecycleOptions()
        self.backing = backing
        """The client's threads and the Codex threads behind them (empty until
        a fresh rebuild switches one): mapped at the child's edge."""
        self.sessions: dict[str, ThreadSession] = {}
        self.calls = EngineCalls(engine, self.options, state_dir)
        self.engine_id = self.calls.engine_id
        fresh = engine is not None and self.options.rebuild == "fresh"
        self.context = ctx = LifecycleContext(proxy, self.sessions, self.options, self.state_dir)
        """What every job, the rebuild strategies and the engine's tools share (``sidecar.session.context``)."""
        specs = engine_specs(engine) if engine is not None else []
        self.tools: EngineTools | None = (
            EngineTools(ctx, engine, specs, OfferedTools(state_dir), lambda s: self.calls.runtime(s, {})) if specs else None
        )
        """The engine's tools on the client's threads (None: it has none)."""
        # Cursors handed out wrapped outlive rebuilds; wrapped ones are
        # unwrapped whatever the engine.
        self.archived = ArchivedTurns(proxy, state_dir, wrap_cursors=engine is not None and self.options.projection_mode != "per_turn", visible=self.tools)
        """The read side: answers thread/read, resume, fork, turns/list and
        items/list with the turns rebuilds took out of Codex (``sidecar.history.reads``)."""
        self.spares = Spares(ctx, self.backing, self.archived, self.engine_id, fresh=fresh)
        """Starting spares and switching onto them (``sidecar.rebuild.fresh``)."""
        self.inplace = InPlace(proxy, self.archived, self.options, self.engine_id)
        strategies: list[Strategy] = [self.spares, self.inplace] if fresh else [self.inplace]
        self.injections = Injections(ctx, self.calls)
        self.rebuilder = Rebuilder(ctx, self.archived, self.engine_id, strategies, on_moved=self.injections.replay)
        self.compaction = Compaction(proxy, self.sessions, self.options, self.calls)
        moves = HistoryMoves(self.archived, self.rebuilder, self.spares, self.inplace)
        self.reverts = ClientReverts(ctx, self.calls, moves, self.injections)
        self.identity = Identity(ctx, self.calls)
        self.opening = Sessions(ctx, self.identity, moves, self.reverts, self.injections, HistoryImport(ctx, self.archived))
        self.openings = Openings(ctx, self.calls, moves, self.opening)
        """Codex's answers to the client's thread/start, resume and fork (which open the session)."""
        self.releases = Releases(ctx, self.calls, moves)
        """A session released once Codex unloads its thread."""
        self.assembly = TurnAssembly(ctx, self.calls, moves, self.identity, self.reverts)
        self.turns = Turns(ctx, self.calls, self.spares, self.opening, self.assembly)
        self.finalizer = Finalizer(ctx, self.calls, self.spares)
        self.overflow = Overflow(ctx, self.calls, self.turns, self.finalizer, self.compaction)
        """A turn that overflowed the context window, retried after the engine makes room (if it owns compaction)."""
        self.host = host
        """The engine's host (``sidecar.host``), given to it by ``bind``."""

    @property
    def reverting(self) -> dict[str, Any]:
        """Threads whose rebuild revert's notifications are being kept from the client."""
        return self.inplace.reverting

    def after_initialize(self, msg: Message, pending: PendingRequest) -> Decision:
        self.proxy.spawn(self._preload_tokenizer)
        return None

    async def _preload_tokenizer(self) -> None:
        """The o200k tokenizer, loaded in the background once the client has
        its ``initialize`` answer: the load holds the GIL ~0.6 s, so it must
        not sit on the first answer's path (start-up is paid on every
        OpenClaw turn). A count before it is done waits for it."""
        await trio.sleep(0.02)  # the answer is on its way to the client first
        from engines.tokens import preload

        preload()

    def jobs(self) -> list[object]:
        """What the table's handlers are methods of: the lifecycle and its jobs."""
        jobs = [self, self.archived, self.openings, self.releases, self.spares, self.reverts, self.turns, self.compaction]
        jobs += [self.injections, self.finalizer, self.inplace, self.overflow, self.tools]
        return [job for job in jobs if job is not None]

    def install(self, hooks: Hooks, rows: Iterable[Row]) -> None:
        """The hooks of the method table's ``rows`` (:data:`sidecar.methods.METHODS`,
        handed in by ``serve``: the table names the jobs, so it sits above
        them) this lifecycle runs: the history part whatever the engine;
        with an engine its turn lifecycle, and the engine's tools if it has
        some. Without an engine nothing else is touched: a thread no rebuild
        ever moved passes byte for byte."""
        install(hooks, self.jobs(), self.parts(), rows)
        if self.engine is None:
            return
        observed = getattr(getattr(self.proxy, "router", None), "observed", None)
        if getattr(observed, "user_agent", None) is not None:
            self.proxy.spawn(self._preload_tokenizer)  # installed after the answer passed
        self.proxy.router.controls.add_async("sidecar/compact", self.compaction.control_compact)
        self.proxy.router.controls.add_async("sidecar/inspect", self._control_inspect)
        self.proxy.add_status_provider("lifecycle", self.status)

    def parts(self) -> set[Part]:
        """The parts of the method table this lifecycle installs."""
        if self.engine is None:
            return {Part.HISTORY, Part.BARE}
        return (
            {Part.HISTORY, Part.ENGINE}
            | ({Part.TOOLS} if self.tools is not None else set())
            | ({Part.COMPACTION} if self.calls.owns_compaction else set())
        )

    def note_client_tools(self, msg: Message) -> Decision:
        """thread/start: the client's own tools, before the engine's join them."""
        self.calls.note_client_tools(msg)
        return None

    def splice_opened(self, msg: Message, pending: PendingRequest) -> Decision:
        """No engine: a resume's or a fork's answer gets the archived turns
        (with an engine, ``Openings.on_thread_response`` does it as the session opens)."""
        params = pending.remembered()
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if not isinstance(thread, dict) or not isinstance(thread.get("id"), str):
            return None
        if pending.method == "thread/resume":
            return self.archived.splice_resume(msg, result, thread, params)
        parent = params.get("threadId")
        if isinstance(parent, str) and parent != thread["id"]:
            self.archived.seed_fork(thread["id"], parent, params)
        return None if params.get("excludeTurns") else self.archived.splice_thread(msg, result, thread)

    def note_client_thread(self, msg: Message, pending: PendingRequest) -> Decision:
        """The settings of the client's newest thread (what the engine's own
        model calls run with): its cwd, model and provider as Codex answered."""
        completions = self.host.completions if self.host is not None else None
        if completions is None:
            return None
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if isinstance(thread, dict):
            merged = {**thread, **result}
            noted = {k: merged[k] for k in START_KEYS if isinstance(merged.get(k), str)}
            if noted:
                completions.client_thread = noted
        return None

    async def dispose(self) -> None:
        """The engine's ``dispose`` (best effort) and the mirrors closed, on a clean stop."""
        await self.calls.dispose()
        for session in self.sessions.values():
            if session.mirror is not None:
                session.mirror.close()

    def status(self) -> dict[str, Any]:
        released = self.releases.released
        host: dict[str, Any] = {}
        if self.tools is not None:
            host["engineTools"] = self.tools.status()
        if self.host is not None and self.host.completions is not None:
            host["completions"] = dict(self.host.completions.stats)
        return {
            "engine": {"id": self.engine_id, "ownsCompaction": self.calls.owns_compaction},
            **({"host": host} if host else {}),
            "projectionMode": self.options.projection_mode,
            "rebuilds": released["rebuilds"] + sum(s.rebuilds for s in self.sessions.values()),
            "releasedThreads": released["threads"],
            "rebuild": self.options.rebuild,
            **self.spares.status(),
            "threads": {
                tid: {
                    "sessionId": s.session_id,
                    "via": s.via,
                    "sessionFile": str(s.path),
                    "bootstrapped": self.calls.facts(s).bootstrapped,
                    "busy": not s.settled,
                    "mirrorEntries": s.mirror.entry_count if s.mirror else 0,
                    "rebuilds": s.rebuilds,
                    **s.stats,
                }
                for tid, s in sorted(self.sessions.items())
            },
        }

    def inspect(self, thread_id: str) -> list[dict[str, Any]]:
        session = self.sessions.get(thread_id)
        log_ = session.inspect if session and session.inspect else InspectLog(inspect_path(self.state_dir, thread_id))
        return log_.records()

    def inspect_session(self, name: str) -> dict[str, Any]:
        """The session ``name`` (a thread or a session id) belongs to, with
        its Codex threads and how many turns each recorded."""
        session_id, threads = bindings.session_threads(self.state_dir, name)
        listed = {b.thread for b in threads}
        # A thread open here whose binding is its own (never persisted) still counts.
        for s in self.sessions.values():
            if s.session_id == session_id and s.thread_id not in listed:
                threads.append(bindings.Binding(s.thread_id, session_id, s.via))
        return {
            "id": session_id,
            "threads": [{"threadId": b.thread, "via": b.via, "turns": len(self.inspect(b.thread))} for b in threads],
        }

    async def _control_inspect(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = params.get("threadId")
        session_id = params.get("sessionId")
        if not isinstance(thread_id, str) and not isinstance(session_id, str):
            raise RpcError(-32602, "threadId or sessionId is required")
        name = thread_id if isinstance(thread_id, str) else session_id
        assert isinstance(name, str)
        try:
            session = await trio.to_thread.run_sync(self.inspect_session, name)
            if isinstance(thread_id, str):
                turns = await trio.to_thread.run_sync(self.inspect, thread_id)
            else:
                turns = []
                for thread in session["threads"]:
                    records = await trio.to_thread.run_sync(self.inspect, thread["threadId"])
                    turns.extend({"threadId": thread["threadId"], **r} for r in records)
        except ValueError:
            raise RpcError(-32602, "unusable threadId or sessionId") from None
        key = {"threadId": thread_id} if isinstance(thread_id, str) else {"sessionId": session["id"]}
        return {**key, "engine": self.engine_id, "session": session, "turns": turns}
