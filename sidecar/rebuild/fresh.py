"""Spare Codex threads and the switch onto them (``rebuild = "fresh"``).

The lifecycle's half of :mod:`sidecar.history.backing`: when to start a thread's
spare (once the engine shows it rebuilds), starting it off any turn's path
and hiding it from the moment Codex answers, switching a rebuild onto it
(the map saved first), what follows the client's thread onto each new
backing thread (sticky turn settings, its name, a resume's overrides), and
what happens to retired threads and spares when the client's thread is
resumed, closed, deleted or archived. :class:`Spares` runs inside the
relay's nursery; :meth:`Spares.rebuild` is the fresh rebuild strategy
(:mod:`sidecar.rebuild` falls back to the in-place one when it cannot).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import trio

from ..history.archive import TurnArchive
from ..history.backing import STICKY_TURN_KEYS, Alias, BackingThreads
from ..history.reads import ArchivedTurns
from ..relay import Decision, Message, PendingRequest, RpcError
from ..session.context import LifecycleContext
from ..session.state import ThreadSession, log_fields
from ..thread.events import SwitchRolledBack, ThreadMoved
from ..thread.state import handle

log = logging.getLogger("codex_sidecar.lifecycle")

EXCLUSIVE_START_KEYS = (("sandbox", "permissions"), ("permissions", "sandbox"))
"""thread/start params Codex refuses together: a resume setting one drops the other."""
RESUME_ONLY_KEYS = frozenset({"threadId", "excludeTurns", "initialTurnsPage", "history", "path"})
"""thread/resume params that are not thread settings (the rest replace the thread/start params spares start with)."""
SPARE_QUIET = 0.2
"""Seconds after a spare's thread/start answer during which notifications
that name no thread (``configWarning``, ``remoteControl/status/changed``)
are taken as the spare's and dropped."""


