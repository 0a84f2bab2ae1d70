"""The engine's own model calls: on ``summary_model`` at ``summary_effort``,
at most ``summary_max_calls_per_hour`` of them, each one logged.

Every ``host.complete`` the engine makes (summaries, batched or not, their
retries, ``lcm_expand_query``) goes through a :class:`BudgetedHost`: it
sets the call's ``model`` and ``effort`` from the config and, before the
call, takes a slot in the store's ``model_calls`` log. The log is shared by
every session and every process on the store, so the cap is the store's:
when the last hour already holds ``summary_max_calls_per_hour`` calls, the
call is refused with :class:`CallCapReached` (logged as ``capped``) and the
caller falls back as for any host error (an extractive summary, retried by
the model once the hour has room; ``lcm_expand_query`` says so).

The decision is pure (:func:`admits`); the log is one small transaction per
call, next to a model call that takes seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from engines.api import CompleteParams, CompleteResult, EngineHost, EngineHostError

from .config import LosslessConfig

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger("engines.lossless.calls")

__all__ = ["HOUR_MS", "KEEP_MS", "BudgetedHost", "CallCapReached", "admits", "call_figures", "record_call"]

HOUR_MS = 3_600_000
KEEP_MS = 7 * 24 * HOUR_MS
"""Rows of ``model_calls`` older than this are dropped as new ones come."""


class CallCapReached(EngineHostError):
    """``summary_max_calls_per_hour`` calls were made in the last hour."""


def admits(calls_last_hour: int, cap: int) -> bool:
    """Whether one more call fits the cap (0: no cap)."""
    return cap <= 0 or calls_last_hour < cap


def record_call(store: Store, session_id: str, purpose: str, model: str | None, cap: int, now_ms: int) -> bool:
    """Count the calls of the last hour and, in the same transaction, log
    this one: made (True) or refused by the cap (False)."""
    with store._tx("model_calls") as conn:  # noqa: SLF001 (the store's write transaction)
        (recent,) = conn.execute("SELECT COUNT(*) FROM model_calls WHERE at_ms > ? AND capped = 0", (now_ms - HOUR_MS,)).fetchone()
        ok = admits(int(recent), cap)
        conn.execute(
            "INSERT INTO model_calls (at_ms, session_id, purpose, model, capped) VALUES (?, ?, ?, ?, ?)",
            (now_ms, session_id, purpose, model, 0 if ok else 1),
        )
        if int(recent) % 100 == 0:
            conn.execute("DELETE FROM model_calls WHERE at_ms < ?", (now_ms - KEEP_MS,))
    return ok


def call_figures(store: Store, session_id: str, now_ms: int | None = None) -> dict[str, Any]:
    """The status view: the session's calls (kept a week) and capped
    refusals, by model, and every session's calls in the last hour."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    with store._lock:  # noqa: SLF001 (the store's connection lock)
        conn = store.backend
        rows = conn.execute(
            "SELECT COALESCE(model, ''), capped, COUNT(*), SUM(CASE WHEN at_ms > ? THEN 1 ELSE 0 END) FROM model_calls "
            "WHERE session_id = ? GROUP BY 1, 2",
            (now_ms - HOUR_MS, session_id),
        ).fetchall()
        (everyone,) = conn.execute("SELECT COUNT(*) FROM model_calls WHERE at_ms > ? AND capped = 0", (now_ms - HOUR_MS,)).fetchone()
    out: dict[str, Any] = {"calls": 0, "lastHour": 0, "capped": 0, "cappedLastHour": 0, "byModel": {}, "allSessionsLastHour": int(everyone)}
    for model, capped, total, recent in rows:
        if capped:
            out["capped"] += int(total)
            out["cappedLastHour"] += int(recent or 0)
        else:
            out["calls"] += int(total)
            out["lastHour"] += int(recent or 0)
            name = model or "(client's model)"
            out["byModel"][name] = out["byModel"].get(name, 0) + int(total)
    return out


class BudgetedHost:
    """The host as one session's calls for one purpose see it: ``complete``
    on the configured model and effort, within the hourly cap."""

    def __init__(self, host: EngineHost, store: Store, cfg: LosslessConfig, session_id: str, purpose: str, clock: Callable[[], float] | None = None) -> None:
        self.host = host
        self.store = store
        self.cfg = cfg
        self.session_id = session_id
        self.purpose = purpose
        self.clock = clock
        self.state_dir = host.state_dir

    def count_tokens(self, text: str, model: str | None = None) -> int:
        return self.host.count_tokens(text, model)

    async def complete(self, params: CompleteParams) -> CompleteResult:
        cfg = self.cfg
        model = params.model or cfg.summary_model
        effort = params.effort or cfg.summary_effort or None
        now_ms = int((self.clock or time.time)() * 1000)
        ok = await trio.to_thread.run_sync(record_call, self.store, self.session_id, self.purpose, model, cfg.summary_max_calls_per_hour, now_ms)
        if not ok:
            log.warning(
                "model call refused: the hourly cap is reached",
                extra={"fields": {"sessionId": self.session_id, "purpose": self.purpose, "cap": cfg.summary_max_calls_per_hour}},
            )
            raise CallCapReached(f"summary_max_calls_per_hour ({cfg.summary_max_calls_per_hour}) reached")
        return await self.host.complete(msgspec.structs.replace(params, model=model, effort=effort))
