"""The end of a turn: items and token usage as they come, then (after
``turn/completed`` is forwarded) the turn mirrored and archived, the engine's
``after_turn`` (or its fallbacks), the ledger updated, turn maintenance."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import trio

from engines import AfterTurnParams, AgentMessage, PromptCacheInfo, Usage, after_turn_with_fallback
from protocol.codex import CodexDecodeError, ItemCompletedNotification, ThreadTokenUsageUpdatedNotification, TurnCompletedNotification

from ..history.archive import TurnArchive, archive_path, archived_turn
from ..rebuild.fresh import Spares
from ..relay import Decision, Message
from ..session.context import LifecycleContext
from ..session.state import ThreadSession
from ..store.mirror import MirrorError, now_ms
from ..thread.events import (
    AlreadyFinalized,
    CodexCompacted,
    Finalising,
    Finalize,
    FinalizeEnded,
    FinalizeStarted,
    GiveUpRevert,
    ItemCompleted,
    JoinSlotTaken,
    Learn,
    Maintain,
    MarkerPending,
    MarkerWritten,
    MarkFinalized,
    SkipMaintenance,
    ThreadAction,
    TurnCompleted,
    TurnIngested,
    TurnMirroring,
    UsageReported,
    WantSpare,
    WriteInspect,
    WriteLedger,
)
from ..thread.files import Mirror
from ..thread.machine import finalized_key
from ..thread.state import handle
from ..translate import messages_of, translate_turn
from .calls import EngineCalls

log = logging.getLogger("codex_sidecar.lifecycle")

FINALIZED_CUSTOM_TYPE = "openclaw-codex-sidecar/turn-finalized"

TRIM_EVERY = 20
"""Finalised turns (in this process) between two hand-backs of the C
allocator's free memory (:func:`release_free_memory`)."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim  # glibc's; musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Hand the C allocator's free heap pages back to the system (glibc's
    ``malloc_trim(0)``; nothing where there is none). glibc keeps what was
    freed resident: a session's transient allocations (messages decoded,
    lists and lines that grow with its history) leave holes between what
    stays, and the heap grows by ~0.5 MB a 100 turns of free memory alone
    (bench-scale's ``mallinfo2``). True when some was released."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


class Finalizer:
    def __init__(self, ctx: LifecycleContext, calls: EngineCalls, spares: Spares) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.state_dir = ctx.state_dir
        self.calls = calls
        self.spares = spares
        self.finalised = 0

    def on_item_completed(self, msg: Message) -> Decision:
        try:
            note = msg.typed(ItemCompletedNotification)
        except CodexDecodeError:
            return None  # no string threadId and turnId: no turn the sidecar follows
        session = self.sessions.get(note.thread_id)
        item, turn_id = note.item, note.turn_id
        if session is None or not isinstance(item, dict) or not isinstance(item.get("id"), str):
            return None
        if CodexCompacted(turn_id) in handle(session, ItemCompleted(turn_id, item, note.completed_at_ms or item.get("completedAtMs"))):
            log.info(
                "native Codex compaction in turn",
                extra={"fields": self.calls.fields(session, turnId=turn_id, backend="codex-app-server", ownsCompaction=self.calls.owns_compaction)},
            )
        return None

    def on_token_usage(self, msg: Message) -> Decision:
        try:
            note = msg.typed(ThreadTokenUsageUpdatedNotification)
        except CodexDecodeError:
            return None  # no string threadId, or counts that are not integers: nothing learnt
        session = self.sessions.get(note.thread_id)
        usage = note.token_usage
        if session is None or usage is None:
            return None
        last = usage.last
        reported = None
        if last is not None:
            cached, total_in = last.cached_input_tokens, last.input_tokens
            usage_of = Usage(
                input=max(0, total_in - cached),
                output=last.output_tokens,
                cache_read=cached,
                cache_write=last.cache_write_input_tokens,
                total_tokens=last.total_tokens,
            )
            reported = (usage_of, PromptCacheInfo(cached_input_tokens=cached, input_tokens=total_in), total_in)
        for action in handle(session, UsageReported(reported, usage.model_context_window)):
            if isinstance(action, Learn):
                self.calls.learn(session, action.event)
        return None

    def on_turn_completed(self, msg: Message) -> Decision:
        try:
            note = msg.typed(TurnCompletedNotification)
        except CodexDecodeError:
            return None  # no string threadId: no thread the sidecar follows
        session = self.sessions.get(note.thread_id)
        turn = note.turn
        if session is None or not isinstance(turn, dict) or not isinstance(turn.get("id"), str):
            return None
        for action in handle(session, TurnCompleted(turn["id"])):
            match action:
                case AlreadyFinalized(turn_id):  # a replay while the first copy is still being finalised
                    log.info("turn already finalized; not ingesting it twice", extra={"fields": self.calls.fields(session, turnId=turn_id)})
                case Finalize():
                    self.proxy.spawn(self._finalize, session, turn)
        return None  # forwarded first; the work happens after

    async def _finalize(self, session: ThreadSession, turn: dict[str, Any]) -> None:
        turn_id: str = turn["id"]
        status = turn.get("status")
        [finalising] = handle(session, FinalizeStarted(turn_id))
        assert isinstance(finalising, Finalising)
        state = finalising.turn
        if finalising.wait_slot:  # a turn a join began: after the turn it ended, in order
            await session.slot.acquire()
            handle(session, JoinSlotTaken(state))
        try:
            await session.ready.wait()
            if session.mirror is None:
                return
            if session.mirror.has_key(finalized_key(session.thread_id, turn_id)):
                log.info("turn already finalized; not ingesting it twice", extra={"fields": self.calls.fields(session, turnId=turn_id)})
                return
            archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
            archived = archived_turn(turn, list(state.items.values()))
            ids = [i.get("id") for i in archived.get("items") or [] if isinstance(i, dict)]
            for action in handle(session, TurnMirroring(state, turn_id, ids[-1] if ids and isinstance(ids[-1], str) else None)):
                if isinstance(action, GiveUpRevert):
                    # The thread went on without the mirror following the client's
                    # revert (it kept failing): following later would cut this turn.
                    log.warning(
                        "giving up a client revert the transcript mirror could not follow; the engine keeps the reverted turns",
                        extra={"fields": self.calls.fields(session, turnId=turn_id)},
                    )
                    self.proxy.router.ungate(session.thread_id, action.holder)
            items = list(state.items.values()) or [i for i in turn.get("items") or [] if isinstance(i, dict)]
            error = turn.get("error")
            records = translate_turn(
                items,
                thread_id=session.thread_id,
                turn_id=turn_id,
                timestamp=now_ms(),
                item_timestamps=state.item_times,
                original_input=state.original_input,
                usage=session.last_usage,
                model=session.model,
                turn_status=status,
                error_message=error.get("message") if isinstance(error, dict) else None,
            )
            if state.client_id is None and not messages_of(records):
                # A turn the client did not start with turn/start and that says
                # nothing (native compaction runs as one): mirror the marker only.
                try:
                    await trio.to_thread.run_sync(_archive_then_append, archive, archived, session.mirror, records)
                except (MirrorError, OSError) as exc:
                    log.warning(
                        "transcript mirror failed on a turn without messages; not mirrored",
                        extra={"fields": self.calls.fields(session, turnId=turn_id, error=type(exc).__name__)},
                    )
                return
            snapshot: list[AgentMessage]
            try:
                snapshot = await trio.to_thread.run_sync(_append_then_read, archive, archived, session.mirror, records)
            except (MirrorError, OSError) as exc:
                snapshot = state.history + messages_of(records)
                log.warning(
                    "transcript mirror failed; context engine ingests from fallback turn data",
                    extra={"fields": self.calls.fields(session, turnId=turn_id, error=type(exc).__name__)},
                )
            pre = state.pre_prompt_count if state.client_id is not None else max(0, len(snapshot) - len(messages_of(records)))
            ok = True
            try:
                path = await self.calls.call(
                    after_turn_with_fallback(
                        self.calls.engine,
                        AfterTurnParams(
                            session_id=session.session_id,
                            session_key=session.session_key,
                            session_file=str(session.path),
                            messages=snapshot,
                            pre_prompt_message_count=pre,
                            token_budget=self.calls.budget(session),
                            is_heartbeat=state.heartbeat,
                            turn_trigger=state.trigger,
                            runtime_context=self.calls.runtime(session, {}),
                        ),
                    ),
                )
                log.info("codex context engine finalize completed", extra={"fields": self.calls.fields(session, turnId=turn_id, path=path)})
            except Exception as exc:
                ok = False
                log.warning("codex context engine finalize failed", extra={"fields": self.calls.fields(session, turnId=turn_id, error=type(exc).__name__)})
            await self._carry_out(session, turn_id, handle(session, TurnIngested(state, turn_id, status, ok, snapshot)))
        finally:
            for action in handle(session, FinalizeEnded(state)):
                if isinstance(action, WantSpare):
                    self.spares.want_spare(session)
            self.finalised += 1
            if self.finalised % TRIM_EVERY == 0:
                self.proxy.spawn(trio.to_thread.run_sync, release_free_memory)

    async def _carry_out(self, session: ThreadSession, turn_id: str, actions: list[ThreadAction]) -> None:
        """What a finalised turn leaves: its marker, its ledger entry and
        inspection record (small appends, on the loop, before the next turn
        can plan), its maintenance."""
        for action in actions:
            match action:
                case MarkFinalized(key, data) if session.mirror is not None:
                    # The finalized marker (a replayed turn/completed is not
                    # ingested twice) goes to the mirror while the next turn
                    # may already assemble: nothing there depends on it, and
                    # the worker trip (~0.4 ms) is not on the client's path.
                    # The release waits for it.
                    written = trio.Event()
                    handle(session, MarkerPending(written))
                    self.proxy.spawn(self._mark_finalized, session, session.mirror, written, key, data)
                case WriteLedger() if session.ledger is not None:
                    session.ledger.turn(action.turn_id, action.added, reset=action.reset, turns=action.turns, rebuilds=action.rebuilds,
                                        force=action.force, epoch=action.epoch)
                case WriteInspect(record, text) if session.inspect is not None:
                    session.inspect.append(record)
                    if text is not None:
                        session.inspect.append_text(text)
                case Maintain() if self.calls.background_maintenance:
                    self.proxy.spawn(self.calls.maintain, session, "turn")  # the next turn need not wait
                case Maintain():
                    await self.calls.maintain(session, "turn")
                case SkipMaintenance(reason):
                    log.info("codex context engine maintenance skipped", extra={"fields": self.calls.fields(session, turnId=turn_id, reason=reason)})

    async def _mark_finalized(self, session: ThreadSession, mirror: Mirror, written: trio.Event, key: str, data: dict[str, Any]) -> None:
        try:
            await trio.to_thread.run_sync(mirror.append_custom, FINALIZED_CUSTOM_TYPE, data, key)
        except (MirrorError, OSError):
            pass
        finally:
            handle(session, MarkerWritten(written))
            written.set()


def _archive_then_append(archive: TurnArchive, turn: dict[str, Any], mirror: Mirror, records: list[Any]) -> None:
    archive.append_turn(turn)  # best effort, and first: a mirror failure must not cost it
    mirror.append_records(records)


def _append_then_read(archive: TurnArchive, turn: dict[str, Any], mirror: Mirror, records: list[Any]) -> list[AgentMessage]:
    """Archive and mirror a turn and read the session back, in one trip to
    a worker thread: each trip costs a thread wake-up and an event-loop
    wake-up, and the next turn of this thread waits for finalisation."""
    _archive_then_append(archive, turn, mirror, records)
    return mirror.messages()

