"""Releasing a thread's session once Codex unloads the thread (closed,
archived or deleted): its open
mirror and in-memory state go, so a long-running sidecar holds what Codex
holds and no more (a ``thread/resume`` opens it again from disk)."""

from __future__ import annotations

import logging

from ..relay import Decision, Message
from ..session.context import LifecycleContext
from ..session.state import ThreadSession
from ..thread.session_events import Release, ReleaseAsked, ThreadClosed
from ..thread.state import handle
from .calls import EngineCalls
from .context import HistoryMoves

log = logging.getLogger("codex_sidecar.lifecycle")

LOADED_LIST_PAGES = 100
"""Pages of ``thread/loaded/list`` read to confirm Codex unloaded a closed thread."""


class Releases:
    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, moves: HistoryMoves) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.options = ctx.options
        self.calls = calls
        self.archived = moves.archived
        self.spares = moves.spares
        self.inplace = moves.inplace
        self.released = {"threads": 0, "rebuilds": 0}
        """Sessions released after Codex closed their thread, and their rebuilds."""

    def on_thread_closed(self, msg: Message) -> Decision:
        """Codex unloaded a thread (``thread/closed`` after ``thread/unsubscribe``
        and its unload delay; ``thread/archived`` or ``thread/deleted``, which
        Codex 0.169.0 sends instead when an archive or a delete unloads it): release the session's open mirror and in-memory state, so a
        long-running sidecar holds what Codex holds and no more. The client
        gets the notification unchanged; a ``thread/resume`` opens the session
        again from disk, as after a restart."""
        params = msg.params()
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        session = self.sessions.get(thread_id) if isinstance(thread_id, str) else None
        if session is not None:
            handle(session, ThreadClosed())
            self.proxy.spawn(self._release, session)
        return None

    async def _release(self, session: ThreadSession) -> None:
        await session.ready.wait()
        while True:
            for written in list(session.marking):
                await written.wait()
            async with session.slot:  # after the last turn's finalisation
                if not session.marking:
                    await self._release_now(session)
                    return

    async def _release_now(self, session: ThreadSession) -> None:
        """The session, idle (its turn slot held): release it if Codex really
        unloaded the thread and nothing reopened it meanwhile."""
        if not self._releasable(session) or not await self._unloaded(session.thread_id):
            return
        if not self._releasable(session):  # opened again while Codex was asked
            return
        del self.sessions[session.thread_id]
        self.spares.released(session.thread_id)
        self.released["threads"] += 1
        self.released["rebuilds"] += session.rebuilds
        self.archived.forget(session.thread_id)
        self.calls.learned.forget(session.thread_id)
        if session.mirror is not None:
            session.mirror.close()
        log.info("thread closed by codex; session released", extra={"fields": self.calls.fields(session)})

    def _releasable(self, session: ThreadSession) -> bool:
        """Closed and idle, still this thread's session, and no rebuild
        revert of it under way (the machine's ``ReleaseAsked``)."""
        ours = self.sessions.get(session.thread_id) is session
        return Release() in handle(session, ReleaseAsked(ours, session.thread_id in self.inplace.reverting))

    async def _unloaded(self, thread_id: str) -> bool:
        """Codex's ``thread/loaded/list`` does not name the thread (a
        ``thread/closed`` is taken at its word only once Codex confirms it)."""
        cursor = None
        try:
            for _ in range(LOADED_LIST_PAGES):
                page = await self.proxy.request("thread/loaded/list", {"cursor": cursor} if cursor else {}, timeout=self.options.engine_deadline)
                data = page.get("data") if isinstance(page, dict) else None
                if not isinstance(data, list) or thread_id in data:
                    return False
                cursor = page.get("nextCursor")
                if not cursor:
                    return True
        except Exception as exc:  # an error answer, a timeout, a child gone
            log.info("thread/loaded/list failed; session kept", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})
        return False
