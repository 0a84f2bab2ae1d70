"""Items the client injects outside ``turn/start`` (``thread/inject_items``).

They are part of the thread as the client sees it: recorded when Codex
accepts them, put back into the Codex thread after a rebuild moved it (the
rebuild's revert or switch leaves the thread without them), and dropped
with the client turn they followed when the client reverts that turn.
"""

from __future__ import annotations

import logging

import trio

from ..relay import Decision, Message, PendingRequest, RpcError
from ..session.context import LifecycleContext
from ..session.state import ThreadSession
from ..store.injected import InjectedItems, injected_path
from ..thread.events import (
    DropInjections,
    InjectionReady,
    InjectionsLoaded,
    ItemsInjected,
    JournalInjection,
    RecordInjection,
    ReplayAnswered,
    ReplayMissed,
    ReplayWanted,
    SendInjections,
    ThreadAction,
    TurnsReverted,
    WriteFraming,
)
from ..thread.files import Injection
from ..thread.state import handle
from .calls import EngineCalls

log = logging.getLogger("codex_sidecar.lifecycle")


class Injections:
    def __init__(self, ctx: LifecycleContext, calls: EngineCalls) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.state_dir = ctx.state_dir
        self.options = ctx.options
        self.calls = calls

    def journal(self, session: ThreadSession) -> InjectedItems:
        return InjectedItems(injected_path(self.state_dir, session.thread_id))

    def on_inject(self, msg: Message) -> Decision:
        msg.remember_params()
        return None

    def on_inject_response(self, msg: Message, pending: PendingRequest) -> Decision:
        params = pending.remembered()
        thread_id, items = params.get("threadId"), params.get("items")
        if msg.result() is None or not isinstance(thread_id, str) or not isinstance(items, list) or not items:
            return None  # refused, or nothing: the thread holds nothing new
        session = self.sessions.get(thread_id)
        if session is None:
            return None
        for action in handle(session, ItemsInjected(items)):
            if isinstance(action, RecordInjection):
                self.proxy.spawn(self._record, session, action.injection)
        return None

    async def _record(self, session: ThreadSession, injection: Injection) -> None:
        """Once the session is open (its newest turn known), on disk."""
        await session.ready.wait()
        for action in handle(session, InjectionReady(injection)):
            if isinstance(action, JournalInjection):
                await trio.to_thread.run_sync(self._write, self.journal(session), action.injection, action.framing)

    @staticmethod
    def _write(journal: InjectedItems, placed: Injection, framing: int | None) -> None:
        journal.append(placed)
        if framing is not None:  # an unsure count stays unsure until a rebuild settles it
            journal.framing(framing)

    async def load(self, session: ThreadSession, last_turn: str | None) -> None:
        """At the session's opening: the journal, then what came meanwhile."""
        journal = self.journal(session)
        loaded, framing, unsure = await trio.to_thread.run_sync(journal.load)
        handle(session, InjectionsLoaded(loaded, framing, unsure, last_turn))

    async def replay(self, session: ThreadSession, kept_framing: bool) -> None:
        """A rebuild moved the thread: the client's injected items go back in,
        in order, before the turn that carries the projection. A revert in
        place keeps what sat before the thread's first turn (put back by an
        earlier rebuild); a fresh thread holds none of them.

        Exactly once across a SIGKILL: the replay is journalled before it
        is sent and settled after Codex's answer; cut in between, the next
        process loads the thread as unsure and the rebuilder moves it only
        onto a thread that holds none (``Rebuilder``), never in place."""
        await self._carry_out(session, handle(session, ReplayWanted(kept_framing)))

    async def _carry_out(self, session: ThreadSession, actions: list[ThreadAction], error: str | None = None) -> None:
        journal = self.journal(session)
        for action in actions:
            match action:
                case WriteFraming(framing):
                    await trio.to_thread.run_sync(journal.framing, framing)
                case SendInjections(items, kept, target):
                    await trio.to_thread.run_sync(journal.replaying, target)
                    applied: bool | None = True
                    try:
                        await self.proxy.request("thread/inject_items", {"threadId": session.thread_id, "items": items}, timeout=self.options.engine_deadline)
                    except RpcError as exc:
                        applied, error = False, type(exc).__name__  # refused: the thread holds what it held before
                    except trio.TooSlowError as exc:
                        applied, error = None, type(exc).__name__  # may yet have been applied: stays unsure
                    await self._carry_out(session, handle(session, ReplayAnswered(applied, kept, target)), error)
                case ReplayMissed():
                    log.warning(
                        "items the client injected could not be put back after a rebuild; the model misses them",
                        extra={"fields": self.calls.fields(session, error=error)},
                    )
                case DropInjections(turns):
                    await trio.to_thread.run_sync(journal.drop_after, turns)

    async def forget_after(self, session: ThreadSession, gone: list[str]) -> None:
        """The client reverted these turns: what it injected after them goes too."""
        await self._carry_out(session, handle(session, TurnsReverted(gone)))
