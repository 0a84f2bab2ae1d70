"""Rebuild in place: revert the Codex thread to its framing (same thread id,
same prompt-cache key), and keep Codex's notifications about that revert
from the client, which did not ask for it."""

from __future__ import annotations

import logging

import trio

from ..history.archive import TurnArchive
from ..history.reads import ArchivedTurns
from ..relay import HANDLED, Decision, Message, Proxy, RpcError
from ..session.options import LifecycleOptions
from ..session.state import RevertNoise, ThreadSession, log_fields
from ..thread.events import (
    NoiseSettled,
    RebuildRevertAnswered,
    RebuildRevertRefused,
    RebuildRevertSent,
    RevertedNoticeCame,
    RevertedNoticeMissed,
    RevertRefused,
    SwallowNotice,
    ThreadEvent,
    ThreadMoved,
)
from ..thread.state import handle

log = logging.getLogger("codex_sidecar.lifecycle")

REVERTED_NOTICE_WAIT = 2.0
"""Seconds the ``thread/reverted`` of a rebuild's revert is waited for (and
swallowed) after Codex answered the revert; the turn does not wait for it."""


class FirstTurnGone(Exception):
    """Codex no longer has the turn the ledger says is its first."""


class InPlace:
    def __init__(self, proxy: Proxy, archived: ArchivedTurns, options: LifecycleOptions, engine_id: str) -> None:
        self.proxy = proxy
        self.archived = archived
        self.options = options
        self.engine_id = engine_id
        self.reverting: dict[str, tuple[ThreadSession, RevertNoise]] = {}
        """Threads with a rebuild revert whose noise is still being swallowed
        (the thread's session and its record of that noise)."""

    async def rebuild(self, session: ThreadSession, archive: TurnArchive, first: str, marked: list[str]) -> bool:
        """Revert the thread before ``first``. False: Codex refused (the
        caller forwards the original request); :class:`FirstTurnGone` when
        the ledger's first turn is not Codex's any more."""
        entry = self.reverting.setdefault(session.thread_id, (session, RevertNoise()))
        noise = entry[1]
        ticket = trio.Event()
        self._noise(session.thread_id, entry, RebuildRevertSent(noise, ticket))
        started = trio.current_time()
        try:
            await self.proxy.request("thread/revert", {"threadId": session.thread_id, "beforeTurnId": first}, timeout=self.options.engine_deadline)
        except (RpcError, trio.TooSlowError) as exc:
            self._noise(session.thread_id, entry, RebuildRevertRefused(noise, ticket))  # no thread/reverted for a refused revert
            if isinstance(exc, RpcError):
                # Refused: Codex keeps the turns, so they are its to list again.
                await trio.to_thread.run_sync(archive.mark_restored, marked)
                self.archived.forget(session.thread_id)
            message = getattr(exc, "message", "") or ""
            if message.startswith("turn not found") and session.turns_since_rebuild is not None:
                # The ledger's first turn is gone (the client reverted the thread
                # itself, or the sidecar died between a revert and its turn/start).
                raise FirstTurnGone from exc
            handle(session, RevertRefused("paginated" in message))
            log.warning(
                "rebuild impossible (thread/revert refused); forwarding the original request",
                extra={"fields": log_fields(session, self.engine_id, error=type(exc).__name__, legacyHistory=session.revert_unsupported)},
            )
            return False
        answered = trio.current_time()
        self._noise(session.thread_id, entry, RebuildRevertAnswered(noise))
        self.archived.forget(session.thread_id)
        self.proxy.spawn(self.archived.load, session.thread_id)  # before a read needs it
        revert_ms = round((answered - started) * 1000, 1)
        handle(session, ThreadMoved(revert_ms, switched=False))
        # thread/reverted follows the response: it is swallowed when it comes,
        # but the turn need not wait for it (the status notifications, which
        # the turn has its own of, all came before the response).
        self.proxy.spawn(self._expire_noise, session, entry, ticket, revert_ms)
        return True

    async def _expire_noise(self, session: ThreadSession, entry: tuple[ThreadSession, RevertNoise], ticket: trio.Event, revert_ms: float) -> None:
        answered = trio.current_time()
        with trio.move_on_after(REVERTED_NOTICE_WAIT):
            await ticket.wait()
        self._noise(session.thread_id, entry, RevertedNoticeMissed(entry[1], ticket))  # never came: stop waiting for it
        log.debug(
            "thread reverted to its framing",
            extra={
                "fields": log_fields(
                    session,
                    self.engine_id,
                    revertMs=revert_ms,
                    revertedNoticeMs=round((trio.current_time() - answered) * 1000, 1),
                    revertedNoticeSeen=ticket.is_set(),
                )
            },
        )

    def _noise(self, thread_id: str, entry: tuple[ThreadSession, RevertNoise], event: ThreadEvent) -> SwallowNotice | None:
        """The machine's answer to ``event`` carried out: the thread stops
        being watched once its noise settled; the notice to swallow, if any."""
        swallow = None
        for action in handle(entry[0], event):
            if isinstance(action, SwallowNotice):
                swallow = action
                action.ticket.set()
            elif isinstance(action, NoiseSettled) and self.reverting.get(thread_id) is entry:
                del self.reverting[thread_id]
        return swallow

    def swallow_noise(self, msg: Message) -> Decision:
        """Hook on the revert's notifications (``thread/status/changed``,
        ``thread/readState/changed``, ``thread/reverted``: rows of
        :data:`sidecar.methods.METHODS`, before the archive's read state):
        the client's own pass."""
        params = msg.params()
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        if not isinstance(thread_id, str):
            return None
        entry = self.reverting.get(thread_id)
        if entry is None:
            return None
        if msg.method == "thread/reverted":
            if self._noise(thread_id, entry, RevertedNoticeCame(entry[1])) is None:
                return None  # not one of the sidecar's reverts
            return HANDLED
        if entry[1].answered:
            return None  # after the answer, status changes are the next turn's
        return HANDLED

    def busy(self, thread_id: str) -> bool:
        return thread_id in self.reverting
