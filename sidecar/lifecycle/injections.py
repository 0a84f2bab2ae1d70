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
from ..thread import opening
from ..thread.files import Injection
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
        injection = Injection(None, items)
        opening.injected(session, injection)
        self.proxy.spawn(self._record, session, injection)
        return None

    async def _record(self, session: ThreadSession, injection: Injection) -> None:
        """Once the session is open (its newest turn known), on disk."""
        await session.ready.wait()
        placed = Injection(session.last_turn, injection.items)
        opening.injection_placed(session, injection, placed)
        framing = None if session.injected_unsure else session.injected_framing
        journal = self.journal(session)
        def write() -> None:
            journal.append(placed)
            if framing is not None:  # an unsure count stays unsure until a rebuild settles it
                journal.framing(framing)

        await trio.to_thread.run_sync(write)

    async def load(self, session: ThreadSession, last_turn: str | None) -> None:
        """At the session's opening: the journal, then what came meanwhile."""
        journal = self.journal(session)
        loaded, framing, unsure = await trio.to_thread.run_sync(journal.load)
        opening.injections_loaded(session, loaded, framing, unsure, last_turn)

    async def replay(self, session: ThreadSession, kept_framing: bool) -> None:
        """A rebuild moved the thread: the client's injected items go back in,
        in order, before the turn that carries the projection. A revert in
        place keeps what sat before the thread's first turn (put back by an
        earlier rebuild); a fresh thread holds none of them.

        Exactly once across a SIGKILL: the replay is journalled before it
        is sent and settled after Codex's answer; cut in between, the next
        process loads the thread as unsure and the rebuilder moves it only
        onto a thread that holds none (``Rebuilder``), never in place."""
        if kept_framing and session.injected_unsure:
            return  # the rebuilder does not revert an unsure thread in place
        kept = session.injected_framing if kept_framing else 0
        items = [item for injection in session.injected[kept:] for item in injection.items]
        journal = self.journal(session)
        target = len(session.injected)
        if not items:
            if session.injected_unsure or session.injected_framing != kept:
                opening.replay_settled(session, kept)
                await trio.to_thread.run_sync(journal.framing, kept)
            return
        opening.replaying(session)
        await trio.to_thread.run_sync(journal.replaying, target)
        try:
            await self.proxy.request("thread/inject_items", {"threadId": session.thread_id, "items": items}, timeout=self.options.engine_deadline)
        except RpcError as exc:
            # Refused: the thread holds what it held before.
            opening.replay_settled(session, kept)
            await trio.to_thread.run_sync(journal.framing, kept)
            self._missed(session, exc)
            return
        except trio.TooSlowError as exc:
            self._missed(session, exc)  # may yet have been applied: stays unsure
            return
        opening.replay_settled(session, target)
        await trio.to_thread.run_sync(journal.framing, target)

    def _missed(self, session: ThreadSession, exc: Exception) -> None:
        log.warning(
            "items the client injected could not be put back after a rebuild; the model misses them",
            extra={"fields": self.calls.fields(session, error=type(exc).__name__)},
        )

    async def forget_after(self, session: ThreadSession, gone: list[str]) -> None:
        """The client reverted these turns: what it injected after them goes too."""
        dropped = set(gone)
        if not opening.injections_dropped(session, dropped):
            return
        await trio.to_thread.run_sync(self.journal(session).drop_after, sorted(dropped))
