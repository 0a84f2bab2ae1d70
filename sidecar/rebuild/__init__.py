"""Rebuilds: move a Codex thread back to its framing so a turn can carry the
engine's whole assembly.

Two strategies sit behind one interface (:class:`Strategy`): on a fresh
backing thread (:mod:`.fresh`, with :mod:`sidecar.history.backing`, the
only modules that know backing threads exist) and in place (:mod:`.inplace`, a
``thread/revert``). :class:`Rebuilder` does what both share (which turn is
Codex's first, the archive's marks persisted before anything moves) and
tries the strategies in order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from ..history.archive import UNKNOWN, TurnArchive, archive_path
from ..history.reads import ArchivedTurns
from ..relay import RpcError
from ..session.context import LifecycleContext
from ..session.state import ThreadSession, log_fields
from ..thread.events import FirstTurnLost, NothingMoved, RebuildAtFraming, ResetLedger
from ..thread.state import handle
from .inplace import FirstTurnGone, InPlace

log = logging.getLogger("codex_sidecar.lifecycle")


class Strategy(Protocol):
    async def rebuild(self, session: ThreadSession, archive: TurnArchive, first: str, marked: list[str]) -> bool:
        """Move the thread so it holds only its framing; False: not done."""
        ...


class Rebuilder:
    def __init__(
        self,
        ctx: LifecycleContext,
        archived: ArchivedTurns,
        engine_id: str,
        strategies: list[Strategy],
        on_moved: Callable[[ThreadSession, bool], Awaitable[None]] | None = None,
    ) -> None:
        self.proxy = ctx.proxy
        self.archived = archived
        self.options = ctx.options
        self.state_dir = ctx.state_dir
        self.engine_id = engine_id
        self.strategies = strategies
        self.on_moved = on_moved
        """Called once a strategy moved the thread, with whether it stayed the
        same Codex thread (what the client put into it outside its turns goes
        back in)."""

    async def rebuild(self, session: ThreadSession) -> bool:
        """Drop every turn the Codex thread holds (never called with a turn
        in progress: the caller holds the thread's turn slot)."""
        if session.revert_unsupported:
            return False
        try:
            first = await self.first_codex_turn(session.thread_id, session)
        except (RpcError, trio.TooSlowError) as exc:
            log.warning("cannot list the thread's turns for a rebuild", extra={"fields": log_fields(session, self.engine_id, error=type(exc).__name__)})
            return False
        if first is None:
            handle(session, RebuildAtFraming())
            return True  # nothing but framing yet
        # Persist before moving: a SIGKILL between the rebuild and the
        # turn/start that carries the projection must not leave a ledger
        # claiming history the thread no longer holds, nor lose which turns
        # the client's reads must still show (a turn marked dropped that Codex
        # still has is not shown twice: reads splice only the missing ones).
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        unread, path = self.client_view(session)
        self.archived.reverting.add(session.thread_id)
        try:
            marked = await trio.to_thread.run_sync(_before_rebuild, archive, session, unread, path)
            # A read answered from here on must see the marks (its response may
            # come in the same pipe read as the revert's, before this task resumes).
            self.archived.forget(session.thread_id)
            for strategy in self.strategies:
                if session.injected_unsure and isinstance(strategy, InPlace):
                    # What the client injected may or may not sit before the
                    # first turn (a replay cut by a kill): a revert keeps it,
                    # so only a thread that holds none may take it again.
                    log.warning("not reverting in place: a replay of injected items was cut short", extra={"fields": log_fields(session, self.engine_id)})
                    continue
                try:
                    if await strategy.rebuild(session, archive, first, marked):
                        if self.on_moved is not None:
                            await self.on_moved(session, isinstance(strategy, InPlace))
                        return True
                except FirstTurnGone:
                    # Ask Codex for the thread's first turn instead, once.
                    handle(session, FirstTurnLost())
                    self.archived.reverting.discard(session.thread_id)
                    return await self.rebuild(session)
            for action in handle(session, NothingMoved()):
                if isinstance(action, ResetLedger) and session.ledger is not None:
                    # Nothing moved: the ledger stands as it was before the marker.
                    await trio.to_thread.run_sync(session.ledger.reset, action.holdings)
            return False
        finally:
            self.archived.reverting.discard(session.thread_id)

    def client_view(self, session: ThreadSession) -> tuple[Any, str | None]:
        """The client's first unread position and its thread's rollout path
        before the rebuild, as Codex last showed them in this process,
        recorded with the marks (Codex shows the rebuilt thread's own after
        it). Not asked for here: a ``thread/read`` on the rebuild's path
        would delay every first rebuild after a restart (Codex shows the read
        state after each turn, the path in every thread/start, resume and
        read answer). :data:`UNKNOWN` and None: not shown yet, not recorded."""
        thread_id = session.thread_id
        return self.archived.unread_to_record(thread_id), self.archived.shown_path.get(thread_id)

    async def first_codex_turn(self, thread_id: str, session: ThreadSession | None) -> str | None:
        """The first turn the Codex thread holds: the ledger's when it knows,
        else Codex's answer (None: no turn). Raises RpcError or TooSlowError."""
        if session is not None and session.turns_since_rebuild is not None:
            if session.turns_since_rebuild:
                return session.turns_since_rebuild[0]
            current = session.current
            if current is not None and current.turn_id is not None:
                return current.turn_id  # the rebuild's own turn, running or finalising
            return None
        listed = await self.proxy.request(
            "thread/turns/list", {"threadId": thread_id, "sortDirection": "asc", "limit": 1}, timeout=self.options.engine_deadline
        )
        data = (listed.get("data") or listed.get("turns")) if isinstance(listed, dict) else None
        first = data[0] if isinstance(data, list) and data else None
        return first.get("id") if isinstance(first, dict) and isinstance(first.get("id"), str) else None


def _before_rebuild(archive: TurnArchive, session: ThreadSession, unread: Any = UNKNOWN, path: str | None = None) -> list[str]:
    marked = archive.mark_dropped(session.live_turns, unread, path)
    if session.ledger is not None:
        session.ledger.rebuilding(session.rebuilds, session.projected_epoch)
    return marked


__all__ = ["FirstTurnGone", "InPlace", "Rebuilder", "Strategy"]
