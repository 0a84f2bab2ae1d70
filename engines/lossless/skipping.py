"""Turns the engine leaves out of its store: OpenClaw's heartbeats and cron
runs, and sessions whose key matches ``ignore_session_patterns``.

A heartbeat turn (``after_turn`` with ``is_heartbeat``, from ``turn/start``'s
``turnTrigger: "heartbeat"``) is neither stored nor summarised: the
identities of the messages it added (those after ``pre_prompt_message_count``)
go to ``skipped_messages``, so the next turn's snapshot, which still holds
them (the client's transcript keeps every turn), does not store them either.
A cron turn (``turn_trigger`` ``"cron"``: OpenClaw's scheduled jobs, when
they run in a session the sidecar already serves) is left out the same way
(``skip_cron_turns``), noted with the reason ``cron``.
An ignored session stores nothing at all: its assembly is the client's own
history, and its messages are noted as skipped for the status view.

The decisions are pure (:func:`ignored_session`, :func:`heartbeat_split`);
:func:`skipped_idents` and :func:`mark_skipped` are the store's side.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .config import LosslessConfig

if TYPE_CHECKING:
    from .store import Store

__all__ = ["CRON", "HEARTBEAT", "PATTERN", "heartbeat_split", "skipped_turn", "turn_split", "ignored_session", "mark_skipped", "skipped_figures", "skipped_idents", "skipped_session_ids"]

HEARTBEAT = "heartbeat"
CRON = "cron"
PATTERN = "session-pattern"


def ignored_session(cfg: LosslessConfig, session_key: str | None) -> bool:
    """Whether the session's key matches one of ``ignore_session_patterns``."""
    return bool(session_key) and any(fnmatch.fnmatchcase(session_key or "", p) for p in cfg.ignore_session_patterns)


def heartbeat_split(cfg: LosslessConfig, is_heartbeat: bool, count: int, pre_prompt: int) -> int:
    """How many messages of an ``after_turn`` snapshot of ``count`` are
    stored: all of them, or, for a heartbeat turn the config skips, those
    before the turn's prompt (earlier turns not stored yet still are)."""
    if not (is_heartbeat and cfg.skip_heartbeats):
        return count
    return max(0, min(count, pre_prompt))


def skipped_turn(cfg: LosslessConfig, is_heartbeat: bool, trigger: str | None) -> str | None:
    """Why a turn's own messages stay out of the store (``heartbeat``,
    ``cron``), or None when they are stored."""
    if cfg.skip_heartbeats and (is_heartbeat or trigger == HEARTBEAT):
        return HEARTBEAT
    if cfg.skip_cron_turns and trigger == CRON:
        return CRON
    return None


def turn_split(cfg: LosslessConfig, is_heartbeat: bool, trigger: str | None, count: int, pre_prompt: int) -> tuple[int, str]:
    """How many messages of a snapshot of ``count`` are stored, and the
    reason the rest are skipped: all of them, or, for a turn the config
    skips (a heartbeat, a cron run), those before the turn's prompt."""
    reason = skipped_turn(cfg, is_heartbeat, trigger)
    if reason is None:
        return count, HEARTBEAT
    return max(0, min(count, pre_prompt)), reason


def skipped_idents(store: Store, session_id: str) -> set[str]:
    with store._lock:  # noqa: SLF001 (the store's connection lock)
        rows = store.backend.execute("SELECT ident FROM skipped_messages WHERE session_id = ?", (session_id,)).fetchall()
    return {r[0] for r in rows}


def mark_skipped(store: Store, session_id: str, idents: Sequence[str], reason: str) -> None:
    """Note ``idents`` as left out of the session (idempotent)."""
    if not idents:
        return
    now_ms = int(time.time() * 1000)
    with store._tx(session_id) as conn:  # noqa: SLF001 (the store's write transaction)
        conn.executemany(
            "INSERT INTO skipped_messages (session_id, ident, reason, at_ms) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [(session_id, i, reason, now_ms) for i in dict.fromkeys(idents)],
        )


def skipped_figures(store: Store, session_id: str) -> dict[str, int]:
    """Messages left out of the session, by reason."""
    with store._lock:  # noqa: SLF001
        rows = store.backend.execute(
            "SELECT reason, COUNT(*) FROM skipped_messages WHERE session_id = ? GROUP BY reason", (session_id,)
        ).fetchall()
    return {str(reason): int(n) for reason, n in rows}


def skipped_session_ids(store: Store) -> list[str]:
    with store._lock:  # noqa: SLF001
        rows = store.backend.execute("SELECT DISTINCT session_id FROM skipped_messages ORDER BY 1").fetchall()
    return [r[0] for r in rows]

