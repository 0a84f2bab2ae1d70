"""A turn's start: ``turn/start`` is held while the engine assembles, the
plan for the turn is made (:mod:`sidecar.thread.planner`) and carried out
(a rebuild through :mod:`sidecar.rebuild` when it says so), and the
projection goes into the request; any failure forwards the original."""

from __future__ import annotations

import logging
from typing import Any, Literal

import trio

from engines import AssembleParams
from protocol.codex import CodexDecodeError, TurnStartParams, TurnStartResult

from ..history.archive import TurnArchive, archive_path
from ..projection import Projection, ProjectionError, already_projected, char_budget_for_tokens, input_text_chars, project_turn_input, request_text
from ..rebuild.fresh import Spares
from ..relay import HANDLED, Decision, Message, PendingRequest, Slot
from ..session import continuity
from ..session.context import LifecycleContext
from ..session.state import ThreadSession, TurnState, addition_digest
from ..thread.events import (
    ApplyProjection,
    Assemble,
    ConfirmSpare,
    ContextFound,
    ContinuityFound,
    ExpectRebuilds,
    ForwardFailed,
    ForwardOriginal,
    ForwardParams,
    Gate,
    HistoryRead,
    Hold,
    Join,
    JoinAnswered,
    Learn,
    OwnTurnStarted,
    ProjectFrom,
    ProjectionFailed,
    ProjectTail,
    ProjectWhole,
    Rebuild,
    RebuildUnavailable,
    Rebuilt,
    ThreadAction,
    ThreadIdle,
    TurnAccepted,
    TurnAnswered,
    TurnAssembled,
    TurnFellBack,
    TurnHeld,
    TurnOverInCodex,
    TurnProjected,
    TurnReleased,
    TurnRequested,
    WaitReverts,
    WarnDoubleProjection,
)
from ..thread.planner import Slack, message_chars
from ..thread.state import handle
from .calls import EngineCalls
from .context import HistoryMoves
from .reverts import ClientReverts
from .sessions import Identity, Sessions

log = logging.getLogger("codex_sidecar.lifecycle")

JOINED = Slot[ThreadSession]("turns.joined")
"""A turn/start that joined a running turn (sent to Codex unchanged): its thread's session."""

INSPECT_MESSAGES = 64
"""Assembled messages an inspection record lists (the newest)."""
INSPECT_TEXT_CHARS = 65_536
"""The most text an inspection record keeps of each part a turn sent (the
newest end is cut): ``codex-sidecar view`` shows it."""


