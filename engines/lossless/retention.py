"""Retention: what ``codex-sidecar engines lossless prune`` (and maintenance,
when a retention setting is on) takes out of the store, on either backend.

Three rules, each leaving alone whatever a live session's summaries still
need:

``retention_days``
    A session whose last activity (its newest message's time, or the newest
    summary or out-of-line record the store wrote for it) is older than this
    many days has *expired*: its messages, summaries, their sources and
    out-of-line records and its session row are deleted, in one transaction
    that checks the age again (a session a writer touched meanwhile stays).
    A session of unknown age (no time on anything) is kept. Any other
    session is *live* and is never deleted. An expired session that comes
    back is stored again from the client's history (the sidecar's mirror
    keeps it whole).
``session_max_messages``
    A live session keeps the raw text of at most its newest N messages;
    older ones lose their raw text (the row, id, seq, turn, role, time and
    token count stay; the text becomes a ``[pruned: ...]`` notice naming the
    leaf summary), exactly under the rule the size limit (``max_store_mb``)
    uses: only a message behind the session's frame whose leaf summary is a
    model summary already condensed into a deeper one. A message no summary
    covers, one an extractive summary still needs for its model rewrite, and
    one the assembly still shows keep their text, so no summary of a live
    session loses what it depends on (nor does a message of 256 characters
    or fewer: its notice would take more room).
orphans
    Rows nothing refers to: the sources of a summary that is gone,
    out-of-line records of a message that is gone, session rows with no
    message and no summary, and sessions whose messages are gone while
    summaries stayed (deleted whole, as expired ones are).

:func:`plan` reads what the rules would take (``--dry-run`` shows it and
changes nothing); :func:`prune` takes it. Both return a JSON-ready report.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from .config import LosslessConfig
from .store import PRUNED_PREFIX, Store

__all__ = ["DAY_MS", "Policy", "SessionAge", "apply", "expired", "plan", "policy", "prune"]

log = logging.getLogger(__name__)

DAY_MS = 86_400_000

#: Why a message's raw text went, in its ``[pruned: ...]`` notice.
SESSION_LIMIT = "to keep its session within its message limit (session_max_messages)"

# A message this short keeps its text: the notice would take more room.
_WORTH = 256

# Orphan rows nothing refers to, as data: (what, how many, delete them).
ORPHANS: tuple[tuple[str, str, str], ...] = (
    (
        "summary sources of a missing summary",
        "SELECT COUNT(*) FROM summary_sources WHERE NOT EXISTS (SELECT 1 FROM summaries s WHERE s.id = summary_sources.summary_id)",
        "DELETE FROM summary_sources WHERE NOT EXISTS (SELECT 1 FROM summaries s WHERE s.id = summary_sources.summary_id)",
    ),
    (
        "out-of-line records of a missing message",
        "SELECT COUNT(*) FROM large_outputs WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = large_outputs.message_id)",
        "DELETE FROM large_outputs WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = large_outputs.message_id)",
    ),
    (
        "session rows with no message and no summary",
        "SELECT COUNT(*) FROM sessions WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.session_id) "
        "AND NOT EXISTS (SELECT 1 FROM summaries s WHERE s.session_id = sessions.session_id)",
        "DELETE FROM sessions WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.session_id) "
        "AND NOT EXISTS (SELECT 1 FROM summaries s WHERE s.session_id = sessions.session_id)",
    ),
)


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    """The retention settings in force (0: the rule is off)."""

    retention_days: float = 0
    session_max_messages: int = 0

    @property
    def active(self) -> bool:
        return self.retention_days > 0 or self.session_max_messages > 0


def policy(cfg: LosslessConfig, *, retention_days: float | None = None, session_max_messages: int | None = None) -> Policy:
    """The config's policy, with what a command line gives in its place."""
    return Policy(
        retention_days=cfg.retention_days if retention_days is None else retention_days,
        session_max_messages=cfg.session_max_messages if session_max_messages is None else session_max_messages,
    )


