"""The lossless engine's store: one SQLite file (stdlib ``sqlite3``, WAL).

The tables and their migrations are in :mod:`.schema`.

Durability: every write is one ``BEGIN IMMEDIATE`` transaction, so a kill at
any instant leaves each write either wholly done or not at all; WAL with
``synchronous=NORMAL`` keeps committed transactions across a process kill.
All methods are synchronous and serialised by a lock; call them from trio
through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from engines.api import AgentMessage, CompactionSummaryMessage, ToolResultMessage, UserMessage, decode_openclaw, encode_openclaw

from .messages import message_id, message_text
from .schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger("engines.lossless.store")

__all__ = ["DB_NAME", "MIGRATIONS", "SCHEMA_VERSION", "MessageRow", "SessionRow", "Store", "StoreError", "SummaryRow"]

DB_NAME = "lossless.sqlite3"



class StoreError(Exception):
    """The store cannot be opened or used (newer schema, unreadable file, ...)."""


class MessageRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    seq: int
    turn: int
    role: str
    tool_name: str | None
    timestamp: int
    tokens: int
    text: str


class SummaryRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    depth: int
    seq_lo: int
    seq_hi: int
    turn_lo: int
    turn_hi: int
    time_lo: int
    time_hi: int
    text: str
    tokens: int
    source_tokens: int
    fallback: bool
    attempts: int
    parent_id: str | None


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    session_key: str | None = None
    summarized_seq: int = 0
    frame_seq: int = 0
    frame: bytes = b"[]"
    frame_ids: list[str] = []
    frame_tokens: int = 0
    steps: int = 0
    budget: int | None = None
    last_compaction: dict[str, Any] | None = None
    last_assembly: dict[str, Any] | None = None


class NewSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A summary about to be stored (``id`` is derived from its sources)."""

    id: str
    depth: int
    source_ids: list[str]
    seq_lo: int
    seq_hi: int
    turn_lo: int
    turn_hi: int
    time_lo: int
    time_hi: int
    text: str
    tokens: int
    source_tokens: int
    fallback: bool


_MESSAGE_COLUMNS = "id, seq, turn, role, tool_name, timestamp, tokens, text"
_SUMMARY_COLUMNS = (
    "id, depth, seq_lo, seq_hi, turn_lo, turn_hi, time_lo, time_hi, text, tokens, source_tokens, fallback, attempts, parent_id"
)
_CHUNK = 400  # ids per IN (...) query, well under SQLite's variable limit


def _message_row(row: Sequence[Any]) -> MessageRow:
    return MessageRow(
        id=row[0], seq=row[1], turn=row[2], role=row[3], tool_name=row[4], timestamp=row[5], tokens=row[6], text=row[7]
    )


