"""The lossless store's per-session rows: the frame a compaction installs,
what the last assembly held, and the messages kept out of line."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from .rows import LargeOutputRow, SessionRow, StoreCore, _loads


class SessionRows(StoreCore):
    """Reads and writes of ``sessions`` and ``large_outputs``."""

    def session(self, session_id: str) -> SessionRow:
        with self._lock:
            row = self._conn.execute(
                "SELECT session_key, summarized_seq, frame_seq, frame, frame_ids, frame_tokens, steps, budget, "
                "last_compaction, last_assembly FROM sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            return SessionRow(session_id=session_id)
        return SessionRow(
            session_id=session_id,
            session_key=row[0],
            summarized_seq=row[1],
            frame_seq=row[2],
            frame=bytes(row[3]) if not isinstance(row[3], str) else row[3].encode(),
            frame_ids=json.loads(row[4]),
            frame_tokens=row[5],
            steps=row[6],
            budget=row[7],
            last_compaction=_loads(row[8]),
            last_assembly=_loads(row[9]),
        )

    def set_frame(
        self, session_id: str, *, frame_seq: int, frame: bytes, frame_ids: list[str], frame_tokens: int, compaction: dict[str, Any]
    ) -> bool:
        """Install a new frame (the end of a compaction step), in one
        transaction. Refused (False) when another writer installed a frame
        reaching further (``frame_seq``) meanwhile: the newer one stays."""
        with self._tx(session_id) as conn:
            conn.execute("INSERT INTO sessions (session_id) VALUES (?) ON CONFLICT DO NOTHING", (session_id,))
            cursor = conn.execute(
                "UPDATE sessions SET frame_seq = ?, frame = ?, frame_ids = ?, frame_tokens = ?, steps = steps + 1, "
                "last_compaction = ? WHERE session_id = ? AND frame_seq <= ?",
                (frame_seq, frame, json.dumps(frame_ids), frame_tokens, json.dumps(compaction, sort_keys=True), session_id, frame_seq),
            )
            return bool(cursor.rowcount)

    def note(self, session_id: str, *, budget: int | None = None, last_assembly: dict[str, Any] | None = None) -> None:
        """Remember the budget last seen and/or what the last assembly held:
        one statement (it reads nothing, so it needs no session lock)."""
        if budget is None and last_assembly is None:
            return
        with self._lock:
            self._conn.execute(
                "INSERT INTO sessions (session_id, budget, last_assembly) VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                "budget = COALESCE(excluded.budget, sessions.budget), last_assembly = COALESCE(excluded.last_assembly, sessions.last_assembly)",
                (session_id, budget, None if last_assembly is None else json.dumps(last_assembly, sort_keys=True)),
            )

    def session_ids(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT session_id FROM sessions UNION SELECT DISTINCT session_id FROM messages "
                "UNION SELECT DISTINCT session_id FROM skipped_messages ORDER BY 1"
            )
            return [r[0] for r in rows]

    # ------------------------------------------------------------ large outputs

    def large_outputs(self, session_id: str, lo: int, hi: int | None = None) -> dict[str, LargeOutputRow]:
        """The session's out-of-line messages with ``lo <= seq <= hi`` (no
        upper bound when ``hi`` is None), by message id."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT message_id, seq, tokens, stub_tokens, summary FROM large_outputs "
                "WHERE session_id = ? AND seq >= ? AND seq <= ?",
                (session_id, lo, hi if hi is not None else 2**62),
            )
            return {
                r[0]: LargeOutputRow(message_id=r[0], seq=r[1], tokens=r[2], stub_tokens=r[3], summary=r[4]) for r in rows
            }

    def add_large_outputs(self, session_id: str, rows: Sequence[LargeOutputRow]) -> None:
        """Record messages as kept out of line, in one transaction; a message
        recorded already keeps its first record (so its stand-in never changes)."""
        if not rows:
            return
        now = int(time.time() * 1000)
        with self._tx() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO large_outputs (message_id, session_id, seq, tokens, stub_tokens, summary, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(r.message_id, session_id, r.seq, r.tokens, r.stub_tokens, r.summary, now) for r in rows],
            )