class Spares:
    def __init__(self, ctx: LifecycleContext, backing: BackingThreads, archived: ArchivedTurns, engine_id: str, *, fresh: bool) -> None:
        self.backing = backing
        self.fresh = fresh
        """Rebuilds may switch threads (``rebuild = "fresh"`` and an engine).
        Without it, threads switched in earlier runs are still followed
        (their history is the client's whatever the settings), but no new
        alias, spare or switch is made."""
        self.proxy = ctx.proxy
        self.archived = archived
        self.options = ctx.options
        self.sessions = ctx.sessions
        self.engine_id = engine_id
        self.engine_rebuilds = False
        """The engine was seen to rebuild, drop held content or report a
        projection epoch: threads keep a spare ready from then on (before
        that, none: an engine that never rebuilds, like one that assembles
        the history unchanged, must not cost Codex a second session per thread)."""
        self._starting: dict[str, object] = {}
        """Client threads whose spare's ``thread/start`` is unanswered (a token each)."""
        self._answered: dict[str, trio.Event] = {}
        """Set when a client thread's spare start is answered or given up."""
        self._finished: dict[str, int] = {}
        """Turns of each thread finished in this process."""
        self._started_here: set[str] = set()
        """Client threads started (not resumed) in this process."""

    # ---------------------------------------- the client's requests, followed

    def client_start(self) -> None:
        """The client starts, resumes or forks a thread: notifications that
        name no thread are its own until its answer (not a spare's)."""
        self.backing.spare_starts = 0

    def on_client_start(self, msg: Message) -> Decision:
        """A client's ``thread/fork`` or ``thread/revert`` (its row, before the
        job that follows the request): :meth:`client_start`."""
        self.client_start()
        return None

    def client_started(self, thread_id: str, params: dict[str, Any]) -> None:
        """Codex answered the client's thread/start: the thread gets its alias."""
        if not self.fresh:
            return
        self._started_here.add(thread_id)
        alias = self.backing.remember_start(thread_id, params)
        if alias is not None:
            self.proxy.spawn(self.save_alias, alias)

    def take_rolled_back(self, thread_id: str) -> bool:
        """Whether the thread came back from a switch Codex never accepted
        (what it holds is not known); asked once, as the session opens."""
        if thread_id not in self.backing.rolled_back:
            return False
        self.backing.rolled_back.discard(thread_id)
        return True

    def confirm(self, session: ThreadSession) -> None:
        """Codex accepted a turn on the thread: a switched backing thread has
        a turn now, so Codex can resume it."""
        if self.backing.confirm(session.thread_id):
            self.proxy.spawn(self.save_alias, self.backing.aliases[session.thread_id])

    def status(self) -> dict[str, Any]:
        lists = self.backing.own_starts
        if not (self.fresh or self.backing.aliases or lists.held):
            return {}
        aliases = self.backing.aliases.values()
        return {
            "backingThreads": {
                "switched": sum(1 for a in aliases if a.retired),
                "spares": sum(1 for a in aliases if a.spare),
                "framesDropped": self.backing.dropped,
                # client thread lists held for the sidecar's own thread starts, and
                # those the deadline let go unfiltered (sidecar.history.starts)
                "listsHeld": lists.held,
                "listsOverdue": lists.overdue_count,
            }
        }

    async def save_alias(self, alias: Alias) -> bool:
        """Persist the alias as it is now (the snapshot is taken before any
        await; a newer one written meanwhile wins)."""
        try:
            snapshot = self.backing.snapshot(alias)
            await trio.to_thread.run_sync(self.backing.write, *snapshot)
            return True
        except (OSError, ValueError) as exc:
            log.warning("backing-thread map not saved", extra={"fields": {"threadId": alias.client, "error": type(exc).__name__}})
            return False

    def remember_sticky(self, thread_id: str, params: dict[str, Any]) -> None:
        """Settings a turn/start (its decoded ``params``) makes stick for
        later turns: a new backing thread's first turn gets them again."""
        if not self.fresh:
            return
        alias = self.backing.aliases.get(thread_id)
        if alias is None:
            return
        changed = {k: params[k] for k in STICKY_TURN_KEYS if k in params and params[k] is not None and alias.sticky.get(k) != params[k]}
        if changed:
            alias.sticky.update(changed)
            self.proxy.spawn(self.save_alias, alias)

    def on_name_set(self, msg: Message) -> Decision:
        params = msg.params()
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        alias = self.backing.alias(thread_id) if isinstance(thread_id, str) else None
        if alias is not None and isinstance(params.get("name"), str):
            alias.name = params["name"]
            self.proxy.spawn(self.save_alias, alias)
            if alias.spare:
                self.proxy.spawn(self.name_spare, alias.spare, alias.name)
            if alias.client not in self.sessions:  # renamed while unloaded: saved, not held
                self.backing.park(alias.client)
        return None

    async def name_spare(self, spare: str, name: str) -> None:
        """Give the spare the client thread's name now, while its
        ``thread/name/updated`` is about a hidden thread (after a switch the
        client would get one it did not ask for)."""
        try:
            await self.proxy.request("thread/name/set", {"threadId": spare, "name": name}, raw=True, timeout=self.options.engine_deadline)
        except (RpcError, trio.TooSlowError) as exc:
            log.info("spare backing thread not named", extra={"fields": {"error": type(exc).__name__}})

    def backing_resume(self, params: Any) -> None:
        """A client's thread/resume, before the edge maps it: a switch Codex
        never accepted a turn for goes back to the thread before it (the new
        one has no rollout to resume), and the resume's overrides are what
        later spares start with."""
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        alias = self.backing.alias(thread_id) if isinstance(thread_id, str) else None
        if alias is None:
            return
        overrides = {k: v for k, v in params.items() if k not in RESUME_ONLY_KEYS and v is not None}
        changed = any(alias.start.get(k) != v for k, v in overrides.items())
        for one, other in EXCLUSIVE_START_KEYS:
            if one in overrides and other in alias.start:
                del alias.start[other]  # Codex refuses the two together
        alias.start.update(overrides)
        live = self.sessions.get(alias.client)
        if live is not None and not live.closed:
            # Loaded here, the new thread is resumable as it is (and its
            # switch turn may be on its way): nothing to roll back.
            pass
        elif self.backing.rollback(alias.client):
            log.warning("backing-thread switch never accepted by codex; back on the thread before it", extra={"fields": {"threadId": alias.client}})
            self.backing.rolled_back.discard(alias.client)
            session = self.sessions.get(alias.client)
            if session is not None:
                handle(session, SwitchRolledBack())
            else:
                self.backing.rolled_back.add(alias.client)  # for the session about to open
            changed = True
        if changed:
            self.proxy.spawn(self.save_alias, alias)

    def follow_to_retired(self, msg: Message, pending: PendingRequest) -> Decision:
        """The client deleted or archived its thread: Codex did it to the
        current backing thread; the retired ones (its older history) follow."""
        params = pending.remembered()
        thread_id = params.get("threadId")
        alias = self.backing.aliases.get(thread_id) if isinstance(thread_id, str) else None
        if alias is not None and msg.env.error is msgspec.UNSET:
            self.drop_spare(alias.client)
            if alias.retired:
                self.proxy.spawn(self.apply_to_retired, pending.method, list(alias.retired))
        return None

    def released(self, thread_id: str) -> None:
        """Codex unloaded the thread and its session was released: its
        spare is unloaded, and its alias not held unless it routes ids
        (``BackingThreads.park``; a resume reads it back)."""
        self.drop_spare(thread_id)
        self.backing.park(thread_id)

    def drop_spare(self, thread_id: str) -> None:
        """The thread is gone (closed, deleted, archived): unload its spare."""
        alias = self.backing.aliases.get(thread_id)
        if alias is None or alias.spare is None:
            return
        spare, alias.spare = alias.spare, None
        self.proxy.spawn(self.save_alias, alias)
        self.proxy.spawn(self.apply_to_retired, "thread/unsubscribe", [spare])

    async def apply_to_retired(self, method: str, retired: list[str]) -> None:
        for thread_id in retired:
            try:
                await self.proxy.request(method, {"threadId": thread_id}, raw=True, timeout=self.options.engine_deadline)
            except (RpcError, trio.TooSlowError) as exc:
                log.info("retired backing thread not followed", extra={"fields": {"method": method, "error": type(exc).__name__}})

    def with_sticky(self, session: ThreadSession, params: dict[str, Any]) -> dict[str, Any]:
        """The switch turn's turn/start params with the sticky settings they
        lack (``params`` itself when none is missing; never modified)."""
        alias = self.backing.aliases.get(session.thread_id)
        if alias is None or not alias.sticky:
            return params
        missing = {k: v for k, v in sorted(alias.sticky.items()) if k not in params}
        return {**params, **missing} if missing else params

    def want_spare(self, session: ThreadSession) -> None:
        """After a turn: start the thread's next spare, unless one is ready."""
        if not self.fresh or session.thread_id in self._starting:
            return
        alias = self.backing.aliases.get(session.thread_id)
        if alias is not None and not alias.listed and alias.current == alias.client and not session.rebuilds:
            self.proxy.spawn(self.record_listed, alias)
        if alias is None or alias.spare is not None or self.options.projection_mode == "per_turn":
            return
        if not (self.engine_rebuilds or session.rebuilds) or session.closed:
            return
        finished = self._finished[session.thread_id] = self._finished.get(session.thread_id, 0) + 1
        if finished < 2 and session.thread_id not in self._started_here:
            # A process that may be killed right after this turn (OpenClaw's
            # `agent --local` resumes the thread, runs one turn and is
            # SIGKILLed ~240 ms after turn/completed) starts nothing that only
            # pays off later: a spare cannot outlive it (Codex writes no
            # rollout for a thread without a turn). A thread started in this
            # process, or its second turn here, shows the process lives on.
            return
        token = self._starting[session.thread_id] = object()
        self._answered[session.thread_id] = trio.Event()
        self.proxy.spawn(self.start_spare, session, alias, token)

    async def start_spare(self, session: ThreadSession, alias: Alias, token: object) -> None:
        try:
            if self.proxy.router.pending.methods() & {"thread/start", "thread/resume", "thread/fork"}:
                return  # the client's own: a spare's notifications would be mistaken for its (next turn)
            self.backing.spare_starts += 1
            try:
                await self.proxy.request(
                    "thread/start",
                    alias.start,
                    raw=True,
                    timeout=self.options.engine_deadline,
                    on_result=lambda r: self.spare_ready(alias, r, token),
                )
                if alias.name and alias.spare:
                    await self.name_spare(alias.spare, alias.name)
                await trio.sleep(SPARE_QUIET)  # notifications that trail the answer
            finally:
                self.backing.spare_starts = max(0, self.backing.spare_starts - 1)
            log.debug("spare backing thread started", extra={"fields": log_fields(session, self.engine_id)})
        except Exception as exc:  # a refused start: revert stays the rebuild
            log.warning("spare backing thread not started", extra={"fields": log_fields(session, self.engine_id, error=type(exc).__name__)})
        finally:
            if self._starting.get(session.thread_id) is token:
                del self._starting[session.thread_id]
            self._set_answered(alias.client)

    def _set_answered(self, client: str) -> None:
        answered = self._answered.pop(client, None)
        if answered is not None:
            answered.set()

    async def record_listed(self, alias: Alias) -> None:
        """How Codex shows the client's thread before any rebuild (its first
        prompt, creation time and rollout file): a backing thread's
        ``thread/list`` entry and ``thread/read``, ``thread/resume`` and
        ``thread/unarchive`` answers will show these instead of its own."""
        if alias.listed:
            return
        try:
            read = await self.proxy.request("thread/read", {"threadId": alias.client}, raw=True, timeout=self.options.engine_deadline)
        except (RpcError, trio.TooSlowError) as exc:
            log.info("thread not read for its listing", extra={"fields": {"threadId": alias.client, "error": type(exc).__name__}})
            return
        thread = read.get("thread") if isinstance(read, dict) else None
        if isinstance(thread, dict) and not alias.listed:
            alias.listed = {k: thread[k] for k in ("preview", "createdAt", "path") if k in thread}
            await self.save_alias(alias)

    def spare_ready(self, alias: Alias, result: Any, token: object) -> None:
        """As Codex's answer is read: hide the spare before its own
        notifications come, and let the next turn's end ask for another."""
        spare = result["thread"]["id"]
        self._set_answered(alias.client)  # (before the spare is noted: the waiter runs later)
        session = self.sessions.get(alias.client)
        if alias.spare is not None or session is None or session.closed:
            # A late answer (the start timed out, another spare is ready, or
            # the thread is gone): hide it and let Codex unload it.
            self.backing.hide(alias.client, spare)
            self.proxy.spawn(self.save_alias, alias)
            self.proxy.spawn(self.apply_to_retired, "thread/unsubscribe", [spare])
            return
        self.backing.note_spare(alias.client, spare)
        self.proxy.spawn(self.save_alias, alias)  # a restart keeps hiding it
        if self._starting.get(alias.client) is token:
            del self._starting[alias.client]

    async def rebuild(self, session: ThreadSession, archive: TurnArchive, first: str, marked: list[str]) -> bool:
        """Rebuild by moving the client's thread onto its spare (False: no
        spare ready, or the map could not be saved; the caller reverts)."""
        if not self.fresh:
            return False
        alias = self.backing.aliases.get(session.thread_id)
        if alias is None:
            return False
        started = trio.current_time()
        answered = self._answered.get(session.thread_id)
        if alias.spare is None and answered is not None:
            # Its spare's start is on its way: a short wait beats a revert.
            with trio.move_on_after(self.options.spare_wait):
                await answered.wait()
        if alias.spare is None:
            return False
        old, new = self.backing.switch(session.thread_id)  # pending until Codex accepts the turn
        if not await self.save_alias(alias):
            self.backing.unswitch(session.thread_id, old, new)
            log.warning("backing-thread switch not saved; reverting instead", extra={"fields": log_fields(session, self.engine_id)})
            return False
        self.proxy.spawn(self.archived.load, session.thread_id)
        handle(session, ThreadMoved(round((trio.current_time() - started) * 1000, 1), switched=True))
        # Let Codex unload the thread the client's thread left (its frames are dropped already).
        self.proxy.spawn(self.apply_to_retired, "thread/unsubscribe", [old])
        log.info("rebuilt on a fresh backing thread", extra={"fields": log_fields(session, self.engine_id, retired=len(alias.retired))})
        return True
