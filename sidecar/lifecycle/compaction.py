"""Compaction: the engine's (when it owns compaction) first, Codex's native
compaction after it best-effort, both outcomes recorded in the mirror."""

from __future__ import annotations

import logging
from typing import Any

import trio

from engines import CompactParams, CompactResult
from protocol.codex import CodexDecodeError, ThreadCompactStartParams

from ..relay import HANDLED, Decision, Message, PendingRequest, Proxy, RpcError, Slot
from ..session.options import LifecycleOptions
from ..session.state import ThreadSession
from ..store.mirror import MirrorError, now_ms
from ..thread.session_events import NativeCompactionAnswered, NativeCompactionSent, Reported
from ..thread.state import handle
from .calls import EngineCalls

log = logging.getLogger("codex_sidecar.lifecycle")

ENGINE_COMPACTION_KEY = "codex-sidecar:{thread_id}:compaction:{n}"

NATIVE_AFTER_ENGINE = Slot[tuple[ThreadSession, CompactResult]]("compaction.native_after_engine")
"""A client ``thread/compact/start`` forwarded after the engine's compaction:
its session and the engine's result, recorded with Codex's answer."""


class Compaction:
    def __init__(self, proxy: Proxy, sessions: dict[str, ThreadSession], options: LifecycleOptions, calls: EngineCalls) -> None:
        self.proxy = proxy
        self.sessions = sessions
        self.options = options
        self.calls = calls

    def on_compact_start(self, msg: Message) -> Decision:
        if not self.calls.owns_compaction:
            return None  # native compaction, unchanged
        try:
            thread_id = msg.typed(ThreadCompactStartParams).thread_id
        except CodexDecodeError:
            return None  # no string threadId: not a thread the sidecar tracks; Codex answers it
        session = self.sessions.get(thread_id)
        if session is None:
            return None
        self.proxy.spawn(self._engine_compaction_then_native, session, msg)
        return HANDLED

    async def _engine_compaction_then_native(self, session: ThreadSession, msg: Message) -> None:
        result = await self._engine_compact(session)
        # Native compaction follows best-effort: the client's own request, so
        # the client gets Codex's own answer; its outcome is recorded by
        # on_compact_response. Until Codex answers, the session is not released.
        msg.note(NATIVE_AFTER_ENGINE, (session, result))
        handle(session, NativeCompactionSent())
        if not self.proxy.router.forward_client_request(msg):
            handle(session, NativeCompactionAnswered())

    def on_compact_response(self, msg: Message, pending: PendingRequest) -> Decision:
        held = pending.noted(NATIVE_AFTER_ENGINE)
        if held is not None:
            session, result = held
            handle(session, NativeCompactionAnswered())
            error = msg.error()
            native: dict[str, Any] = {"ok": error is None}
            if isinstance(error, dict):
                native["error"] = error.get("message")
            self.proxy.spawn(self._record_compaction, session, result, native)
        return None  # a native failure does not fail the engine's compaction; the client sees Codex's answer

    async def _engine_compact(self, session: ThreadSession, instructions: str | None = None) -> CompactResult:
        try:
            result = await self.calls.call(
                self.calls.engine.compact(
                    CompactParams(
                        session_id=session.session_id,
                        session_key=session.session_key,
                        token_budget=self.calls.budget(session),
                        force=True,
                        current_token_count=session.current_token_count,
                        compaction_target="budget",
                        custom_instructions=instructions,
                        runtime_context=self.calls.runtime(session, {}),
                    )
                ),
            )
        except Exception as exc:  # not retried as a prompt: reported
            result = CompactResult(ok=False, compacted=False, reason=f"engine compaction failed: {type(exc).__name__}")
            log.warning("context engine compaction failed", extra={"fields": self.calls.fields(session, error=type(exc).__name__)})
        handle(session, Reported("lastEngineCompaction", {"ok": result.ok, "compacted": result.compacted, "reason": result.reason}))
        return result

    async def _record_compaction(self, session: ThreadSession, result: CompactResult, native: dict[str, Any]) -> None:
        mirror = session.mirror
        if mirror is None:
            return
        details = dict(result.result.details) if result.result is not None else {}
        details["codexNativeCompaction"] = native
        details["engineId"] = self.calls.engine_id
        summary = result.result.summary if result.result is not None else None
        key = ENGINE_COMPACTION_KEY.format(thread_id=session.thread_id, n=f"{now_ms()}")
        try:
            compacted = result.result
            if result.compacted and summary and compacted is not None:
                await trio.to_thread.run_sync(
                    lambda: mirror.append_compaction(
                        summary=summary,
                        first_kept_entry_id=compacted.first_kept_entry_id,
                        tokens_before=compacted.tokens_before,
                        tokens_after=compacted.tokens_after,
                        details=details,
                        key=key,
                    )
                )
            else:
                await trio.to_thread.run_sync(
                    lambda: mirror.append_custom(
                        "openclaw-codex-sidecar/compaction", {"ok": result.ok, "compacted": result.compacted, "reason": result.reason, **details}, key
                    )
                )
        except (MirrorError, OSError) as exc:
            log.warning("could not record compaction in the mirror", extra={"fields": self.calls.fields(session, error=type(exc).__name__)})
        if "skipped" in native:
            return  # no native compaction ran (make_room)
        log.info(
            "codex native compaction completed alongside context-engine compaction",
            extra={"fields": self.calls.fields(session, nativeOk=native.get("ok"), engineCompacted=result.compacted)},
        )

    async def make_room(self, session: ThreadSession) -> CompactResult:
        """The engine's compaction when a turn overflowed Codex's context
        window (``sidecar.lifecycle.overflow``): no native compaction after
        it (the turn is retried on a rebuilt thread); a compaction that made
        room is recorded in the mirror. Never raises: a failure or a timeout
        is a result that is not ``ok``."""
        result = await self._engine_compact(session)
        if result.ok and result.compacted:
            await self._record_compaction(session, result, {"ok": False, "skipped": "contextWindowExceeded: the turn is retried"})
        return result

    async def control_compact(self, params: dict[str, Any]) -> dict[str, Any]:
        """``sidecar/compact {threadId, instructions?}``: engine compaction (if
        it owns it; ``instructions`` become its ``custom_instructions``), then
        native (Codex's takes no instructions)."""
        thread_id = params.get("threadId")
        session = self.sessions.get(thread_id) if isinstance(thread_id, str) else None
        if session is None:
            raise RpcError(-32602, "unknown threadId")
        instructions = params.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise RpcError(-32602, "instructions must be a string")
        engine_result = await self._engine_compact(session, instructions or None) if self.calls.owns_compaction else None
        try:
            await self.proxy.request("thread/compact/start", {"threadId": session.thread_id}, timeout=self.options.engine_deadline)
            native: dict[str, Any] = {"ok": True}
        except (RpcError, trio.TooSlowError) as exc:
            native = {"ok": False, "error": exc.message if isinstance(exc, RpcError) else type(exc).__name__}
        if engine_result is not None:
            await self._record_compaction(session, engine_result, native)
            primary: dict[str, Any] = {"ok": engine_result.ok, "compacted": engine_result.compacted, "reason": engine_result.reason}
            if engine_result.result is not None:
                primary["result"] = {
                    "summary": engine_result.result.summary,
                    "firstKeptEntryId": engine_result.result.first_kept_entry_id,
                    "tokensBefore": engine_result.result.tokens_before,
                    "tokensAfter": engine_result.result.tokens_after,
                    "details": {**engine_result.result.details, "codexNativeCompaction": native},
                }
            else:
                primary["details"] = {"codexNativeCompaction": native}
            return primary
        return {"ok": native["ok"], "compacted": native["ok"], "reason": None if native["ok"] else native.get("error"), "details": {"codexNativeCompaction": native}}