class Turns:
    """A turn/start held, gated and forwarded, and Codex's answer to it; what
    the turn sends is :class:`TurnAssembly`'s."""

    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, spares: Spares, sessions_job: Sessions, assembly: TurnAssembly) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.options = ctx.options
        self.calls = calls
        self.sessions_job = sessions_job
        self.spares = spares
        self.assembly = assembly

    def on_turn_start(self, msg: Message) -> Decision:
        try:
            view = msg.typed(TurnStartParams)
        except CodexDecodeError:
            return None  # not a turn/start the sidecar understands: Codex answers it
        params = msg.params()
        session = self.sessions.get(view.thread_id)
        if session is None:
            try:
                session = self.sessions_job.session(view.thread_id)
            except ValueError:
                return None
            self.proxy.spawn(self.sessions_job.open, session, "turn/start", {}, {})
        for action in handle(session, TurnRequested()):
            match action:
                case Join():
                    return self._join(session, msg)
                case Gate():  # the client's later requests on the thread (turn/interrupt, thread/revert, ...) wait behind it
                    self.proxy.router.gate(session.thread_id, id(msg))
                case Hold(gated):
                    self.proxy.spawn(self._prepare_turn, session, msg, params, gated)
        return HANDLED

    def _join(self, session: ThreadSession, msg: Message) -> Decision:
        """A ``turn/start`` while Codex has a turn of this thread (running, or
        its ``turn/start`` sent and not answered yet): Codex makes the input
        part of that turn (the same turn id, a further ``userMessage`` item),
        as it does without the sidecar. That meaning is kept: the request goes
        to Codex at once, unchanged (no assemble, no projection, no gate). Its
        input is mirrored and ingested with the running turn, from the turn's
        own ``userMessage`` item (``translate_turn`` keeps the content of
        every ``userMessage`` after the first). A ``turn/start`` that comes
        while the thread's ``turn/start`` is still held (assembling) waits
        behind the gate and arrives here once that one is forwarded."""
        msg.note(JOINED, session)
        log.info("turn/start joins the running turn; forwarded unchanged", extra={"fields": self.calls.fields(session)})
        return None

    def on_thread_status(self, msg: Message) -> Decision:
        """``thread/status/changed``: a status other than active says no turn
        runs on the thread, so a turn Codex accepted that has not completed
        is over (``ThreadSession.codex_idle``): a ``turn/start`` from now is
        held and assembled, not sent as a join that Codex would make a turn
        of its own unassembled."""
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        status = params.get("status")
        if not isinstance(status, dict) or status.get("type") not in ("idle", "notLoaded", "systemError"):
            return None
        session = self.sessions.get(params["threadId"])
        if session is not None and TurnOverInCodex() in handle(session, ThreadIdle()):
            log.info("Codex says the thread is idle before its running turn completed; turn/starts no longer join it", extra={"fields": self.calls.fields(session)})
        return None

    async def _prepare_turn(self, session: ThreadSession, msg: Message, params: dict[str, Any], gated: bool) -> None:
        try:
            await self._hold_turn_start(session, msg, params, gated)
        finally:
            self.proxy.router.ungate(session.thread_id, id(msg))

    async def _hold_turn_start(self, session: ThreadSession, msg: Message, params: dict[str, Any], gated: bool) -> None:
        # The typed view (on_turn_start made it) vouches for the input's shape; OpenClaw's heartbeat and cron runs say so.
        state = TurnState(client_id=msg.env.id, original_input=params.get("input"), trigger=turn_trigger(params), received=trio.current_time(), params=params)
        if session.ready.is_set() and session.slot.value:  # a steady turn: on at once, no trip through the scheduler
            session.slot.acquire_nowait()
        else:
            await session.ready.wait()
            with trio.move_on_after(self.options.previous_turn_wait) as waited:
                await session.slot.acquire()
            if waited.cancelled_caught:
                # The previous turn never finished (lost turn/completed): take over its slot.
                log.warning("previous turn never finished; starting the next one anyway", extra={"fields": {"threadId": session.thread_id}})
        started = trio.current_time()
        edited: dict[str, Any] | None = None
        try:
            for action in handle(session, TurnHeld(state, gated)):
                match action:
                    case Gate():  # from now: the slot is this turn's
                        self.proxy.router.gate(session.thread_id, id(msg))
                    case WaitReverts():
                        with trio.move_on_after(self.options.previous_turn_wait):
                            await session.reverts_answered.wait()
                    case Assemble():
                        await self.assembly.follow_revert(session)
                        edited = await self.assembly.project(session, state, params, params.get("model") if isinstance(params.get("model"), str) else None)
        except Exception as exc:  # fail open, whatever happened
            handle(session, TurnFellBack(state, type(exc).__name__))
            log.warning(
                "context engine assembly failed; forwarding the original request",
                extra={"fields": self.calls.fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            edited = None
        # From now, a turn/start on the thread joins this turn.
        actions = handle(session, TurnReleased(state, edited, round((trio.current_time() - started) * 1000, 2)))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("turn/start released", extra={"fields": self.calls.fields(session, holdMs=state.hold_ms, waitedMs=round((started - state.received) * 1000, 2))})
        for action in actions:  # the client's own params (ForwardOriginal) or new ones
            if isinstance(action, ForwardParams):
                msg.set_params(action.params)  # encoded once, as the request leaves for Codex
            if not self.proxy.router.forward_client_request(msg):
                handle(session, ForwardFailed(state))

    async def project_retry(self, session: ThreadSession, state: TurnState, params: dict[str, Any], model: str | None) -> dict[str, Any] | None:
        """An overflowed turn's retry (:mod:`sidecar.lifecycle.overflow`): :meth:`TurnAssembly.project_retry`."""
        return await self.assembly.project_retry(session, state, params, model)

    def on_turn_start_response(self, msg: Message, pending: PendingRequest) -> Decision:
        if pending.thread_id is not None and not msg.env.error:
            # Codex took the turn/start: its settings stick for the thread's
            # later turns (a switch's first turn gets them again). Noted here,
            # off the request's path.
            self.spares.remember_sticky(pending.thread_id, pending.params)
        joined = pending.noted(JOINED)
        if joined is not None:
            self._joined(joined, msg)
            return None
        # The request carries its thread (on_turn_start read its params): one
        # look-up, not a scan of every session.
        session = self.sessions.get(pending.thread_id) if pending.thread_id is not None else None
        if session is not None:
            self._carry_out(session, handle(session, TurnAnswered(pending.client_id, _started_turn_id(msg), pending.fell_back)))
        return None

    def accepted(self, session: ThreadSession, state: TurnState, turn_id: str) -> None:
        """Codex took the turn's ``turn/start`` (the client's, or the
        sidecar's own retry of it): the turn has its id."""
        self._carry_out(session, handle(session, TurnAccepted(state, turn_id)))

    def _carry_out(self, session: ThreadSession, actions: list[ThreadAction]) -> None:
        for action in actions:
            match action:
                case ConfirmSpare():
                    self.spares.confirm(session)
                case Learn(event):
                    self.calls.learn(session, event)

    def _joined(self, session: ThreadSession, msg: Message) -> None:
        """Codex's answer to a joining ``turn/start``. Normally the running
        turn's id. Another id means Codex had ended (or refused) that turn
        before the join reached it and started a turn of its own: forwarded
        unassembled (the client's request, with Codex's meaning). The session
        then tracks it as its running turn when the slot is free, so that
        later ``turn/start``s join it too, and it is mirrored with its input."""
        # The slot is free, or held by a turn whose turn/completed never came
        # (Codex ended it: the new turn takes the slot over, so that once it
        # completes the next turn/start is held and assembled again), or by
        # one finalising (the new turn is finalised after it, in order).
        for action in handle(session, JoinAnswered(_started_turn_id(msg))):
            if isinstance(action, OwnTurnStarted):
                log.info(
                    "a joining turn/start started a turn of its own in Codex (the running turn had ended)",
                    extra={"fields": self.calls.fields(session, turnId=action.turn_id, endedTurnId=action.ended)},
                )


class TurnAssembly:
    """What a held turn/start sends: the thread brought to where the turn
    assembles (a client revert followed, a new thread's session found), the
    engine's assembly planned and carried out (a rebuild when the plan says
    so) and projected into the params."""

    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, moves: HistoryMoves, identity: Identity, reverts: ClientReverts) -> None:
        self.state_dir = ctx.state_dir
        self.options = ctx.options
        self.calls = calls
        self.identity = identity
        self.reverts = reverts
        self.rebuilder = moves.rebuilder
        self.spares = moves.spares

    async def follow_revert(self, session: ThreadSession) -> None:
        """A client revert not followed yet (this turn/start was queued
        before it, or the mirror failed to follow): before this turn
        assembles, and is mirrored after the reverted turns."""
        if session.unfollowed is not None:
            await self.reverts.follow(session, TurnArchive(archive_path(self.state_dir, session.thread_id)), session.unfollowed)

    async def project_retry(self, session: ThreadSession, state: TurnState, params: dict[str, Any], model: str | None) -> dict[str, Any] | None:
        """An overflowed turn's retry: in ``per_turn`` mode the thread is
        rebuilt first (None: it could not be, nothing smaller to send), then
        :meth:`project`."""
        if self.options.projection_mode == "per_turn" and not await self.rebuilder.rebuild(session):
            return None
        return await self.project(session, state, params, model)

    async def project(self, session: ThreadSession, state: TurnState, params: dict[str, Any], model: str | None) -> dict[str, Any] | None:
        """The turn/start params with the engine's context projected, and a
        switch's sticky settings (None: forward the client's request as it
        is). A retry of a turn that overflowed comes here again
        (:mod:`sidecar.lifecycle.overflow`); ``state`` was made with ``params``
        (the projection starts from them, a retry from its own)."""
        edited = await self._assemble_and_project(session, state, params, model)
        if state.switched:
            base = edited if edited is not None else params
            sticky = self.spares.with_sticky(session, base)
            edited = sticky if sticky is not base else edited
        return edited

    async def _assemble_and_project(self, session: ThreadSession, state: TurnState, params: dict[str, Any], model: str | None) -> dict[str, Any] | None:
        """The turn/start params with the engine's context projected (None:
        forward the client's request as it is). ``params`` is not modified."""
        items = state.original_input or []
        if session.mirror is None:
            handle(session, TurnFellBack(state, "no-mirror"))
            return None
        stripped: list[Any] | None = None
        # A new thread's first turn may name its session (a continuity
        # projection) or begin a new one (OpenClaw's reset): before anything assembles.
        if session.fresh:
            await self.identity.first_turn(session, items)
        if already_projected(items):
            for action in handle(session, ContextFound(state, await self._openclaw_context(session, items))):
                match action:
                    case WarnDoubleProjection():
                        log.warning(
                            "turn input already carries OpenClaw assembled context on consecutive turns: OpenClaw's own "
                            "context engine projects every turn; not projecting again (set plugins.slots.contextEngine "
                            "to \"legacy\" in OpenClaw's config, or remove it, when using the sidecar)",
                            extra={"fields": self.calls.fields(session)},
                        )
                    case ForwardOriginal():
                        return None
            # OpenClaw's continuity: its transcript rendered once into a new
            # (or stale) thread.
            stripped = continuity.strip_block(items)
        history = session.mirror.cached_messages()  # the file as the last turn left it: no worker thread
        if history is None:
            history = await trio.to_thread.run_sync(session.mirror.messages)
        handle(session, HistoryRead(state, history))
        if state.openclaw_context == "continuity":
            for action in handle(session, ContinuityFound(state, params, stripped, history_empty=not history)):
                match action:
                    case ForwardOriginal():
                        log.info("OpenClaw's continuity projection passed as it is: the sidecar knows nothing of the session",
                                 extra={"fields": self.calls.fields(session, historyMessages=len(history))})
                        return None
                    case ProjectFrom(cut):  # a retry starts from here: no continuity to classify again
                        items, params = cut["input"], cut
                        log.info("OpenClaw's continuity projection replaced by the engine's assembly",
                                 extra={"fields": self.calls.fields(session, historyMessages=len(history))})
        await self.calls.open_engine_session(session)
        runtime, budget, tools = self.calls.assemble_inputs(session, params)
        # The request itself: OpenClaw's runtime-context wrapper is context, not the prompt.
        prompt = request_text(items)
        try:
            result = await self.calls.call(
                self.calls.engine.assemble(
                    AssembleParams(
                        session_id=session.session_id,
                        session_key=session.session_key,
                        messages=history,
                        token_budget=budget,
                        available_tools=tools,
                        citations_mode=self.options.citations_mode,
                        model=model or session.model,
                        prompt=prompt,
                        runtime_context=runtime,
                    )
                ),
            )
        except trio.TooSlowError:
            handle(session, TurnFellBack(state, "assemble-deadline"))
            log.warning("context engine assemble exceeded its deadline; forwarding the original request", extra={"fields": self.calls.fields(session)})
            return None
        except Exception as exc:
            handle(session, TurnFellBack(state, "assemble-error"))
            log.warning(
                "context engine assemble failed; forwarding the original request",
                extra={"fields": self.calls.fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            return None
        mode, epoch = self._mode_for(result)
        # The newest roles only: an inspection record costs the same late as early.
        roles = [[m.role, message_chars(m)] for m in result.messages[-INSPECT_MESSAGES:]]
        cp = result.context_projection
        assembled = TurnAssembled(state, result.messages, result.estimated_tokens, budget, roles, mode, epoch,
                                  engine_epochs=cp is not None and getattr(cp, "epoch", None) is not None, history=history,
                                  slack=Slack(self.options.stale_slack, self.options.stale_floor_chars, budget))
        messages = result.messages
        placement: Literal["input", "additional_context"] = "input"
        for action in handle(session, assembled):
            match action:
                case ExpectRebuilds():  # the engine manages epochs, or dropped held content: rebuilds will come
                    self.spares.engine_rebuilds = True
                case ProjectWhole():  # per_turn: into the input, trimmed to the budget
                    messages, placement = result.messages, "input"
                case ProjectTail(start):
                    messages, placement = result.messages[start:], "additional_context"
                case Rebuild():
                    if not await self._rebuild(session, state, mode, len(result.messages)):
                        return None
                    placement = "additional_context"
        addition = result.system_prompt_addition or None
        if addition is not None and addition_digest(addition) == self.calls.facts(session).addition:
            addition = None  # already in the thread's history, unchanged (sent by this process or an earlier one)
        try:
            projection = project_turn_input(
                messages,
                items,
                system_prompt_addition=addition,
                # per_turn trims to the budget as the spec says; delta and epoch
                # send the engine's assembly whole (the engine applied the
                # budget), or the ledger would claim messages the model never saw.
                char_budget=char_budget_for_tokens(budget) if placement == "input" else None,
                placement=placement,
            )
        except ProjectionError as exc:
            handle(session, ProjectionFailed(state, f"projection-{exc.reason}"))
            log.warning("projection failed; forwarding the original request", extra={"fields": self.calls.fields(session, reason=exc.reason)})
            return None
        # What this turn adds to the model's input, wherever it travels: the
        # input text, plus the context block and addition in additionalContext.
        sent = projection.input_text_chars + len(addition or "") + (len(projection.text or "") if placement == "additional_context" else 0)
        original, changed = input_text_chars(items), projection.changed
        log.info(
            "codex context engine assemble applied",
            extra={
                "fields": self.calls.fields(
                    session,
                    assembledMessageCount=len(result.messages),
                    estimatedTokens=result.estimated_tokens,
                    hasSystemPromptAddition=bool(result.system_prompt_addition),
                    renderedMessages=projection.messages_rendered,
                    droppedMessages=projection.messages_dropped,
                )
            },
        )
        projected = TurnProjected(state, projection.messages_rendered, projection.messages_dropped, len(projection.text or ""), original, sent,
                                  changed=changed, placement=placement, has_context=bool(projection.text), addition=addition,
                                  sent=sent_text(projection) if changed else None)
        if ApplyProjection() in handle(session, projected):
            return projection.apply(params)
        return None if stripped is None else params

    async def _openclaw_context(self, session: ThreadSession, items: list[Any]) -> continuity.OpenClawContext:
        """Whose assembled context a turn input carries (continuity.classify);
        on a resumed thread's first turn here, from whether it renders the
        thread's own newest turn (read from the transcript)."""
        renders_own = False
        if not session.fresh and session.turns_this_opening == 0 and session.mirror is not None:
            context = continuity.context_text(items) or ""
            mirror = session.mirror

            def own() -> bool:
                return continuity.renders_any(context, continuity.newest_turn_texts(mirror.entries(), session.thread_id))

            renders_own = await trio.to_thread.run_sync(own)
        return continuity.classify(fresh=session.fresh, renders_own_turn=renders_own, turns_this_opening=session.turns_this_opening)

    def _mode_for(self, result: Any) -> tuple[str, str | None]:
        """The projection mode for this turn, and the engine's epoch."""
        cp = result.context_projection
        epoch = cp.epoch if cp is not None else None
        mode = self.options.projection_mode
        if mode == "auto":
            if cp is not None and cp.mode == "thread_bootstrap":
                mode = "epoch"
            elif cp is not None and cp.mode == "per_turn":
                mode = "per_turn"
            else:
                mode = "delta"
        if mode == "epoch" and epoch is None:
            mode = "delta"  # no epoch to follow: project what the thread lacks
        return mode, epoch

    async def _rebuild(self, session: ThreadSession, state: TurnState, mode: str, count: int) -> bool:
        """The plan said rebuild: the thread goes back to its framing (False: it could not)."""
        if not await self.rebuilder.rebuild(session):
            handle(session, RebuildUnavailable(state))
            return False
        for action in handle(session, Rebuilt(state)):
            if isinstance(action, Learn):
                self.calls.learn(session, action.event)  # the revert took the turn that carried the addition
        self.spares.engine_rebuilds = True
        log.info("model-visible history rebuilt", extra={"fields": self.calls.fields(session, mode=mode, rebuilds=session.rebuilds, assembledMessageCount=count)})
        return True


def turn_trigger(params: dict[str, Any]) -> str | None:
    """``turn/start``'s ``turnTrigger`` (OpenClaw's heartbeat and cron runs say so), if a string."""
    trigger = params.get("turnTrigger")
    return trigger if isinstance(trigger, str) else None


def _started_turn_id(msg: Message) -> str | None:
    """The id of the turn Codex's ``turn/start`` answer started (None: refused)."""
    try:
        result = msg.result_as(TurnStartResult)
    except CodexDecodeError:
        return None
    return result.turn.id if result is not None else None


def sent_text(projection: Projection) -> dict[str, str]:
    """The text a projected ``turn/start`` carries, for its inspection
    record: the input's text items, and the context and addition sent in
    ``additionalContext``; each bounded by :data:`INSPECT_TEXT_CHARS`."""
    parts = {
        "input": "\n\n".join(i["text"] for i in projection.input if i.get("type") == "text" and isinstance(i.get("text"), str)),
        "additionalContext": "\n\n".join(v.get("value") or "" if isinstance(v, dict) else str(v) for v in (projection.additional_context or {}).values()),
    }
    return {k: v[:INSPECT_TEXT_CHARS] for k, v in parts.items() if v}
