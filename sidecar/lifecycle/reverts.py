"""A client's own ``thread/revert`` and ``thread/fork``: the archive, mirror
and ledger follow what the client did to its thread, including reverts and
forks at turns a rebuild took out of Codex (the client still sees them)."""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

import trio

from ..history.archive import TurnArchive, archive_path, turn_ids
from ..relay import HANDLED, Decision, Message, PendingRequest, RpcError, Slot
from ..session.context import LifecycleContext
from ..session.state import ThreadSession, Unfollowed
from ..store.mirror import MirrorError
from ..thread.events import Learn, ResetLedger
from ..thread.session_events import (
    FollowEnded,
    HoldingsChanged,
    LedgerAfterRead,
    ReadLedgerAfter,
    RevertAnswered,
    RevertFollowed,
    RevertSent,
    RevertsSettled,
    RevertTurnsGone,
    RevertUnfollowed,
)
from ..thread.state import handle
from ..translate import turn_key_prefix
from .calls import EngineCalls
from .context import HistoryMoves
from .injections import Injections

log = logging.getLogger("codex_sidecar.lifecycle")

INTO_ARCHIVE = Slot[bool]("reverts.into_archive")
"""A client's thread/revert or thread/fork into turns a rebuild archived,
sent to Codex as one to (or before) its first turn: a fork holds Codex's framing only."""

REVERT_CUSTOM_TYPE = "codex-sidecar.client-revert"
"""Mirror entry that takes the turns a client's own ``thread/revert`` dropped off the session's path."""
SETTLE_PAGES = 50
"""Pages of 20 turns looked through to settle a client revert whose answer a kill lost."""


class Unanswered:
    """A client ``thread/revert`` sent to Codex and not answered: the thread's
    turns wait for it until its answer or the gate's timeout, whichever comes
    first, ends the wait (once). It rides on the request (:data:`UNANSWERED`)
    and with the timeout's task, so no table keyed by client id holds it."""

    __slots__ = ("session", "waiting")

    def __init__(self, session: ThreadSession) -> None:
        self.session = session
        self.waiting = True

    def end(self) -> None:
        """Answered (or given up on): turns stop waiting for it."""
        if not self.waiting:
            return
        self.waiting = False
        if RevertsSettled() in handle(self.session, RevertAnswered()):
            self.session.reverts_answered.set()


UNANSWERED = Slot[Unanswered]("reverts.unanswered")
"""A client thread/revert's wait for its answer (:class:`Unanswered`)."""


