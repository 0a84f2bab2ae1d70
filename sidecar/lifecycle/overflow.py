"""A turn that overflowed Codex's context window, with an engine that owns
compaction: the engine makes room and the turn is retried once, on a
rebuilt thread, looking to the client like the one turn it started.

The rules are :mod:`sidecar.session.overflow`; this job carries them out.
Installed only with an engine that owns compaction (the method table's
``COMPACTION`` part): with any other engine, or none, Codex's error reaches
the client as it is.

The first attempt's ``error`` and ``turn/completed`` are withheld (from the
client and from the finalizer) while the engine compacts and the turn is
projected again; the thread is gated meanwhile. Then either

* the retry goes to Codex (the sidecar's own ``turn/start``, the client's
  params projected again with ``force_rebuild``, so the thread holds only the
  engine's smaller assembly): the first attempt is never mirrored nor handed
  to ``after_turn``; the retry's notifications reach the client under the
  first attempt's turn id (its ``turn/started`` and its copy of the client's
  input dropped: the client has them), the client's ``turn/interrupt`` and
  ``turn/steer`` naming that id reach the retry; or
* anything fails (the compaction raised, timed out or compacted nothing, no
  smaller projection, Codex refused the retry): the withheld frames go on as
  Codex sent them, to the finalizer and the client (fail open).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from protocol.codex import CodexDecodeError, TurnCompletedNotification

from ..relay import HANDLED, Decision, Message, PendingRequest, RpcError
from ..session.context import LifecycleContext
from ..session.overflow import TURN_CLIENT_REQUESTS, Verdict, after_compaction, client_sees, overflowed, verdict
from ..session.state import ThreadSession, TurnState
from ..thread.session_events import Reported, RetryAbandoned, RetryAccepted, RetryForwarded, RetryStarted
from ..thread.state import handle
from .calls import EngineCalls
from .compaction import Compaction
from .finalize import Finalizer
from .turns import Turns

log = logging.getLogger("codex_sidecar.lifecycle")


class Retry(msgspec.Struct):
    """One turn being retried (at most one a thread: the thread's turn slot)."""

    session: ThreadSession
    first: TurnState
    """The client's attempt, which overflowed."""
    withheld: list[Message]
    """Codex's ``error`` and ``turn/completed`` of the first attempt, in order."""
    spawned: bool = False
    state: TurnState | None = None
    """The retry's turn, once it is projected."""
    turn_id: str | None = None
    """The retry's turn id, once Codex took it."""
    abandoned: bool = False
    first_input: str | None = None
    """The retry's own copy of the client's input (its first ``userMessage`` item)."""


class Overflow:
    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, turns: Turns, finalizer: Finalizer, compaction: Compaction) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.options = ctx.options
        self.calls = calls
        self.turns = turns
        self.finalizer = finalizer
        self.compaction = compaction
        self.retries: dict[str, Retry] = {}
        """By client thread id: the turns withheld or being retried."""
        self.renamed: dict[bytes, tuple[bytes, Retry]] = {}
        """A retry's turn id -> the first attempt's, while it runs: as JSON
        strings (quoted), so that no longer id that starts with it matches."""

    # ------------------------------------------------ the first attempt

    def _verdict(self, thread_id: Any, turn_id: Any) -> tuple[Verdict, ThreadSession | None, TurnState | None]:
        session = self.sessions.get(thread_id) if isinstance(thread_id, str) else None
        state = session.current if session is not None else None
        held = state is not None and isinstance(turn_id, str) and state.turn_id == turn_id and state.client_id is not None and state.params is not None
        types = [str(i.get("type")) for i in state.items.values()] if state is not None and held else []
        found = verdict(owns_compaction=self.calls.owns_compaction, held=held, attempt=state.attempt if state is not None else 0, item_types=types)
        return found, session, state

    def on_error(self, msg: Message) -> Decision:
        """``error``: the first attempt's overflow is withheld when it will be retried."""
        params = msg.params()
        if not isinstance(params, dict) or params.get("willRetry") is not False or not overflowed(params.get("error")):
            return None
        thread_id = params.get("threadId")
        if thread_id in self.retries:
            return None  # the retry's own (renamed on its way), or a repeat
        found, session, state = self._verdict(thread_id, params.get("turnId"))
        if not found.retry or session is None or state is None:
            return None  # decided (and logged) at its turn/completed
        self.retries[session.thread_id] = Retry(session, state, [msg])
        return HANDLED

    def on_turn_completed(self, msg: Message) -> Decision:
        """``turn/completed``: the first attempt's, failed on an overflow, is
        withheld and the retry begins; the retry's passes (renamed at the end)."""
        try:
            note = msg.typed(TurnCompletedNotification)
        except CodexDecodeError:
            return None
        turn = note.turn
        if not isinstance(turn, dict):
            return None
        retry = self.retries.get(note.thread_id)
        if retry is not None:
            if retry.first.turn_id == turn.get("id") and not retry.spawned:
                retry.withheld.append(msg)
                retry.spawned = True
                self.proxy.spawn(self._retry, retry)
                return HANDLED
            if retry.turn_id == turn.get("id") and overflowed(turn.get("error")):
                handle(retry.session, Reported("lastOverflow", {"turnId": retry.first.turn_id, "retried": True, "retryTurnId": retry.turn_id, "reason": "retry-overflowed"}))
                log.warning(
                    "the retried turn overflowed the context window too; Codex's error goes to the client",
                    extra={"fields": self.calls.fields(retry.session, turnId=retry.first.turn_id, retryTurnId=retry.turn_id)},
                )
            return None
        if turn.get("status") != "failed" or not overflowed(turn.get("error")):
            return None
        found, session, state = self._verdict(note.thread_id, turn.get("id"))
        if session is None:
            return None
        handle(session, Reported("lastOverflow", {"turnId": turn.get("id"), "retried": False, "reason": found.reason}))
        if not found.retry or state is None:
            log.info(
                "turn overflowed the context window; not retried, Codex's error goes to the client",
                extra={"fields": self.calls.fields(session, turnId=turn.get("id"), reason=found.reason)},
            )
            return None
        retry = self.retries[session.thread_id] = Retry(session, state, [msg], spawned=True)
        self.proxy.spawn(self._retry, retry)
        return HANDLED

    # ------------------------------------------------------ the retry

    async def _retry(self, retry: Retry) -> None:
        session = retry.session
        holder = object()
        self.proxy.router.gate(session.thread_id, holder)  # the client's next requests wait for the retry
        reason: str = "retry"
        try:
            reason = await self._make_room_and_retry(retry)
        except Exception as exc:  # fail open, whatever happened
            reason = f"error: {type(exc).__name__}"
            log.warning("context overflow retry failed", extra={"fields": self.calls.fields(session, error=type(exc).__name__)}, exc_info=True)
        finally:
            if reason != "retry":
                self._abandon(retry, reason)
            self.proxy.router.ungate(session.thread_id, holder)

    async def _make_room_and_retry(self, retry: Retry) -> str:
        session, first = retry.session, retry.first
        log.info("turn overflowed the context window; the engine compacts and the turn is retried once",
                 extra={"fields": self.calls.fields(session, turnId=first.turn_id)})
        result = await self.compaction.make_room(session)
        found = after_compaction(ok=result.ok, compacted=result.compacted)
        if not found.retry:
            return found.reason
        assert first.params is not None  # the verdict needs them
        state = retry.state = first.retry()
        handle(session, RetryStarted(first, state))
        edited = await self.turns.project_retry(session, state, first.params, first.params.get("model") if isinstance(first.params.get("model"), str) else None)
        if edited is None or not (state.projected or state.rebuilt):
            return "no-smaller-projection"
        handle(session, RetryForwarded(first, state))
        try:
            await self.proxy.request(
                "turn/start", edited, timeout=self.options.engine_deadline, on_result=lambda answer: self._accepted(retry, answer)
            )
        except RpcError as exc:
            return f"refused: {exc.message[:80]}"
        return "retry" if retry.turn_id is not None else "refused"

    def _accepted(self, retry: Retry, answer: Any) -> None:
        """Codex's answer to the retry's ``turn/start``, as soon as it is read
        (before the retry's notifications): they are renamed from now."""
        turn = answer.get("turn") if isinstance(answer, dict) else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        state, first = retry.state, retry.first
        if not isinstance(turn_id, str) or state is None or retry.abandoned or first.turn_id is None:
            return
        retry.turn_id = turn_id
        session = retry.session
        handle(session, RetryAccepted(first))  # never finalised: the retry is the turn
        self.turns.accepted(session, state, turn_id)
        self.renamed[_quoted(turn_id)] = (_quoted(first.turn_id), retry)
        # Here, not after the request returns: the retry's turn/completed may come first.
        handle(session, Reported("lastOverflow", {"turnId": first.turn_id, "retried": True, "retryTurnId": turn_id, "reason": "retry"}))
        log.info("turn retried after the engine made room", extra={"fields": self.calls.fields(session, turnId=first.turn_id, retryTurnId=turn_id)})

    def _abandon(self, retry: Retry, reason: str) -> None:
        """Fail open: the first attempt ends as Codex ended it, for the
        finalizer and the client."""
        retry.abandoned = True
        session, first, state = retry.session, retry.first, retry.state
        self.retries.pop(session.thread_id, None)
        handle(session, Reported("lastOverflow", {"turnId": first.turn_id, "retried": False, "reason": reason}))
        log.warning(
            "turn overflowed the context window and could not be retried; Codex's error goes to the client",
            extra={"fields": self.calls.fields(session, turnId=first.turn_id, reason=reason)},
        )
        handle(session, RetryAbandoned(first, state))
        for msg in retry.withheld:
            if msg.method == "turn/completed":
                self.finalizer.on_turn_completed(msg)
            self.proxy.router.send_to_client(msg.wire())

    # ------------------------------------------- what the client sees

    def as_client_sees(self, msg: Message) -> Decision:
        """Every frame naming a turn (last): a retry's show under the first
        attempt's id, its ``turn/started`` and its copy of the input dropped."""
        if not self.renamed:
            return None
        line = msg.line
        retry_id = next((k for k in self.renamed if k in line), None)
        if retry_id is None:
            return None
        first_id, retry = self.renamed[retry_id]
        params = msg.params() if msg.method in ("item/started", "item/completed") else None
        seen, retry.first_input = client_sees(msg.method, params.get("item") if isinstance(params, dict) else None, retry.first_input)
        if msg.method == "turn/completed":
            self.renamed.pop(retry_id, None)
            self.retries.pop(retry.session.thread_id, None)
        if seen == "drop":
            return HANDLED
        msg.set_params(_renamed(msg.params(), _unquoted(retry_id), _unquoted(first_id)))
        return None

    def on_turn_request(self, msg: Message) -> Decision:
        """``turn/interrupt``, ``turn/steer``: the first attempt's id means the retry."""
        if not self.renamed:
            return None
        params = msg.params()
        key = TURN_CLIENT_REQUESTS.get(msg.method)
        thread_id = params.get("threadId") if isinstance(params, dict) else None
        retry = self.retries.get(thread_id) if isinstance(thread_id, str) else None
        if key is None or retry is None or retry.turn_id is None or params.get(key) != retry.first.turn_id:
            return None
        msg.set_params({**params, key: retry.turn_id})
        return None

    def on_turn_start_response(self, msg: Message, pending: PendingRequest) -> Decision:
        """A ``turn/start`` that joined the retry is answered with the first attempt's id."""
        if not self.renamed:
            return None
        line = msg.line
        for retry_id, (first_id, _) in self.renamed.items():
            if retry_id in line:
                msg.set_result(_renamed(msg.result(), _unquoted(retry_id), _unquoted(first_id)))
                return None
        return None


def _unquoted(quoted: bytes) -> str:
    return quoted[1:-1].decode()


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` (decoded JSON) with every string ``old`` (a value or a key) as ``new``."""
    if type(value) is str:
        return new if value == old else value
    if type(value) is dict:
        return {(new if k == old else k): _renamed(v, old, new) for k, v in value.items()}
    if type(value) is list:
        return [_renamed(v, old, new) for v in value]
    return value


def _quoted(turn_id: str) -> bytes:
    """A turn id as a JSON string on the wire (Codex's ids need no escapes)."""
    return b'"' + turn_id.encode() + b'"'
