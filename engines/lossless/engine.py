"""``LosslessEngine``: the lifecycle methods, tools and status, on the store.

Thin: every decision lives in :mod:`.assemble`, :mod:`.compaction`,
:mod:`.messages` and :mod:`.tools`; this class finds the store, moves blocking
work to worker threads and keeps per-session locks and caches.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec
import trio

from engines.api import (
    AfterTurnParams,
    AgentMessage,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    BootstrapResult,
    CompactionDetails,
    CompactParams,
    CompactResult,
    EngineHost,
    EngineInfo,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    MaintainParams,
    MaintainResult,
    SessionResetParams,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
)
from engines.engine import BaseContextEngine
from engines.legacy import _builtin_version
from engines.tokens import count_tokens, estimate_message_tokens

from . import expand_query, skipping
from .assemble import Frames, fit_budget
from .calls_budget import BudgetedHost
from .compaction import (
    LOOKBACK_MESSAGES,
    RECENT_TURNS,
    StepContext,
    frame_due,
    frame_pays,
    install_frame,
    recent_turn_tokens,
    retry_fallbacks,
    run_step,
    step_needed,
    summaries_wait,
    turn_room,
)
from .config import LosslessConfig, knobs, parse_config
from .intake import Intake
from .messages import valid_cuts
from .outofline import out_of_line_view
from .reset import carry_summaries
from .search import agent_of, set_agent
from .snapshots import SnapshotIdentities, originals
from .store import DB_NAME, MessageRow, Store
from .tools import TOOL_NAMES, TOOL_SPECS, ToolArgumentError, run_tool

log = logging.getLogger("engines.lossless")

__all__ = ["LOSSLESS_ENGINE_ID", "LosslessEngine", "LosslessNotReady"]

LOSSLESS_ENGINE_ID = "lossless"


class LosslessNotReady(RuntimeError):
    """The engine has no store: it was neither bound to a host nor given ``state_dir``."""


@functools.lru_cache(maxsize=16)
def own_tokens(cfg: LosslessConfig) -> int:
    """Tokens the engine adds to every request besides the assembly and the
    system prompt addition (which the assembly reserves room for once it
    shows a summary): its tools' specs, as JSON (name, description, schema;
    Codex 0.169.0 sends the four as ~780 tokens); ``own_framing_tokens``
    when set. Counted on first use (the tokenizer loads lazily)."""
    if cfg.own_framing_tokens is not None:
        return cfg.own_framing_tokens
    return sum(count_tokens(msgspec.json.encode(spec).decode()) for spec in TOOL_SPECS)


def assembly_budget(cfg: LosslessConfig, given: int | None) -> int:
    """What the assembly may hold: the smaller of ``token_budget`` and the
    sidecar's budget, less what the engine adds to every request itself
    (:func:`own_tokens`), so the whole request stays within budget + the
    client's framing (8k bench: 783 tokens of tool specs put a request 173
    tokens over that bound)."""
    ceiling = min(cfg.token_budget, given) if given else cfg.token_budget
    return max(1, ceiling - own_tokens(cfg))


SESSIONS_HELD = 64
"""Sessions whose snapshot identities, decoded frame and stored identities
the engine keeps in memory: beyond these, the least recently used one's
are forgotten, and read from the store again if it comes back (OpenClaw's
gateway keeps one sidecar for days across many sessions)."""


class LosslessEngine(BaseContextEngine):
    """Keeps every message, summarises in a hierarchy, recalls with tools.

    See ``docs/engines/lossless.md``. The store opens on :meth:`bind` (in the
    host's ``state_dir``) or, unbound, on first use in the configured
    ``state_dir``; without either every method raises :class:`LosslessNotReady`
    (the sidecar then falls back to the client's own request).
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.cfg: LosslessConfig = parse_config(self.config)
        self.info = EngineInfo(
            id=LOSSLESS_ENGINE_ID,
            name="Lossless (hierarchical summaries, recall tools)",
            version=_builtin_version(),
            owns_compaction=True,
            turn_maintenance_mode="background",
        )
        # The tokenizer is not preloaded here: its load holds the GIL ~0.6 s
        # and would delay the sidecar's first answer (the sidecar preloads it
        # once ``initialize`` is answered; a count before that loads it).
        self._host: EngineHost | None = None
        self._store: Store | None = None
        self._step_locks: dict[str, trio.Lock] = {}
        self._intake = Intake(self.cfg)
        # session -> time.monotonic() of its last assembly (the last request
        # the provider's prompt cache saw).
        self._last_request: dict[str, float] = {}
        self._frames = Frames(estimate_message_tokens)
        # id(message) -> (message, content identity): the sidecar hands over
        # the same message objects turn after turn; holding the object keeps
        # its id from being reused.
        self._snapshots = SnapshotIdentities()
        # OpenClaw starts the app-server with its agent's CODEX_HOME: the
        # agent of sessions whose key does not name one (see .search.agent_of).
        self._codex_home = os.environ.get("CODEX_HOME")
        self._agents: dict[str, str | None] = {}
        self._next_retention = 0.0  # time.monotonic() of the next retention pass
        self._held: OrderedDict[str, None] = OrderedDict()  # sessions, least recently used first

    # ------------------------------------------------------------ store

    async def bind(self, host: EngineHost) -> None:
        """Remember the host and open the store in its ``state_dir``."""
        self._host = host
        if self._store is None:
            self._store = await trio.to_thread.run_sync(Store.open_configured, self.cfg.database_url, host.state_dir, DB_NAME)

    def _store_now(self) -> Store:
        if self._store is None:
            folder = self.cfg.state_dir
            if self.cfg.database_url:
                self._store = Store.connect(self.cfg.database_url)
                return self._store
            if not folder:
                raise LosslessNotReady(
                    "the lossless engine has no state folder: the sidecar did not bind it to a host "
                    "and [engines.lossless] sets no state_dir"
                )
            self._store = Store.open(os.path.expanduser(folder), DB_NAME)
        return self._store

    async def _db(self, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self._store_now(), fn_name)(*args, **kwargs)

        return await trio.to_thread.run_sync(call)

    @property
    def store(self) -> Store:
        """The open store (opened on first access when unbound)."""
        return self._store_now()

    def _context(self, session_id: str, budget: int | None = None, instructions: str | None = None) -> StepContext:
        sizes = knobs(self.cfg, budget if budget is not None else self.cfg.token_budget)
        host = self._budgeted(session_id, "summary")
        return StepContext(self._store_now(), host, self.cfg, count_tokens, estimate_message_tokens, sizes, instructions=instructions)

    def _budgeted(self, session_id: str, purpose: str) -> BudgetedHost | None:
        """The host for the engine's own model calls: ``summary_model`` at
        ``summary_effort``, within ``summary_max_calls_per_hour``."""
        if self._host is None:
            return None
        return BudgetedHost(self._host, self._store_now(), self.cfg, session_id, purpose)

    def _cache_warm(self, session_id: str) -> bool | None:
        """Whether the provider's prompt cache for this session is likely
        warm: a request (an assembly) less than ``cache_ttl`` seconds ago.
        None when this process has assembled nothing for it yet."""
        last = self._last_request.get(session_id)
        if last is None:
            return None
        return self.cfg.cache_ttl > 0 and time.monotonic() - last < self.cfg.cache_ttl

    def _use(self, session_id: str) -> None:
        """The session is used now: the least recently used beyond
        :data:`SESSIONS_HELD` are forgotten (:meth:`_forget`)."""
        self._held.pop(session_id, None)
        self._held[session_id] = None
        while len(self._held) > SESSIONS_HELD:
            self._forget(self._held.popitem(last=False)[0])

    def _forget(self, session_id: str) -> None:
        """What this process keeps of a session: all read or computed again
        when it is next used."""
        self._intake.forget(session_id)
        self._frames.forget(session_id)
        self._snapshots.forget(session_id)
        self._agents.pop(session_id, None)
        lock = self._step_locks.get(session_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._step_locks[session_id]

    def _lock(self, session_id: str) -> trio.Lock:
        lock = self._step_locks.get(session_id)
        if lock is None:
            lock = self._step_locks[session_id] = trio.Lock()
        return lock

    def _budget(self, given: int | None) -> int:
        return assembly_budget(self.cfg, given)

    # ------------------------------------------------------------ ingestion

    def _ingest_sync(
        self,
        session_id: str,
        session_key: str | None,
        messages: Sequence[AgentMessage],
        idents: Sequence[str],
        keep: tuple[int, str] | None = None,
        epoch: int = 0,
        budget: int | None = None,
    ) -> int:
        """:meth:`.Intake.take` (what is stored or skipped), then the
        session's agent, once, when it has stored messages."""
        store = self._store_now()
        stored = self._intake.take(store, session_id, session_key, messages, idents, keep, epoch, budget)
        if stored and session_id not in self._agents:
            agent = self._agents[session_id] = agent_of(session_key, self._codex_home)
            if agent is not None:
                set_agent(store, session_id, agent)
        return stored

    async def _ingest(
        self,
        session_id: str,
        session_key: str | None,
        messages: Sequence[AgentMessage],
        keep: tuple[int, str] | None = None,
        idents: Sequence[str] | None = None,
        budget: int | None = None,
    ) -> int:
        """``idents``: the caller's ``self._snapshots.of(session_id, messages)``, if it has them."""
        self._use(session_id)
        if not messages:
            if budget is not None:
                await self._db("note", session_id, budget=budget)
            return 0
        idents = self._snapshots.of(session_id, messages) if idents is None else idents
        epoch = self._snapshots.epoch(session_id)
        # The snapshot itself, held unchanged by the caller: a copy refers to every message (~0.1 ms at 13,000).
        return await trio.to_thread.run_sync(self._ingest_sync, session_id, session_key, messages, idents, keep, epoch, budget)

    async def ingest(self, params: IngestParams) -> IngestResult:
        keep = skipping.turn_split(self.cfg, params.is_heartbeat, params.turn_trigger, 1, 0)
        count = await self._ingest(params.session_id, params.session_key, [params.message], keep)
        return IngestResult(ingested=count > 0)

    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        keep = skipping.turn_split(self.cfg, params.is_heartbeat, params.turn_trigger, len(params.messages), 0)
        return IngestBatchResult(ingested_count=await self._ingest(params.session_id, params.session_key, params.messages, keep))

    async def after_turn(self, params: AfterTurnParams) -> None:
        """Store whatever of the whole snapshot is not stored yet (replays and
        earlier failures included), but not a heartbeat's or a cron run's own
        messages (``skip_heartbeats``, ``skip_cron_turns``); remember the
        budget for maintenance."""
        keep = skipping.turn_split(self.cfg, params.is_heartbeat, params.turn_trigger, len(params.messages), params.pre_prompt_message_count)
        ignored = skipping.ignored_session(self.cfg, params.session_key)
        await self._ingest(params.session_id, params.session_key, params.messages, keep, budget=None if ignored else params.token_budget or None)

    async def bootstrap(self, params: BootstrapParams) -> BootstrapResult:
        """Import the session file's messages (OpenClaw JSONL) not stored yet."""
        try:
            messages = await trio.to_thread.run_sync(_read_session_file, params.session_file)
        except FileNotFoundError:
            return BootstrapResult(bootstrapped=False, reason="no session file")
        except OSError as exc:
            return BootstrapResult(bootstrapped=False, reason=f"session file unreadable: {type(exc).__name__}")
        count = await self._ingest(params.session_id, params.session_key, messages)
        return BootstrapResult(bootstrapped=True, imported_messages=count)

    async def on_session_reset(self, params: SessionResetParams) -> None:
        """OpenClaw reset the session: the new one starts empty, or with the
        previous one's newest summaries (``reset_keep_summaries``, :mod:`.reset`)."""
        if self.cfg.reset_keep_summaries:
            await trio.to_thread.run_sync(
                carry_summaries, self._store_now(), params.previous_session_id, params.session_id, self.cfg.reset_keep_summaries
            )

    # ------------------------------------------------------------ assembly

    def _assemble_sync(
        self,
        session_id: str,
        budget: int,
        addition_tokens: int,
        cold: bool = False,
        snapshot: tuple[Sequence[AgentMessage], Sequence[str]] = ((), ()),
    ) -> tuple[list[AgentMessage], int, dict[str, Any]]:
        store = self._store_now()
        session = store.session(session_id)
        if cold and session.summarized_seq > session.frame_seq:
            # Summaries made while the cache was warm wait for their frame; the
            # cache is gone now, so the new frame costs nothing extra.
            before = session.frame_tokens + sum(r.tokens for r in self._view_sync(session_id, session.frame_seq + 1))
            report = {"reason": "cache-cold", "tokensBefore": before}
            install_frame(store, self.cfg, session_id, budget, count_tokens, estimate_message_tokens, report, before)
            session = store.session(session_id)
        frame, frame_tokens = self._frames.of(session_id, session.frame)
        stored, recorded = store.messages_with_outputs(session_id, session.frame_seq + 1)
        rows, stubs = out_of_line_view(store, self.cfg, session_id, stored, count_tokens, estimate_message_tokens, recorded)
        tail = [stubs.get(r.id, m) for r, m in zip(rows, store.decode(rows), strict=True)]
        if self.cfg.redact_secrets:  # the raw messages as the client has them (and codex holds them)
            theirs = originals(session_id, snapshot, {r.id for r in rows if r.id not in stubs})
            tail = [theirs.get(r.id, m) for r, m in zip(rows, tail, strict=True)]
        # The addition goes with a frame, and the model reads it too; and the
        # turn about to run needs room beside the assembly (as large as the
        # largest recent one: what the frame decisions look ahead by).
        reserved = addition_tokens if frame else 0
        tail_tokens = [r.tokens for r in rows]
        room = _turn_room(store, self.cfg, session_id, session.frame_seq, sum(frame_tokens), rows, tail, budget, reserved)
        messages, tokens, info = fit_budget(frame, frame_tokens, tail, tail_tokens, budget - reserved - room)
        held = {
            "frameSummaries": len(frame) - info.get("droppedSummaries", 0),
            "frameSummaryIds": session.frame_ids[info.get("droppedSummaries", 0) :],
            "rawMessages": len(tail) - info.get("droppedMessages", 0),
            "firstRawSeq": rows[info.get("droppedMessages", 0)].seq if len(rows) > info.get("droppedMessages", 0) else None,
            "tokens": tokens,
            "budget": budget,
            "step": session.steps,
            **info,
        }
        store.note(session_id, budget=None, last_assembly=held)
        return messages, tokens, held

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        """The frame's summaries, then every raw message after them, within
        the budget; the history handed over is stored first if it is not."""
        # The identities once a call: each look at the cache compares the whole snapshot.
        self._use(params.session_id)
        idents: Sequence[str] = self._snapshots.of(params.session_id, params.messages) if params.messages else ()
        await self._ingest(params.session_id, params.session_key, params.messages, idents=idents)
        if skipping.ignored_session(self.cfg, params.session_key):
            # Nothing of the session is stored: the client's own history, as it is.
            return AssembleResult(messages=list(params.messages), estimated_tokens=sum(estimate_message_tokens(m) for m in params.messages))
        budget = self._budget(params.token_budget)
        addition = self.cfg.system_prompt_addition.strip() or None
        addition_tokens = count_tokens(addition) if addition else 0
        # A cold cache lets waiting summaries get their frame now, unless a
        # step holds the session (the assembly never waits for a model call).
        lock = self._lock(params.session_id)
        cold = self._cache_warm(params.session_id) is False
        if cold:
            try:
                lock.acquire_nowait()
            except trio.WouldBlock:
                cold = False
        try:
            # The client's copies of the raw messages.
            snapshot = (params.messages, idents) if self.cfg.redact_secrets else ((), ())
            messages, tokens, held = await trio.to_thread.run_sync(
                self._assemble_sync, params.session_id, budget, addition_tokens, cold, snapshot
            )
        finally:
            if cold:
                lock.release()
        self._last_request[params.session_id] = time.monotonic()
        has_summary = held["frameSummaries"] > 0
        if addition is not None and has_summary:
            tokens += addition_tokens
        return AssembleResult(
            messages=messages,
            estimated_tokens=tokens,
            system_prompt_addition=addition if has_summary else None,
        )

    async def _retain(self, live: str) -> None:
        """The retention rules over the whole store, at most once an hour
        (``live``, the session being maintained, is never dropped)."""
        from . import retention

        self._next_retention = time.monotonic() + 3600
        store = self._store_now()
        report = await trio.to_thread.run_sync(retention.apply, store, self.cfg, live)
        for session_id in report.get("droppedSessions", []):
            self._held.pop(session_id, None)
            self._forget(session_id)

    # ------------------------------------------------------------ compaction

    async def _step(self, session_id: str, *, force: bool, reason: str, budget: int | None, instructions: str | None = None) -> dict[str, Any]:
        self._use(session_id)
        async with self._lock(session_id):
            session = await self._db("session", session_id)
            effective = self._budget(budget or session.budget)
            ctx = self._context(session_id, effective, instructions)
            install = True
            if not force:
                tail = await trio.to_thread.run_sync(self._view_sync, session_id, session.frame_seq + 1)
                unfinished = session.summarized_seq != session.frame_seq
                addition = self.cfg.system_prompt_addition.strip()
                shown = count_tokens(addition) if addition and session.frame_tokens else 0  # as assemble reserves it
                assembly = session.frame_tokens + sum(r.tokens for r in tail) + shown
                back = await trio.to_thread.run_sync(self._view_sync, session_id, max(1, session.frame_seq + 1 - LOOKBACK_MESSAGES))
                recent = recent_turn_tokens(back)
                pays = self.cfg.frames_when_paid and frame_pays(tail, session.frame_tokens, effective, self.cfg)
                if not step_needed(session.frame_tokens, assembly - session.frame_tokens, effective, self.cfg, unfinished, recent, pays):
                    return {"reason": reason, "changed": False, "needed": False}
                warm = self._cache_warm(session_id) is True
                install = frame_due(assembly, recent, effective, self.cfg, warm=warm, pays=pays)
                if not install and not unfinished and summaries_wait(assembly, recent, effective, self.cfg, warm=warm, pays=pays):
                    return {"reason": reason, "changed": False, "needed": False, "waiting": "the frame is due next turn"}
            return await run_step(ctx, session_id, budget=effective, force=force, reason=reason, install=install)

    def _view_sync(self, session_id: str, lo: int) -> list[MessageRow]:
        store = self._store_now()
        stored, recorded = store.messages_with_outputs(session_id, lo)
        rows, _ = out_of_line_view(store, self.cfg, session_id, stored, count_tokens, estimate_message_tokens, recorded)
        return rows

    async def maintain(self, params: MaintainParams) -> MaintainResult:
        """A compaction step when the assembly has outgrown its threshold (or
        one was left unfinished), then retries of extractive summaries."""
        start = trio.current_time()
        if skipping.ignored_session(self.cfg, params.session_key):
            return MaintainResult(changed=False, reason="session ignored (ignore_session_patterns)")
        report = await self._step(params.session_id, force=False, reason=f"maintain:{params.reason}", budget=params.runtime_context.token_budget)
        retried = 0
        if self._host is not None and self.cfg.retries_per_maintain:
            async with self._lock(params.session_id):
                session = await self._db("session", params.session_id)
                retried = await retry_fallbacks(
                    self._context(params.session_id, self._budget(params.runtime_context.token_budget or session.budget)), params.session_id, self.cfg.retries_per_maintain, start + self.cfg.step_deadline
                )
        if self._store_now().backend.kind == "postgres":  # searches stay fast: the waiting words into the index, every 32 KB of text
            await self._db("tidy_search_index")
        if self.cfg.max_store_mb:
            await self._db("enforce_size_limit", int(self.cfg.max_store_mb * 2**20))
        if (self.cfg.retention_days or self.cfg.session_max_messages) and time.monotonic() >= self._next_retention:
            await self._retain(params.session_id)
        changed = bool(report.get("changed")) or retried > 0
        reason = "compaction step" if report.get("changed") else "no compaction needed"
        if retried:
            reason += f"; {retried} extractive summar{'y' if retried == 1 else 'ies'} rewritten by the model"
        return MaintainResult(changed=changed, reason=reason)

    async def compact(self, params: CompactParams) -> CompactResult:
        """A compaction step now (``thread/compact/start``, ``sidecar/compact``).
        Its ``custom_instructions`` go with every summary call of the step
        (bounded and redacted, :func:`.summarize.instructed`).

        The result carries no summary text on purpose: the engine keeps its
        own summaries, and a summary in the result would make the sidecar's
        transcript mirror hide the history before it.
        """
        if skipping.ignored_session(self.cfg, params.session_key):
            return CompactResult(ok=True, compacted=False, reason="session ignored (ignore_session_patterns): nothing stored to compact")
        report = await self._step(params.session_id, force=True, reason="compact", budget=params.token_budget, instructions=params.custom_instructions)
        if not report.get("changed"):
            return CompactResult(
                ok=True,
                compacted=False,
                reason="nothing to compact: every message outside the fresh tail is already summarised",
                result=CompactionDetails(tokens_before=report.get("tokensBefore", 0), tokens_after=report.get("tokensAfter"), details=report),
            )
        return CompactResult(
            ok=True,
            compacted=True,
            result=CompactionDetails(
                summary=None,
                tokens_before=report["tokensBefore"],
                tokens_after=report["tokensAfter"],
                details=report,
            ),
        )

    # ------------------------------------------------------------ tools

    def tools(self) -> list[ToolSpec]:
        return list(TOOL_SPECS)

    async def call_tool(self, params: ToolCallParams) -> ToolCallResult:
        """Answer one recall-tool call; bad arguments give an error result
        that says what is wrong."""
        if params.name not in TOOL_NAMES:
            return ToolCallResult(text=f"unknown tool {params.name!r}; this engine offers {', '.join(TOOL_NAMES)}", is_error=True)
        try:
            store = await trio.to_thread.run_sync(self._store_now)
            if params.name == expand_query.NAME:
                return await self._expand_query(store, params)
            agent = self._agents.get(params.session_id) or agent_of(params.session_key, self._codex_home)
            text = await trio.to_thread.run_sync(
                run_tool, store, self.cfg, params.session_id, params.name, params.arguments, count_tokens, agent
            )
        except ToolArgumentError as exc:
            return ToolCallResult(text=str(exc), is_error=True)
        return ToolCallResult(text=text)

    async def _expand_query(self, store: Store, params: ToolCallParams) -> ToolCallResult:
        """``lcm_expand_query``: sources found and expanded in a worker thread,
        the question asked through ``host.complete``, the answer capped."""
        if not isinstance(params.arguments, Mapping):
            raise ToolArgumentError(f"{params.name}: arguments must be a JSON object")
        arguments = params.arguments
        if self.cfg.redact_secrets:  # the question goes to the summary model
            from .redact import redact_arguments

            arguments = await trio.to_thread.run_sync(redact_arguments, dict(arguments))
        plan = await trio.to_thread.run_sync(expand_query.prepare, store, self.cfg, params.session_id, arguments, count_tokens)
        if isinstance(plan, str):
            return ToolCallResult(text=plan)
        answer, why = await expand_query.ask(self._budgeted(params.session_id, "expand_query"), plan, self.cfg.expand_query_timeout)
        if answer is None:
            return ToolCallResult(text=expand_query.failure_text(plan, why, self.cfg.expand_query_timeout), is_error=True)
        text = await trio.to_thread.run_sync(expand_query.finish, plan, answer, count_tokens)
        return ToolCallResult(text=text)

    # ------------------------------------------------------------ status

    def status(self, session_id: str) -> dict[str, Any]:
        """Per-session figures for an operator: stored messages and tokens,
        summaries per depth, fallback summaries pending, the last compaction
        and what the last assembly held."""
        return self._store_now().status(session_id)

    def sessions(self) -> list[str]:
        return self._store_now().session_ids()

    async def dispose(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            await trio.to_thread.run_sync(store.close)


def _turn_room(
    store: Store,
    cfg: LosslessConfig,
    session_id: str,
    frame_seq: int,
    frame_tokens: int,
    rows: list[MessageRow],
    tail: list[AgentMessage],
    budget: int,
    reserved: int,
) -> int:
    """:func:`.compaction.turn_room` for an assembly: the largest of the
    recent turns (read from the store before the frame too, as the frame
    decisions read them), never at the cost of the frame and the fresh tail."""
    back: list[MessageRow] = []
    if frame_seq >= 1 and len({r.turn for r in rows}) <= RECENT_TURNS:  # else the newest turns are all in the tail
        older, recorded = store.messages_with_outputs(session_id, max(1, frame_seq + 1 - LOOKBACK_MESSAGES), frame_seq)
        back = out_of_line_view(store, cfg, session_id, older, count_tokens, estimate_message_tokens, recorded)[0]
    recent = recent_turn_tokens([*back, *rows])
    tail_tokens = [r.tokens for r in rows]
    if frame_tokens + sum(tail_tokens) + recent <= budget - reserved:
        return recent  # room to spare: nothing is left out, the fresh tail is not at stake
    sizes = knobs(cfg, budget)
    return turn_room(recent, budget - reserved, frame_tokens, tail_tokens, valid_cuts(tail), sizes.fresh_tail_tokens, sizes.fresh_tail_messages)


def _read_session_file(path: str) -> list[AgentMessage]:
    """The messages on the leaf path of an OpenClaw session file (JSONL tree):
    every ``message`` entry from the root to the last entry, compacted or not
    (the engine keeps everything), read as ``engines lossless import`` reads
    them. Lines that do not parse are skipped."""
    from .importer import openclaw_messages

    def entries() -> Iterator[Any]:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    yield json.loads(raw)
                except ValueError:
                    continue

    return openclaw_messages(entries())[0]