class ClientReverts:
    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, moves: HistoryMoves, injections: Injections) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.state_dir = ctx.state_dir
        self.archived = moves.archived
        self.options = ctx.options
        self.calls = calls
        self.rebuilder = moves.rebuilder
        self.injections = injections

    def _remember(self, msg: Message) -> None:
        msg.remember_params()  # the client's own start: Spares.on_client_start, the row before

    def on_revert(self, msg: Message) -> Decision:
        """A client's own ``thread/revert``. The client's later requests on
        the thread wait until Codex answered it and the mirror followed (a
        turn/start sent right after it must not assemble, nor be mirrored
        before, the reverted turns).

        One to a turn a rebuild took out of Codex (the client still sees it
        in its reads) cannot go to Codex as it is: Codex no longer knows the
        turn. Every turn Codex holds comes after it, so Codex reverts to its
        first turn instead, and the archive, mirror and ledger follow the
        client's request."""
        params = msg.params()
        session: ThreadSession | None = None
        if isinstance(params, dict) and isinstance(params.get("threadId"), str):
            holder = ("client-revert", msg.id)
            self.proxy.router.gate(params["threadId"], holder)
            session = self.sessions.get(params["threadId"])
            wait = None
            if session is not None:
                # A turn/start already queued for the slot (not gated: a turn was
                # running) must not assemble before Codex answered this revert.
                handle(session, RevertSent(trio.Event()))
                wait = Unanswered(session)
                msg.note(UNANSWERED, wait)
            self.proxy.spawn(self._expire_gate, params["threadId"], holder, wait)  # never answered
        decision = self._redirect_if_archived(msg, ("beforeTurnId",))
        if decision is None and session is not None and isinstance(params.get("beforeTurnId"), str):
            # Before it goes: a kill after Codex carried it out but before its
            # answer is read must not leave the reverted turns in the mirror.
            with contextlib.suppress(ValueError):
                TurnArchive(archive_path(self.state_dir, session.thread_id)).begin_revert(
                    params["beforeTurnId"], sorted(self.in_flight(session))
                )
        return decision

    @staticmethod
    def in_flight(session: ThreadSession) -> set[str]:
        """The thread's turns running or finalising (a revert interrupts them)."""
        turns = set(session.turns)
        if session.current is not None and session.current.turn_id is not None:
            turns.add(session.current.turn_id)
        return turns

    def on_fork(self, msg: Message) -> Decision:
        return self._fork_into_archive(msg)

    def _fork_into_archive(self, msg: Message) -> Decision:
        """A fork through (``lastTurnId``) or before (``beforeTurnId``) a turn
        a rebuild took out of Codex: Codex forks its framing (before its
        first turn); the fork's mirror and archive are cut at the client's
        turn, and its ledger says Codex holds nothing, so its first turn
        projects the engine's assembly."""
        return self._redirect_if_archived(msg, ("lastTurnId", "beforeTurnId"))

    def _redirect_if_archived(self, msg: Message, keys: tuple[str, ...]) -> Decision:
        self._remember(msg)
        params = msg.remembered()
        thread_id = params.get("threadId")
        cut = next((params[k] for k in keys if isinstance(params.get(k), str)), None)
        if not isinstance(thread_id, str) or cut is None:
            return None
        if cut not in turn_ids(self.archived.hidden_for(thread_id)):
            return None
        self.proxy.router.gate(thread_id, id(msg))  # the client's later requests stay behind it
        self.proxy.spawn(self._into_archive, msg, thread_id)
        return HANDLED

    async def _into_archive(self, msg: Message, thread_id: str) -> None:
        """Send a client's revert or fork that names an archived turn to
        Codex as the same request before Codex's first turn."""
        try:
            try:
                first = await self.rebuilder.first_codex_turn(thread_id, self.sessions.get(thread_id))
            except (RpcError, trio.TooSlowError) as exc:
                first = None
                log.warning("cannot list the thread's turns for a request into archived turns", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})
            if isinstance(first, str):
                params = {k: v for k, v in msg.params().items() if k != "lastTurnId"}
                msg.set_params({**params, "beforeTurnId": first})  # encoded once, on the way out
                msg.note(INTO_ARCHIVE, True)
            # else: Codex holds no turn (or did not say): the request goes as
            # it is, and Codex's answer (turn not found) reaches the client.
            self.proxy.router.forward_client_request(msg)
        finally:
            self.proxy.router.ungate(thread_id, id(msg))

    def on_revert_response(self, msg: Message, pending: PendingRequest) -> Decision:
        """The client reverted its thread itself: the turns it dropped must
        not come back in its reads, whatever the sidecar rebuilds later."""
        wait = pending.noted(UNANSWERED)
        if wait is not None:
            wait.end()
        params = pending.remembered()
        into_archive = pending.noted(INTO_ARCHIVE) is True
        thread_id, before = params.get("threadId"), params.get("beforeTurnId")
        holder = ("client-revert", pending.client_id)
        if msg.result() is None or not isinstance(thread_id, str) or not isinstance(before, str):
            if isinstance(thread_id, str):
                self.proxy.router.ungate(thread_id, holder)  # refused: nothing to follow
                if isinstance(before, str) and not into_archive:
                    with contextlib.suppress(ValueError):
                        TurnArchive(archive_path(self.state_dir, thread_id)).revert_refused(before)
            return None
        try:
            archive = TurnArchive(archive_path(self.state_dir, thread_id))
        except ValueError:
            self.proxy.router.ungate(thread_id, holder)
            return None
        # Codex has reverted. The intent goes to disk before the client hears
        # of it (one small append, here on the loop as the inspect record is),
        # so a kill before the mirror follows leaves the work to the next
        # opening of the thread: the reverted turns must never come back.
        session = self.sessions.get(thread_id)
        in_flight = self.in_flight(session) if session is not None else set()
        archive.begin_forget(before, into_archive, sorted(in_flight))  # best effort, as every archive write
        wrapped = None
        if session is not None and isinstance(msg.result(), dict):
            # Before the turns go from the archive's list: the cursors name
            # the newest turn and item the client keeps.
            wrapped = self.archived.wrap_revert_cursors(thread_id, before, session.live_turns, session.last_items, msg.result())
        if session is not None:
            # Set now: a turn/start already queued for the slot follows it first.
            handle(session, RevertUnfollowed(Unfollowed(before, into_archive, frozenset(in_flight), holder)))
        self.proxy.spawn(self._forget_turns, thread_id, archive, before, holder)
        if wrapped is not None:
            msg.set_result(wrapped)
        return None

    async def _expire_gate(self, thread_id: str, holder: Any, wait: Unanswered | None) -> None:
        """The client's requests never wait longer than a turn/start would,
        nor do later turns wait for an answer that never came."""
        await trio.sleep(self.options.previous_turn_wait)
        self.proxy.router.ungate(thread_id, holder)
        if wait is not None:
            wait.end()

    async def _forget_turns(self, thread_id: str, archive: TurnArchive, before: str, holder: Any) -> None:
        acquired: ThreadSession | None = None
        try:
            session = self.sessions.get(thread_id)
            if session is None:
                await trio.to_thread.run_sync(archive.forget_from, before)
                self.archived.forget(thread_id)
                return  # the mirror follows when the thread is next opened
            # After the turn Codex interrupted for the revert (if any) is
            # finalised; the client's next turn/start waits at the gate.
            with trio.move_on_after(self.options.previous_turn_wait):
                await session.ready.wait()
                await session.slot.acquire()
                acquired = session
            if acquired is None:
                # That turn never ended (lost turn/completed): follow anyway, as
                # a turn/start takes over the slot, so the client is not stuck.
                log.warning("a turn never finished; following the client's revert anyway", extra={"fields": {"threadId": thread_id}})
            pending = session.unfollowed
            if pending is not None and pending.holder == holder:  # else a turn followed it first
                await self.follow(session, archive, pending)
        finally:
            self.proxy.router.ungate(thread_id, holder)
            if acquired is not None:
                acquired.slot.release()

    async def follow(self, session: ThreadSession, archive: TurnArchive, pending: Unfollowed) -> None:
        """Archive, mirror and ledger forget the turns from ``before`` on. No
        turn of the thread may be assembled or mirrored meanwhile: the caller
        holds the turn slot (or took it over), or the session is opening and
        not ready yet."""
        thread_id, before, into_archive = session.thread_id, pending.before, pending.into_archive
        gone = await trio.to_thread.run_sync(archive.forget_from, before)
        await self.injections.forget_after(session, [before, *gone])
        self.archived.forget(thread_id)
        await self.archived.load(thread_id)
        handle(session, RevertTurnsGone(list(gone)))
        followed = True
        mirror = session.mirror
        if mirror is not None:
            # The engine's history loses the reverted turns as Codex's did.
            try:
                await trio.to_thread.run_sync(
                    lambda: mirror.rewind(
                        turn_key_prefix(thread_id, before),
                        f"{turn_key_prefix(thread_id, before)}client-revert",
                        REVERT_CUSTOM_TYPE,
                        {"beforeTurnId": before},
                        turn_id=before,  # a fork's inherited turns keep their parent's keys
                    )
                )
            except (MirrorError, OSError) as exc:
                followed = False  # the intent stays: the next turn (or opening) tries again
                log.warning("transcript mirror could not follow the client's revert", extra={"fields": self.calls.fields(session, error=type(exc).__name__)})
        for action in handle(session, RevertFollowed(before, into_archive)):
            if isinstance(action, ReadLedgerAfter):
                # What Codex holds is the ledger as it stood after the last turn
                # kept, which that turn's record in the ledger's journal has.
                kept = action.turn_id
                ledger = await self._ledger_after(session, kept) if kept is not None else None
                for learnt in handle(session, LedgerAfterRead(ledger)):
                    if isinstance(learnt, Learn):
                        self.calls.learn(session, learnt.event)  # it may have come in a reverted turn: send it again
        for reset in handle(session, HoldingsChanged()):
            if isinstance(reset, ResetLedger) and session.ledger is not None:
                # The ledger a restart restores.
                await trio.to_thread.run_sync(functools.partial(session.ledger.reset, reset.holdings, clientRevert=before))
        handle(session, FollowEnded(pending, followed))
        self.proxy.router.ungate(thread_id, pending.holder)  # followed, or the next turn retries
        if followed and session.mirror is not None:
            await trio.to_thread.run_sync(archive.end_forget, before)
        log.info("client reverted its thread; mirror and ledger follow", extra={"fields": self.calls.fields(session, turnsForgotten=len(gone))})

    async def _ledger_after(self, session: ThreadSession, turn_id: str) -> tuple[list[str], Any, bool] | None:
        """(held, projectedEpoch, forceRebuild) as the ledger's journal
        recorded them after ``turn_id``; None when it no longer reaches back."""
        if session.ledger is None:
            return None
        state = await trio.to_thread.run_sync(session.ledger.after_turn, turn_id)
        if state is None or state.held is None:
            return None
        return list(state.held), state.projected_epoch, state.force_rebuild

    async def settle_unanswered(self, session: ThreadSession, archive: TurnArchive) -> None:
        """Killed after a client revert went to Codex, before its answer was
        read: Codex's turns, newest first, tell whether it was carried out (a
        turn the archive has before the reverted one comes first) or not (the
        reverted turn itself is still there)."""
        sent = await trio.to_thread.run_sync(archive.pending_revert)
        if sent is None:
            return
        before, in_flight = sent
        order = await trio.to_thread.run_sync(archive.turn_order)
        if before not in order:
            return  # nothing to judge by; asked again at the next opening
        earlier = set(order[: order.index(before)])
        done: bool | None = None
        cursor: Any = None
        try:
            # Newest first: the reverted turn itself (not carried out) or a
            # turn the archive has before it (carried out) settles it; turns
            # the archive never saw (run without this state) are passed over.
            for _ in range(SETTLE_PAGES):
                listed = await self.proxy.request(
                    "thread/turns/list",
                    {"threadId": session.thread_id, "sortDirection": "desc", "limit": 20, "cursor": cursor},
                    timeout=self.options.engine_deadline,
                )
                data = listed.get("data") if isinstance(listed, dict) else None
                for turn in data if isinstance(data, list) else []:
                    tid = turn.get("id") if isinstance(turn, dict) else None
                    if tid == before:
                        done = False
                    elif tid in earlier:
                        done = True
                    if done is not None:
                        break
                cursor = listed.get("nextCursor") if isinstance(listed, dict) else None
                if done is not None or not cursor:
                    break
        except (RpcError, trio.TooSlowError) as exc:
            log.warning("cannot ask Codex whether an interrupted client revert happened", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
            return  # asked again at the next opening
        if done is None:
            done = not cursor  # the whole list, and the turn is not in it
        if not done:
            await trio.to_thread.run_sync(archive.revert_refused, before)
            return
        log.warning("following a client revert Codex carried out before a restart", extra={"fields": {"threadId": session.thread_id}})
        await trio.to_thread.run_sync(archive.begin_forget, before, False, in_flight)
        await self.follow(session, archive, Unfollowed(before, False, frozenset(in_flight), None))