class SessionAge(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    session_key: str | None
    #: ms since the epoch; 0: unknown.
    last_activity: int
    messages: int
    summaries: int


def expired(ages: Iterable[SessionAge], pol: Policy, now_ms: int, live: Iterable[str] = ()) -> list[SessionAge]:
    """The sessions ``retention_days`` drops at ``now_ms``: older than the
    window, of known age, not named ``live``, and orphan sessions (summaries
    whose messages are gone) whatever the policy. Pure."""
    keep = set(live)
    cutoff = now_ms - pol.retention_days * DAY_MS
    out = []
    for age in ages:
        if age.session_id in keep:
            continue
        orphan = age.messages == 0 and age.summaries > 0
        old = pol.retention_days > 0 and 0 < age.last_activity < cutoff
        if orphan or old:
            out.append(age)
    return out


def _ages(store: Store, only: str | None = None) -> list[SessionAge]:
    q = store.backend.execute
    where, args = (" WHERE session_id = ?", (only,)) if only else ("", ())
    messages = {r[0]: (int(r[1]), int(r[2] or 0)) for r in q(f"SELECT session_id, COUNT(*), MAX(timestamp) FROM messages{where} GROUP BY session_id", args)}
    summaries = {r[0]: (int(r[1]), int(r[2] or 0)) for r in q(f"SELECT session_id, COUNT(*), MAX(created_at) FROM summaries{where} GROUP BY session_id", args)}
    outputs = {r[0]: int(r[1] or 0) for r in q(f"SELECT session_id, MAX(created_at) FROM large_outputs{where} GROUP BY session_id", args)}
    keys = {r[0]: r[1] for r in q(f"SELECT session_id, session_key FROM sessions{where}", args)}
    ids = sorted(set(messages) | set(summaries) | set(keys))
    return [
        SessionAge(
            session_id=s,
            session_key=keys.get(s),
            last_activity=max(messages.get(s, (0, 0))[1], summaries.get(s, (0, 0))[1], outputs.get(s, 0)),
            messages=messages.get(s, (0, 0))[0],
            summaries=summaries.get(s, (0, 0))[0],
        )
        for s in ids
    ]


def _over_limit(store: Store, session_id: str, keep: int) -> list[tuple[int, str]]:
    """``(pk, leaf summary id)`` of the session's messages older than its
    newest ``keep`` whose raw text may go (the size limit's rule)."""
    row = store.backend.execute("SELECT MAX(seq) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
    last = int(row[0] or 0) if row else 0
    if last <= keep:
        return []
    rows = store.backend.execute(
        "SELECT m.pk, s.id FROM messages m JOIN sessions ss ON ss.session_id = m.session_id "
        "JOIN summaries s ON s.session_id = m.session_id AND s.depth = 0 AND m.seq BETWEEN s.seq_lo AND s.seq_hi "
        "WHERE m.session_id = ? AND m.seq <= ? AND s.parent_id IS NOT NULL AND s.fallback = 0 AND m.seq <= ss.frame_seq "
        "AND SUBSTR(m.text, 1, ?) <> ? AND LENGTH(m.text) > ? ORDER BY m.seq",
        (session_id, last - keep, len(PRUNED_PREFIX), PRUNED_PREFIX, _WORTH),
    )
    return [(int(r[0]), r[1]) for r in rows]


def _iso(ms: int) -> str | None:
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ms else None


def plan(store: Store, pol: Policy, *, now_ms: int | None = None, live: Iterable[str] = ()) -> dict[str, Any]:
    """What :func:`prune` would take now, changing nothing."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    live = set(live)
    with store._lock:  # the store's own lock: this module is the store's, kept apart for size
        ages = _ages(store)
        gone = expired(ages, pol, now, live)
        dropped = {a.session_id for a in gone}
        over = {}
        if pol.session_max_messages > 0:
            for age in ages:
                if age.session_id not in dropped:
                    found = _over_limit(store, age.session_id, pol.session_max_messages)
                    if found:
                        over[age.session_id] = len(found)
        orphans = {what: int(store.backend.execute(count).fetchone()[0]) for what, count, _ in ORPHANS}
    return {
        "backend": store.backend.kind,
        "where": store.where,
        "retentionDays": pol.retention_days,
        "sessionMaxMessages": pol.session_max_messages,
        "now": _iso(now),
        "expiredSessions": [
            {
                "sessionId": a.session_id,
                "sessionKey": a.session_key,
                "lastActivity": _iso(a.last_activity),
                "messages": a.messages,
                "summaries": a.summaries,
                "why": "orphan" if a.messages == 0 else "expired",
            }
            for a in gone
        ],
        "prunedMessages": over,
        "orphans": {k: v for k, v in orphans.items() if v},
        "sizeBytes": store.size_bytes(),
    }


def _drop_session(store: Store, age: SessionAge, cutoff: float) -> bool:
    """Delete one session whole, if it is still expired (or still an orphan)
    inside the transaction; whether it was."""
    with store._tx(age.session_id) as conn:
        found = _ages(store, age.session_id)
        if not found:
            return False
        now = found[0]
        if not ((now.messages == 0 and now.summaries > 0) or 0 < now.last_activity < cutoff):
            return False
        sid = (age.session_id,)
        if conn.kind == "sqlite":  # FTS5 external content: its entries go first (no delete triggers)
            conn.execute("INSERT INTO messages_fts (messages_fts, rowid, text) SELECT 'delete', pk, text FROM messages WHERE session_id = ?", sid)
            conn.execute("INSERT INTO summaries_fts (summaries_fts, rowid, text) SELECT 'delete', pk, text FROM summaries WHERE session_id = ?", sid)
        conn.execute("DELETE FROM summary_sources WHERE summary_id IN (SELECT id FROM summaries WHERE session_id = ?)", sid)
        for table in ("summaries", "large_outputs", "messages", "skipped_messages", "sessions"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = ?", sid)
        return True


def prune(store: Store, pol: Policy, *, dry_run: bool = False, now_ms: int | None = None, live: Iterable[str] = ()) -> dict[str, Any]:
    """Apply the policy (see the module documentation); the report of
    :func:`plan` with what was done. ``live``: sessions never dropped
    whatever their age (the one a running engine is maintaining)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = plan(store, pol, now_ms=now, live=live)
    report["dryRun"] = dry_run
    if dry_run:
        return report
    cutoff = now - pol.retention_days * DAY_MS if pol.retention_days > 0 else float("-inf")
    dropped: list[str] = []
    for entry in report["expiredSessions"]:
        age = SessionAge(
            session_id=entry["sessionId"], session_key=entry["sessionKey"], last_activity=0, messages=entry["messages"], summaries=entry["summaries"]
        )
        if _drop_session(store, age, cutoff):
            dropped.append(age.session_id)
    pruned: dict[str, int] = {}
    for session_id in report["prunedMessages"]:
        with store._lock:
            found = _over_limit(store, session_id, pol.session_max_messages)
        done = sum(1 for pk, leaf in found if store.prune_message(session_id, pk, leaf, SESSION_LIMIT) > 0)
        if done:
            pruned[session_id] = done
    with store._tx() as conn:
        for _, _, delete in ORPHANS:
            conn.execute(delete)
    report.update(droppedSessions=dropped, prunedMessages=pruned, sizeAfter=store.size_bytes())
    return report


def apply(store: Store, cfg: LosslessConfig, live: str) -> dict[str, Any]:
    """The engine's hourly pass: the retention rules over the whole store,
    ``live`` (the session being maintained) never dropped; logged when it
    dropped or pruned anything (counts only)."""
    report = prune(store, policy(cfg), live=[live])
    if report.get("droppedSessions") or report.get("prunedMessages"):
        log.info(
            "lossless retention applied",
            extra={"fields": {"droppedSessions": len(report["droppedSessions"]), "prunedMessages": sum(report["prunedMessages"].values())}},
        )
    return report
