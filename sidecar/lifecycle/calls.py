"""Calls into the engine: deadlines, fail-open, runtime context, bootstrap and maintenance."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

import trio

from engines import BootstrapParams, MaintainParams, RuntimeContext, optional_method
from protocol.codex import callable_tool_names

from ..host.contain import contained, raise_contained
from ..relay import Message, Slot
from ..session.options import LifecycleOptions
from ..session.state import BootstrapFailed, Bootstrapped, Learned, LearnedEvent, LearnedMachine, MaintainedOnOpening, ThreadSession, log_fields, token_budget
from ..thread.session_events import LearnedRead, Reported
from ..thread.state import handle
from .learned import LearnedFacts

log = logging.getLogger("codex_sidecar.lifecycle")

GIVEN_TOOLS = Slot[frozenset[str]]("calls.given_tools")
"""A client's thread/start's own tool names, read before the engine's tools join them."""

T = TypeVar("T")


class EngineCalls:
    def __init__(self, engine: Any, options: LifecycleOptions, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.engine = engine
        self.options = options
        self.learned = LearnedFacts(state_dir)
        """Each thread's learned facts (window, client tools, bootstrap),
        journaled by session (``sidecar.session.state.LearnedMachine``)."""
        info = engine.info if engine is not None else None
        self.engine_id: str = info.id if info is not None else "legacy"
        self.owns_compaction: bool = bool(getattr(info, "owns_compaction", False))
        self.background_maintenance: bool = getattr(info, "turn_maintenance_mode", "foreground") == "background"

    async def call(self, awaitable: Awaitable[T]) -> T:
        """One engine call under the deadline (``trio.TooSlowError`` past it).

        Whatever the engine raises comes out as an ``Exception`` (a
        ``SystemExit`` too: ``sidecar.host.contain``), so every caller's
        ``except Exception`` fails open; a cancellation passes. (The
        engine is awaited here, not through ``contained``: an answer costs
        no second frame.)"""
        with trio.fail_after(self.options.engine_deadline):
            try:
                return await awaitable
            except Exception:
                raise
            except BaseException as exc:
                raise_contained(exc)

    # ------------------------------------------------------ learned facts

    def machine(self, session: ThreadSession) -> LearnedMachine:
        """The thread's learned facts, as the session holds them: read from
        the session's journal the first time the thread is used in this
        process, and again when its session becomes known (its key changes);
        in between a turn reads them without touching the journal."""
        key = self.session_key(session)
        if session.learned is None or session.learned_key != key:
            handle(session, LearnedRead(self.learned.machine(session.thread_id, key), key))
        assert session.learned is not None
        return session.learned

    def facts(self, session: ThreadSession) -> Learned:
        """What the sidecar learned of the thread, in this process or an earlier one."""
        return self.machine(session).state

    def learn(self, session: ThreadSession, event: LearnedEvent) -> Learned:
        """The one way the learned facts change: journaled before they are
        relied on. An event that changes nothing writes nothing."""
        machine = self.machine(session)
        actions = machine.handle(event)
        if actions:
            self.learned.journal(session.thread_id, self.session_key(session), actions)
        return machine.state

    @staticmethod
    def session_key(session: ThreadSession) -> str:
        """The key the learned facts are journaled under: the engine's
        session key (the thread's, by default)."""
        return session.session_key

    def tools(self, session: ThreadSession) -> frozenset[str]:
        """``available_tools``: the client's own tools the thread was given."""
        return self.facts(session).tools or frozenset()

    def note_client_tools(self, msg: Message) -> None:
        """A client's ``thread/start``, before the engine's tools join it:
        its own tool names, kept on the request for its answer (:data:`GIVEN_TOOLS`)."""
        params = msg.params()
        tools = params.get("dynamicTools") if isinstance(params, dict) else None
        if isinstance(tools, list):
            msg.note(GIVEN_TOOLS, callable_tool_names(tools))

    def budget(self, session: ThreadSession) -> int:
        """The engine's token budget: ``token_budget`` when set, else the
        window minus ``token_reserve`` (the window as learned, else the default)."""
        return token_budget(self.facts(session).window, explicit=self.options.token_budget, reserve=self.options.token_reserve)

    def runtime(self, session: ThreadSession, params: dict[str, Any]) -> RuntimeContext:
        return self.assemble_inputs(session, params)[0]

    def assemble_inputs(self, session: ThreadSession, params: dict[str, Any]) -> tuple[RuntimeContext, int, frozenset[str]]:
        """What an ``assemble`` is given besides the messages: the runtime
        context, the token budget and the client's own tools, from one read
        of the learned facts."""
        facts = self.facts(session)
        budget = token_budget(facts.window, explicit=self.options.token_budget, reserve=self.options.token_reserve)
        runtime = RuntimeContext(
            cwd=params.get("cwd") if isinstance(params.get("cwd"), str) else session.cwd,
            model=params.get("model") if isinstance(params.get("model"), str) else session.model,
            token_budget=budget,
            current_token_count=session.current_token_count,
            context_window=facts.window,
            last_usage=session.last_usage,
            prompt_cache=session.prompt_cache,
        )
        return runtime, budget, facts.tools or frozenset()

    def fields(self, session: ThreadSession, **more: Any) -> dict[str, Any]:
        return log_fields(session, self.engine_id, **more)

    async def open_engine_session(self, session: ThreadSession) -> None:
        """Before a turn assembles: the engine's session bootstrapped, or
        maintained, as the learned facts say it must be on this opening."""
        machine = self.machine(session)
        opening = machine.opening_step(session.had_history)
        if opening == "bootstrap":
            await self.bootstrap(session)
        elif opening == "maintain":
            self.learn(session, MaintainedOnOpening())
            await self.maintain(session, "bootstrap")
        elif not session.had_history and not machine.state.bootstrapped:
            # The engine follows this session from its first turn: nothing to bootstrap, now or later.
            self.learn(session, Bootstrapped())

    async def bootstrap(self, session: ThreadSession) -> None:
        """Bootstrap the engine's session once: done is journaled, so no
        later process runs it again; a failure is tried again by the next one."""
        bootstrap = optional_method(self.engine, "bootstrap")
        runtime = self.runtime(session, {})
        done: LearnedEvent = Bootstrapped()
        if bootstrap is not None:
            log.info("codex context engine bootstrap started", extra={"fields": self.fields(session)})
            try:
                await self.call(
                    bootstrap(BootstrapParams(session_id=session.session_id, session_key=session.session_key, session_file=str(session.path), runtime_context=runtime)),
                )
                log.info("codex context engine bootstrap completed", extra={"fields": self.fields(session)})
            except Exception as exc:
                done = BootstrapFailed()
                log.warning("codex context engine bootstrap failed", extra={"fields": self.fields(session, error=type(exc).__name__)})
        self.learn(session, done)
        await self.maintain(session, "bootstrap")

    async def maintain(self, session: ThreadSession, reason: Literal["bootstrap", "turn", "manual"]) -> bool:
        maintain = optional_method(self.engine, "maintain")
        if maintain is None:
            return False
        try:
            await self.call(
                maintain(MaintainParams(session_id=session.session_id, session_key=session.session_key, session_file=str(session.path), reason=reason, runtime_context=self.runtime(session, {}))),
            )
            handle(session, Reported(f"lastMaintain{reason.title()}", "ok"))
            return True
        except Exception as exc:
            handle(session, Reported(f"lastMaintain{reason.title()}", type(exc).__name__))
            log.warning("codex context engine maintenance failed", extra={"fields": self.fields(session, reason=reason, error=type(exc).__name__)})
            return False

    async def dispose(self) -> None:
        """Give the engine its ``dispose`` (if any) when the sidecar stops cleanly.

        Best effort, under the deadline: OpenClaw usually SIGKILLs, so an
        engine must never depend on it.
        """
        dispose = optional_method(self.engine, "dispose") if self.engine is not None else None
        if dispose is None:
            return
        try:
            with trio.move_on_after(self.options.engine_deadline):
                await contained(dispose())
        except Exception as exc:
            log.warning("context engine dispose failed", extra={"fields": {"engineId": self.engine_id, "error": type(exc).__name__}})