def _summary_row(row: Sequence[Any]) -> SummaryRow:
    return SummaryRow(
        id=row[0],
        depth=row[1],
        seq_lo=row[2],
        seq_hi=row[3],
        turn_lo=row[4],
        turn_hi=row[5],
        time_lo=row[6],
        time_hi=row[7],
        text=row[8],
        tokens=row[9],
        source_tokens=row[10],
        fallback=bool(row[11]),
        attempts=row[12],
        parent_id=row[13],
    )


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Store:
    """One SQLite store file; see the module documentation."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._lock = threading.RLock()
        self._decoded: OrderedDict[str, AgentMessage] = OrderedDict()
        self._decoded_max = 20_000

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], name: str = DB_NAME) -> Store:
        """Open (creating and migrating as needed) ``<state_dir>/<name>``."""
        folder = Path(state_dir)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # 0600 from the start: it holds prompts
            os.close(fd)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the lossless store {path}: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            store = cls(conn, path)
            store._migrate()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"the lossless store {path} is unusable: {exc}") from exc
        except StoreError:
            conn.close()
            raise
        return store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def schema_version(self) -> int:
        with self._lock:
            return self._version()

    def _version(self) -> int:
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
        )
        row = self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self) -> None:
        with self._tx() as conn:
            current = self._version()
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the lossless store {self.path} has schema version {current}, newer than this "
                f"engine's {SCHEMA_VERSION}; upgrade the sidecar or use another state folder"
            )
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            with self._tx() as conn:
                if self._version() >= version:  # another process got there first
                    continue
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, int(time.time() * 1000))
                )
            log.info("lossless store migrated", extra={"fields": {"path": str(self.path), "version": version}})

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), rolled back on any error."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # ------------------------------------------------------------ messages

    def known_idents(self, session_id: str, idents: Iterable[str] | None = None) -> set[str]:
        """The identities stored for a session (all, or those of ``idents``)."""
        with self._lock:
            if idents is None:
                rows = self._conn.execute("SELECT ident FROM messages WHERE session_id = ?", (session_id,))
                return {r[0] for r in rows}
            wanted = list(dict.fromkeys(idents))
            found: set[str] = set()
            for i in range(0, len(wanted), _CHUNK):
                part = wanted[i : i + _CHUNK]
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT ident FROM messages WHERE session_id = ? AND ident IN ({marks})", (session_id, *part)
                )
                found.update(r[0] for r in rows)
            return found

    def ingest(
        self,
        session_id: str,
        session_key: str | None,
        messages: Sequence[AgentMessage],
        idents: Sequence[str],
        count_tokens: Callable[[AgentMessage], int],
    ) -> list[str]:
        """Store the messages whose identity is new, in order, in one
        transaction; return the ids of those stored.

        A ``compactionSummary`` message is stored only while the session has
        no message yet (history from before the engine knew the session):
        otherwise it stands for messages the store already holds verbatim.
        """
        if len(messages) != len(idents):
            raise ValueError("one identity per message is needed")
        present = self.known_idents(session_id, idents)
        todo = [(m, i) for m, i in zip(messages, idents, strict=True) if i not in present]
        if not todo:
            return []
        prepared = [(m, i, count_tokens(m), message_text(m), encode_openclaw(m)) for m, i in todo]
        stored: list[str] = []
        with self._tx() as conn:
            row = conn.execute(
                "SELECT seq, turn FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,)
            ).fetchone()
            seq, turn = (row[0], row[1]) if row else (0, 0)
            conn.execute(
                "INSERT INTO sessions (session_id, session_key) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET session_key = COALESCE(excluded.session_key, session_key)",
                (session_id, session_key),
            )
            for message, ident, tokens, text, body in prepared:
                if isinstance(message, CompactionSummaryMessage) and seq > 0:
                    continue
                next_turn = turn + 1 if isinstance(message, UserMessage) else turn
                mid = message_id(session_id, ident)
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO messages (id, session_id, ident, seq, turn, role, tool_name, timestamp, "
                    "tokens, text, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        mid,
                        session_id,
                        ident,
                        seq + 1,
                        max(next_turn, 1),
                        message.role,
                        message.tool_name if isinstance(message, ToolResultMessage) else None,
                        int(getattr(message, "timestamp", 0) or 0),
                        tokens,
                        text,
                        body,
                    ),
                )
                if cursor.rowcount:
                    seq += 1
                    turn = next_turn
                    stored.append(mid)
        return stored

    def messages_between(self, session_id: str, lo: int, hi: int | None = None) -> list[MessageRow]:
        """Messages with ``lo <= seq <= hi`` (no upper bound when ``hi`` is None), in order."""
        with self._lock:
            if hi is None:
                rows = self._conn.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                    (session_id, lo),
                )
            else:
                rows = self._conn.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
                    (session_id, lo, hi),
                )
            return [_message_row(r) for r in rows]

    def message(self, session_id: str, mid: str) -> MessageRow | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND id = ?", (session_id, mid)
            ).fetchone()
            return _message_row(row) if row else None

    def decode(self, rows: Sequence[MessageRow]) -> list[AgentMessage]:
        """The stored messages of ``rows``, decoded (and cached: rows never change)."""
        with self._lock:
            missing = [r.id for r in rows if r.id not in self._decoded]
            for i in range(0, len(missing), _CHUNK):
                part = missing[i : i + _CHUNK]
                marks = ",".join("?" * len(part))
                for mid, body in self._conn.execute(f"SELECT id, body FROM messages WHERE id IN ({marks})", part):
                    self._decoded[mid] = decode_openclaw(body)
            out = []
            for r in rows:
                message = self._decoded[r.id]
                self._decoded.move_to_end(r.id)
                out.append(message)
            while len(self._decoded) > self._decoded_max:
                self._decoded.popitem(last=False)
            return out

    # ------------------------------------------------------------ summaries

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

    def _insert_summary(self, conn: sqlite3.Connection, session_id: str, s: NewSummary) -> None:
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

    def add_leaf(self, session_id: str, summary: NewSummary) -> bool:
        """Store a leaf summary over messages ``seq_lo..seq_hi`` and advance the
        session's ``summarized_seq`` to ``seq_hi``, in one transaction. Refused
        (False) unless ``seq_lo`` follows ``summarized_seq`` exactly: another
        writer summarised those messages first."""
        with self._tx() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions (session_id) VALUES (?)", (session_id,))
            (done,) = conn.execute("SELECT summarized_seq FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            if done != summary.seq_lo - 1 or conn.execute("SELECT 1 FROM summaries WHERE id = ?", (summary.id,)).fetchone():
                return False
            self._insert_summary(conn, session_id, summary)
            conn.execute("UPDATE sessions SET summarized_seq = ? WHERE session_id = ?", (summary.seq_hi, session_id))
            return True

    def add_condensed(self, session_id: str, summary: NewSummary) -> bool:
        """Store a condensed summary and mark its sources condensed, in one
        transaction; refused (False) when a source is gone or already condensed."""
        with self._tx() as conn:
            marks = ",".join("?" * len(summary.source_ids))
            free = conn.execute(
                f"SELECT COUNT(*) FROM summaries WHERE session_id = ? AND parent_id IS NULL AND id IN ({marks})",
                (session_id, *summary.source_ids),
            ).fetchone()[0]
            if free != len(summary.source_ids) or conn.execute("SELECT 1 FROM summaries WHERE id = ?", (summary.id,)).fetchone():
                return False
            self._insert_summary(conn, session_id, summary)
            conn.execute(
                f"UPDATE summaries SET parent_id = ? WHERE session_id = ? AND id IN ({marks})",
                (summary.id, session_id, *summary.source_ids),
            )
            return True

    def replace_summary_text(self, session_id: str, sid: str, text: str, tokens: int, fallback: bool) -> None:
        """A retried summary's new text (the search index follows by trigger)."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE summaries SET text = ?, tokens = ?, fallback = ?, attempts = attempts + 1 "
                "WHERE session_id = ? AND id = ?",
                (text, tokens, int(fallback), session_id, sid),
            )

    def count_attempt(self, session_id: str, sid: str) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE summaries SET attempts = attempts + 1 WHERE session_id = ? AND id = ?", (session_id, sid))

    # ------------------------------------------------------------ sessions

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
    ) -> None:
        """Install a new frame (the end of a compaction step), in one transaction."""
        with self._tx() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions (session_id) VALUES (?)", (session_id,))
            conn.execute(
                "UPDATE sessions SET frame_seq = ?, frame = ?, frame_ids = ?, frame_tokens = ?, steps = steps + 1, "
                "last_compaction = ? WHERE session_id = ?",
                (frame_seq, frame, json.dumps(frame_ids), frame_tokens, json.dumps(compaction, sort_keys=True), session_id),
            )

    def note(self, session_id: str, *, budget: int | None = None, last_assembly: dict[str, Any] | None = None) -> None:
        """Remember the budget last seen and/or what the last assembly held."""
        with self._tx() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions (session_id) VALUES (?)", (session_id,))
            if budget is not None:
                conn.execute("UPDATE sessions SET budget = ? WHERE session_id = ?", (budget, session_id))
            if last_assembly is not None:
                conn.execute(
                    "UPDATE sessions SET last_assembly = ? WHERE session_id = ?",
                    (json.dumps(last_assembly, sort_keys=True), session_id),
                )

    def session_ids(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT session_id FROM sessions UNION SELECT DISTINCT session_id FROM messages ORDER BY 1"
            )
            return [r[0] for r in rows]

    # ------------------------------------------------------------ search

    def grep(self, session_id: str, match: str, limit: int, exclude_tools: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Full-text hits over the session's messages and summaries, newest
        first (by the latest message each covers); ``match`` is an FTS5 query.
        Messages of the ``exclude_tools`` tools (calls and results) are left out."""
        with self._lock:
            hits: list[dict[str, Any]] = []
            for row in self._conn.execute(
                "SELECT m.id, m.role, m.turn, m.seq, m.timestamp, m.tool_name, m.body, "
                "snippet(messages_fts, 0, '', '', '…', 16) FROM messages_fts "
                "JOIN messages m ON m.pk = messages_fts.rowid "
                "WHERE messages_fts MATCH ? AND m.session_id = ? ORDER BY m.seq DESC LIMIT ?",
                (match, session_id, limit + 64),
            ):
                mid, role, turn, seq, ts, tool_name, body, snippet = row
                if tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools)):
                    continue
                hits.append({"id": mid, "kind": "message", "role": role, "turn": turn, "turns": [turn, turn], "seq": seq, "time": ts, "snippet": snippet})
            for row in self._conn.execute(
                "SELECT s.id, s.depth, s.turn_lo, s.turn_hi, s.seq_hi, s.time_hi, "
                "snippet(summaries_fts, 0, '', '', '…', 16) FROM summaries_fts "
                "JOIN summaries s ON s.pk = summaries_fts.rowid "
                "WHERE summaries_fts MATCH ? AND s.session_id = ? ORDER BY s.seq_hi DESC LIMIT ?",
                (match, session_id, limit),
            ):
                sid, depth, turn_lo, turn_hi, seq_hi, ts, snippet = row
                hits.append(
                    {"id": sid, "kind": "summary", "role": f"summary d{depth}", "turn": turn_hi, "turns": [turn_lo, turn_hi], "seq": seq_hi, "time": ts, "snippet": snippet}
                )
            hits.sort(key=lambda h: (-h["seq"], h["kind"] != "message", h["id"]))
            return hits[:limit]

    # ------------------------------------------------------------ status

    def status(self, session_id: str) -> dict[str, Any]:
        """Per-session figures for an operator (see :func:`engines.lossless.status`)."""
        session = self.session(session_id)
        with self._lock:
            count, tokens = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            by_depth = {
                str(depth): {"total": total, "active": active, "fallback": fallback}
                for depth, total, active, fallback in self._conn.execute(
                    "SELECT depth, COUNT(*), SUM(parent_id IS NULL), SUM(fallback) FROM summaries "
                    "WHERE session_id = ? GROUP BY depth ORDER BY depth",
                    (session_id,),
                )
            }
        return {
            "sessionId": session_id,
            "sessionKey": session.session_key,
            "messages": count,
            "messageTokens": tokens,
            "summariesByDepth": by_depth,
            "fallbackPending": sum(d["fallback"] for d in by_depth.values()),
            "summarizedThroughSeq": session.summarized_seq,
            "frameSeq": session.frame_seq,
            "frameSummaries": session.frame_ids,
            "frameTokens": session.frame_tokens,
            "compactionSteps": session.steps,
            "budget": session.budget,
            "lastCompaction": session.last_compaction,
            "lastAssembly": session.last_assembly,
        }


def _calls_only(body: bytes, tools: Sequence[str]) -> bool:
    """Whether an assistant message only calls tools in ``tools`` (a recall
    tool's call is not a fact worth finding again)."""
    if not tools:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    blocks = data.get("content") if isinstance(data, dict) else None
    if not isinstance(blocks, list) or not blocks:
        return False
    return all(isinstance(b, dict) and b.get("type") == "toolCall" and b.get("name") in tools for b in blocks)
