"""The lossless store's summary DAG: leaf and condensed summaries, their
sources, and the retries of extractive stand-ins."""

from __future__ import annotations

import time

from .backends import Backend
from .rows import _SUMMARY_COLUMNS, NewSummary, StoreCore, SummaryRow, _summary_row


class SummaryRows(StoreCore):
    """Reads and writes of ``summaries`` and ``summary_sources``."""

    def summary(self, session_id: str, sid: str) -> SummaryRow | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE session_id = ? AND id = ?", (session_id, sid)
            ).fetchone()
            return _summary_row(row) if row else None

    def summary_sources(self, sid: str) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT source_id FROM summary_sources WHERE summary_id = ? ORDER BY ord", (sid,))
            return [r[0] for r in rows]

    def summaries(self, session_id: str, *, active_only: bool = False) -> list[SummaryRow]:
        """The session's summaries by position (oldest range first, deeper first
        on a tie); ``active_only``: those not yet condensed into another."""
        with self._lock:
            where = "session_id = ?" + (" AND parent_id IS NULL" if active_only else "")
            rows = self._conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE {where} ORDER BY seq_lo, depth DESC", (session_id,)
            )
            return [_summary_row(r) for r in rows]

    def covering_summary(self, session_id: str, seq: int) -> SummaryRow | None:
        """The leaf summary that covers message ``seq``, if any."""
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE session_id = ? AND depth = 0 AND seq_lo <= ? AND seq_hi >= ?",
                (session_id, seq, seq),
            ).fetchone()
            return _summary_row(row) if row else None

    def fallback_summaries(self, session_id: str, limit: int) -> list[SummaryRow]:
        """Extractive stand-ins still waiting for a model summary, fewest attempts first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE session_id = ? AND fallback = 1 "
                "ORDER BY attempts, seq_lo, depth LIMIT ?",
                (session_id, limit),
            )
            return [_summary_row(r) for r in rows]

    def _insert_summary(self, conn: Backend, session_id: str, s: NewSummary) -> None:
        conn.execute(
            "INSERT INTO summaries (id, session_id, depth, seq_lo, seq_hi, turn_lo, turn_hi, time_lo, time_hi, text, "
            "tokens, source_tokens, fallback, attempts, parent_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL, ?)",
            (
                s.id,
                session_id,
                s.depth,
                s.seq_lo,
                s.seq_hi,
                s.turn_lo,
                s.turn_hi,
                s.time_lo,
                s.time_hi,
                s.text,
                s.tokens,
                s.source_tokens,
                int(s.fallback),
                int(time.time() * 1000),
            ),
        )
        conn.executemany(
            "INSERT INTO summary_sources (summary_id, ord, source_id) VALUES (?, ?, ?)",
            [(s.id, i, source) for i, source in enumerate(s.source_ids)],
        )
        self._unfolded_chars += len(s.text)

    def add_leaf(self, session_id: str, summary: NewSummary) -> bool:
        """Store a leaf summary over messages ``seq_lo..seq_hi`` and advance the
        session's ``summarized_seq`` to ``seq_hi``, in one transaction. Refused
        (False) unless ``seq_lo`` follows ``summarized_seq`` exactly: another
        writer summarised those messages first."""
        with self._tx(session_id) as conn:
            conn.execute("INSERT INTO sessions (session_id) VALUES (?) ON CONFLICT DO NOTHING", (session_id,))
            (done,) = conn.execute("SELECT summarized_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            if done != summary.seq_lo - 1 or conn.execute("SELECT 1 FROM summaries WHERE id = ?", (summary.id,)).fetchone():
                return False
            self._insert_summary(conn, session_id, summary)
            conn.execute("UPDATE sessions SET summarized_seq = ? WHERE session_id = ?", (summary.seq_hi, session_id))
            return True

    def add_condensed(self, session_id: str, summary: NewSummary) -> bool:
        """Store a condensed summary and mark its sources condensed, in one
        transaction; refused (False) when a source is gone or already condensed."""
        with self._tx(session_id) as conn:
            marks = ",".join("?" * len(summary.source_ids))
            free = conn.execute(
                f"SELECT COUNT(*) FROM summaries WHERE session_id = ? AND parent_id IS NULL AND id IN ({marks})",
                (session_id, *summary.source_ids),
            ).fetchone()[0]
            if free != len(summary.source_ids) or conn.execute("SELECT 1 FROM summaries WHERE id = ?", (summary.id,)).fetchone():
                return False
            self._insert_summary(conn, session_id, summary)
            # By id alone (unique; just counted as this session's, under its lock): with
            # ``session_id = ?`` SQLite read every summary of the session (1.3 ms at 5,000 turns).
            conn.execute(f"UPDATE summaries SET parent_id = ? WHERE id IN ({marks})", (summary.id, *summary.source_ids))
            return True

    def replace_summary_text(self, session_id: str, sid: str, text: str, tokens: int, fallback: bool) -> None:
        """A retried summary's new text (the search index follows by trigger)."""
        with self._tx(session_id) as conn:
            conn.execute(
                "UPDATE summaries SET text = ?, tokens = ?, fallback = ?, attempts = attempts + 1 "
                "WHERE session_id = ? AND id = ?",
                (text, tokens, int(fallback), session_id, sid),
            )
        self._unfolded_chars += len(text)

    def count_attempt(self, session_id: str, sid: str) -> None:
        with self._tx(session_id) as conn:
            conn.execute("UPDATE summaries SET attempts = attempts + 1 WHERE session_id = ? AND id = ?", (session_id, sid))
