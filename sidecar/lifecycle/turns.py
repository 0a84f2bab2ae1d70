"""A turn's start: ``turn/start`` is held while the engine assembles, the
plan for the turn is made (:mod:`sidecar.session.planner`) and carried out
(a rebuild through :mod:`sidecar.rebuild` when it says so), and the
projection goes into the request; any failure forwards the original."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import trio

from engines import AgentMessage, AssembleParams
from protocol import parse, rewrite

from ..projection import ProjectionError, already_projected, char_budget_for_tokens, input_text_chars, project_turn_input, user_request
from ..rebuild import Rebuilder
from ..rebuild.fresh import Spares
from ..relay import HANDLED, Decision, Message, PendingRequest, Proxy
from ..session.options import LifecycleOptions
from ..session.planner import Slack, ThreadHoldings, fingerprints, message_chars, plan_turn
from ..session.state import RequestParams, ThreadSession, TurnState
from ..store.archive import TurnArchive, archive_path
from .calls import EngineCalls
from .reverts import ClientReverts
from .sessions import Sessions

log = logging.getLogger("codex_sidecar.lifecycle")

INSPECT_MESSAGES = 64
"""Assembled messages an inspection record lists (the newest)."""


class Turns:
    def __init__(
        self,
        proxy: Proxy,
        sessions: dict[str, ThreadSession],
        state_dir: Path,
        requests: RequestParams,
        options: LifecycleOptions,
        calls: EngineCalls,
        sessions_job: Sessions,
        reverts: ClientReverts,
        rebuilder: Rebuilder,
        spares: Spares,
    ) -> None:
        self.proxy = proxy
        self.sessions = sessions
        self.state_dir = state_dir
        self.requests = requests
        self.options = options
        self.calls = calls
        self.sessions_job = sessions_job
        self.reverts = reverts
        self.rebuilder = rebuilder
        self.spares = spares

    def on_turn_start(self, msg: Message) -> Decision:
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        self.spares.remember_sticky(params)
        session = self.sessions.get(params["threadId"])
        if session is None:
            try:
                session = self.sessions_job.session(params["threadId"])
            except ValueError:
                return None
            self.proxy.spawn(self.sessions_job.open, session, "turn/start", {}, {})
        # While this turn/start is held, the client's later requests on the
        # thread (turn/interrupt, thread/revert, thread/read, ...) wait behind
        # it. From now when the thread is idle; after the running turn ends
        # otherwise, so that an interrupt of that turn is not stuck behind this.
        current = session.current
        if not session.busy or (current is not None and current.turn_id in session.completed_turns):
            self.proxy.gate(session.thread_id, id(msg))  # idle, or only finalising the last turn
        self.proxy.spawn(self._prepare_turn, session, msg, params)
        return HANDLED

    async def _prepare_turn(self, session: ThreadSession, msg: Message, params: dict[str, Any]) -> None:
        try:
            await self._hold_turn_start(session, msg, params)
        finally:
            self.proxy.ungate(session.thread_id, id(msg))

    async def _hold_turn_start(self, session: ThreadSession, msg: Message, params: dict[str, Any]) -> None:
        line = msg.line
        state = TurnState(client_id=msg.id, original_input=params.get("input") if isinstance(params.get("input"), list) else None)
        await session.ready.wait()
        with trio.move_on_after(self.options.previous_turn_wait) as waited:
            await session.slot.acquire()
        if waited.cancelled_caught:
            # The previous turn never finished (lost turn/completed): take over its slot.
            log.warning("previous turn never finished; starting the next one anyway", extra={"fields": {"threadId": session.thread_id}})
        session.current = state
        started = trio.current_time()
        self.proxy.gate(session.thread_id, id(msg))
        try:
            if session.reverts_unanswered:
                with trio.move_on_after(self.options.previous_turn_wait):
                    await session.reverts_answered.wait()
            if session.unfollowed is not None:
                # A client revert not followed yet (this turn/start was queued
                # before it, or the mirror failed to follow): before this turn
                # assembles, and is mirrored after the reverted turns.
                await self.reverts.follow(session, TurnArchive(archive_path(self.state_dir, session.thread_id)), session.unfollowed)
            line = await self._assemble_and_project(session, state, params, msg.line)
            if state.switched:
                line = self.spares.with_sticky(session, line)
        except Exception as exc:  # fail open, whatever happened
            state.fallback_reason = type(exc).__name__
            log.warning(
                "context engine assembly failed; forwarding the original request",
                extra={"fields": self.calls.fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            line = msg.line
        state.hold_ms = round((trio.current_time() - started) * 1000, 2)
        log.debug("turn/start released", extra={"fields": self.calls.fields(session, holdMs=state.hold_ms, waitedMs=round((started - state.received) * 1000, 2))})
        session.stats["lastTurn"] = {
            "holdMs": state.hold_ms,
            "projected": state.projected,
            "assembledMessageCount": state.assembled_count,
            "estimatedTokens": state.estimated_tokens,
            "fallback": state.fallback_reason,
        }
        if not self.proxy.forward_client_request(Message(parse(line), line)):
            session.end_turn(state)

    async def _assemble_and_project(self, session: ThreadSession, state: TurnState, params: dict[str, Any], line: bytes) -> bytes:
        items = state.original_input or []
        if session.mirror is None:
            state.fallback_reason = "no-mirror"
            return line
        history = session.mirror.cached_messages()  # the file as the last turn left it: no worker thread
        if history is None:
            history = await trio.to_thread.run_sync(session.mirror.messages)
        state.history = history
        state.pre_prompt_count = len(history)
        if already_projected(items):
            state.fallback_reason = "already-projected"
            if not session.warned_double_projection:
                session.warned_double_projection = True
                log.warning(
                    "turn input already carries OpenClaw assembled context: OpenClaw's own context engine "
                    "projected it; not projecting again (set plugins.slots.contextEngine to \"legacy\" "
                    "in OpenClaw's config, or remove it, when using the sidecar)",
                    extra={"fields": self.calls.fields(session)},
                )
            return line
        if session.had_history and not session.bootstrapped:
            await self.calls.bootstrap(session)
        runtime = self.calls.runtime(session, params)
        budget = self.calls.budget(session)
        # The request itself: OpenClaw's runtime-context wrapper is context, not the prompt.
        prompt = "\n".join(
            user_request(i["text"]) for i in items if isinstance(i, dict) and i.get("type") == "text" and isinstance(i.get("text"), str)
        )
        try:
            result = await self.calls.call(
                self.calls.engine.assemble(
                    AssembleParams(
                        session_id=session.thread_id,
                        session_key=session.session_key,
                        messages=history,
                        token_budget=budget,
                        available_tools=session.tools,
                        citations_mode=self.options.citations_mode,
                        model=params.get("model") if isinstance(params.get("model"), str) else session.model,
                        prompt=prompt,
                        runtime_context=runtime,
                    )
                ),
            )
        except trio.TooSlowError:
            state.fallback_reason = "assemble-deadline"
            log.warning("context engine assemble exceeded its deadline; forwarding the original request", extra={"fields": self.calls.fields(session)})
            return line
        except Exception as exc:
            state.fallback_reason = "assemble-error"
            log.warning(
                "context engine assemble failed; forwarding the original request",
                extra={"fields": self.calls.fields(session, error=type(exc).__name__)},
                exc_info=True,
            )
            return line
        state.assembled_count = len(result.messages)
        state.estimated_tokens = result.estimated_tokens
        # The newest only: an inspection record costs the same late as early.
        state.assembled_roles = [[m.role, message_chars(m)] for m in result.messages[-INSPECT_MESSAGES:]]
        mode, epoch = self._mode_for(result)
        state.mode, state.epoch = mode, epoch
        messages = result.messages
        placement: Literal["input", "additional_context"] = "input"
        if mode in ("delta", "epoch"):
            planned = await self._plan(session, state, result, history, mode, epoch)
            if planned is None:
                return line
            messages, placement = planned, "additional_context"
            if state.rebuilt:
                session.addition_sent = None  # the revert took the turn that carried it
        else:
            session.force_rebuild = True  # a per-turn projection sits in history untracked
        addition = result.system_prompt_addition or None
        if addition is not None and addition.strip() == (session.addition_sent or "").strip():
            addition = None  # already in the thread's history, unchanged
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
            if state.rebuilt:
                state.held_plan = []  # reverted, and nothing projected after all
            state.fallback_reason = f"projection-{exc.reason}"
            log.warning("projection failed; forwarding the original request", extra={"fields": self.calls.fields(session, reason=exc.reason)})
            return line
        state.rendered, state.dropped = projection.messages_rendered, projection.messages_dropped
        state.context_chars = len(projection.text or "")
        state.original_chars = input_text_chars(items)
        # What this turn adds to the model's input, wherever it travels: the
        # input text, plus the context block and addition in additionalContext.
        state.sent_chars = projection.input_text_chars + len(addition or "")
        if placement == "additional_context":
            state.sent_chars += len(projection.text or "")
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
        if not projection.changed:
            return line
        state.projected = True
        if projection.text:
            state.channels.append("turn/start.input" if placement == "input" else "turn/start.additionalContext[openclaw_context]")
        if addition is not None:
            state.channels.append("turn/start.additionalContext[openclaw_system_prompt_addition]")
            state.addition_pending = result.system_prompt_addition  # held once Codex accepts the turn
        return rewrite(line, params=projection.apply(params))

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

    async def _plan(
        self, session: ThreadSession, state: TurnState, result: Any, history: list[AgentMessage], mode: str, epoch: str | None
    ) -> list[AgentMessage] | None:
        """What to project so that the model sees the engine's assembly
        (delta and epoch modes): the planner decides, this carries it out.
        Returns None to forward the original request (no rebuild possible)."""
        fps = fingerprints(session.sizes, result.messages, session.fingerprints)
        held = session.held if session.held is not None else fingerprints(session.sizes, history, session.fingerprints)
        if result.context_projection is not None and getattr(result.context_projection, "epoch", None) is not None:
            self.spares.engine_rebuilds = True  # it manages projection epochs: rebuilds will come
        plan = plan_turn(
            ThreadHoldings(
                held=held,
                sizes=session.sizes,
                force_rebuild=session.force_rebuild,
                projected_epoch=session.projected_epoch,
                has_turns=bool(session.turns_since_rebuild),
            ),
            fps,
            mode="epoch" if mode == "epoch" else "delta",
            epoch=epoch,
            estimated_tokens=result.estimated_tokens,
            history_empty=not history,
            slack=Slack(self.options.stale_slack, self.options.stale_floor_chars, self.calls.budget(session)),
        )
        state.held_plan = list(plan.held_after)
        state.epoch_pending = plan.epoch_pending
        if plan.action == "tail":
            state.stale = plan.stale
            if plan.drops_content:
                self.spares.engine_rebuilds = True  # it drops content: a rebuild will come
            return result.messages[plan.tail_from :]
        if plan.action == "nothing":
            return []
        if not await self.rebuilder.rebuild(session):
            state.held_plan, state.epoch_pending = None, None
            state.fallback_reason = "rebuild-unavailable"
            return None
        state.rebuilt = True
        session.rebuilds += 1
        self.spares.engine_rebuilds = True
        session.force_rebuild = False
        log.info("model-visible history rebuilt", extra={"fields": self.calls.fields(session, mode=mode, rebuilds=session.rebuilds, assembledMessageCount=len(fps))})
        return result.messages

    def on_turn_start_response(self, msg: Message, pending: PendingRequest) -> Decision:
        self.requests.pop(pending.client_id)
        # The request carries its thread (on_turn_start read its params): one
        # look-up, not a scan of every session.
        session = self.sessions.get(pending.thread_id) if pending.thread_id is not None else None
        state = session.current if session is not None else None
        if session is None or state is None or state.client_id != pending.client_id or state.turn_id is not None:
            return None
        result = msg.result()
        turn = result.get("turn") if isinstance(result, dict) else None
        if isinstance(turn, dict) and isinstance(turn.get("id"), str):
            state.turn_id = turn["id"]
            session.turns[turn["id"]] = state
            self.spares.confirm(session)
            if state.addition_pending is not None:
                session.addition_sent = state.addition_pending
            if state.epoch_pending is not None:
                session.projected_epoch = state.epoch_pending
        else:  # refused: no turn will complete, the thread is free again
            if state.rebuilt:
                # The revert went through; the projection did not land.
                session.held, session.turns_since_rebuild = [], []
                session.projected_epoch = None
            session.end_turn(state)
        return None

