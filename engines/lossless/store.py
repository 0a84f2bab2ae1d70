"""The lossless engine's store: every operation on its rows, in portable SQL,
over a :class:`~engines.lossless.backends.Backend`: one SQLite file (stdlib
``sqlite3``, WAL; the default) or a PostgreSQL database (psycopg 3,
``[engines.lossless] database_url``).

The tables and their migrations are in :mod:`.schema`.

Durability: every write is one transaction that excludes the session's other
writers (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction holding an
advisory lock on the session), so a kill at any instant leaves each write
either wholly done or not at all, and two writers of one session, in two
processes or on two hosts, take turns. All methods are synchronous and
serialised by a lock; call them from trio through ``trio.to_thread.run_sync``.
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

from .backends import Backend, BackendError, PostgresBackend, SqliteBackend
from .calls_budget import call_figures
from .messages import message_id, message_text
from .schema import MIGRATIONS, SCHEMA_VERSION
from .skipping import skipped_figures

log = logging.getLogger("engines.lossless.store")

__all__ = [
    "DB_NAME",
    "MIGRATIONS",
    "PRUNED_PREFIX",
    "SCHEMA_VERSION",
    "LargeOutputRow",
    "MessageRow",
    "SessionRow",
    "Store",
    "StoreError",
    "SummaryRow",
    "pruned_text",
]

DB_NAME = "lossless.sqlite3"
#: Why the size limit drops a message's raw text, in its ``[pruned: ...]`` notice.
SIZE_LIMIT = "to keep the store under its size limit (max_store_mb)"



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


class LargeOutputRow(msgspec.Struct, frozen=True, kw_only=True):
    """A message kept out of line: the short summary shown in its place and
    the tokens of the stand-in message (the message stays whole in ``messages``)."""

    message_id: str
    seq: int
    tokens: int
    stub_tokens: int
    summary: str


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

    def __init__(self, backend: Backend, path: Path | None = None) -> None:
        #: The backend; its ``execute``/``executemany`` take portable SQL with ``?`` placeholders.
        self._conn = backend
        self.backend = backend
        #: The SQLite file, or None for PostgreSQL.
        self.path = path
        self.where = backend.where
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
            backend = SqliteBackend.open(path)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the lossless store {path} is unusable: {exc}") from exc
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the lossless store {path}: {exc}") from exc
        return cls._ready(backend, path)

    @classmethod
    def connect(cls, database_url: str) -> Store:
        """Open (creating the tables and migrating as needed) the store in the
        PostgreSQL database ``database_url`` (``postgresql://...``)."""
        try:
            backend = PostgresBackend(database_url)
        except BackendError as exc:
            raise StoreError(str(exc)) from None
        return cls._ready(backend, None)

    @classmethod
    def open_configured(cls, database_url: str | None, state_dir: str | os.PathLike[str], name: str = DB_NAME) -> Store:
        """The PostgreSQL store when ``database_url`` is set, else the SQLite file in ``state_dir``."""
        return cls.connect(database_url) if database_url else cls.open(state_dir, name)

    @classmethod
    def _ready(cls, backend: Backend, path: Path | None) -> Store:
        try:
            store = cls(backend, path)
            backend.migrate(log)
        except BackendError as exc:
            backend.close()
            raise StoreError(str(exc)) from None
        except Exception as exc:  # sqlite3.DatabaseError, psycopg.Error: not a usable store
            backend.close()
            raise StoreError(f"the lossless store {backend.where} is unusable: {exc}") from exc
        return store

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def schema_version(self) -> int:
        with self._lock:
            return self._conn.version()

    @contextlib.contextmanager
    def _tx(self, session_id: str = "") -> Iterator[Backend]:
        """One write transaction, rolled back on any error, excluding the
        session's other writers (SQLite: every writer)."""
        with self._lock, self._conn.transaction(f"lossless:{session_id}"):
            yield self._conn

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
        with self._tx(session_id) as conn:
            row = conn.execute(
                "SELECT seq, turn FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,)
            ).fetchone()
            seq, turn = (row[0], row[1]) if row else (0, 0)
            conn.execute(
                "INSERT INTO sessions (session_id, session_key) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET session_key = COALESCE(excluded.session_key, sessions.session_key)",
                (session_id, session_key),
            )
            for message, ident, tokens, text, body in prepared:
                if isinstance(message, CompactionSummaryMessage) and seq > 0:
                    continue
                next_turn = turn + 1 if isinstance(message, UserMessage) else turn
                mid = message_id(session_id, ident)
                cursor = conn.execute(
                    "INSERT INTO messages (id, session_id, ident, seq, turn, role, tool_name, timestamp, "
                    "tokens, text, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
            conn.execute(
                f"UPDATE summaries SET parent_id = ? WHERE session_id = ? AND id IN ({marks})",
                (summary.id, session_id, *summary.source_ids),
            )
            return True

    def replace_summary_text(self, session_id: str, sid: str, text: str, tokens: int, fallback: bool) -> None:
        """A retried summary's new text (the search index follows by trigger)."""
        with self._tx(session_id) as conn:
            conn.execute(
                "UPDATE summaries SET text = ?, tokens = ?, fallback = ?, attempts = attempts + 1 "
                "WHERE session_id = ? AND id = ?",
                (text, tokens, int(fallback), session_id, sid),
            )

    def count_attempt(self, session_id: str, sid: str) -> None:
        with self._tx(session_id) as conn:
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
        """Remember the budget last seen and/or what the last assembly held."""
        with self._tx(session_id) as conn:
            conn.execute("INSERT INTO sessions (session_id) VALUES (?) ON CONFLICT DO NOTHING", (session_id,))
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

    # ------------------------------------------------------------ search

    def grep(self, session_id: str, match: str, limit: int, exclude_tools: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Full-text hits over the session's messages and summaries, newest
        first (by the latest message each covers); ``match`` is an FTS5 query
        of quoted words joined by AND or OR (what PostgreSQL understands too).
        Messages of the ``exclude_tools`` tools (calls and results) are left out."""
        with self._lock:
            hits: list[dict[str, Any]] = []
            for row in self._conn.grep("messages", session_id, match, limit + 64):
                mid, role, turn, seq, ts, tool_name, body, snippet = row
                if tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools)):
                    continue
                hits.append({"id": mid, "kind": "message", "role": role, "turn": turn, "turns": [turn, turn], "seq": seq, "time": ts, "snippet": snippet})
            for row in self._conn.grep("summaries", session_id, match, limit):
                sid, depth, turn_lo, turn_hi, seq_hi, ts, snippet = row
                hits.append(
                    {"id": sid, "kind": "summary", "role": f"summary d{depth}", "turn": turn_hi, "turns": [turn_lo, turn_hi], "seq": seq_hi, "time": ts, "snippet": snippet}
                )
            hits.sort(key=lambda h: (-h["seq"], h["kind"] != "message", h["id"]))
            return hits[:limit]

    # ------------------------------------------------------------ size, checks, backup

    def size_bytes(self) -> int:
        """Bytes the store's data takes (SQLite: pages in use; PostgreSQL: the tables with their indexes)."""
        with self._lock:
            return self._conn.size_bytes()

    def prunable(self, limit: int = 200, after_pk: int = 0) -> list[tuple[int, str, str, int]]:
        """The messages the size limit may drop the raw text of, oldest stored
        first: ``(pk, session_id, leaf summary id, bytes)``. Only messages whose
        leaf summary is a model summary (not extractive) that was condensed
        into a depth-1 summary, behind the session's frame, not pruned yet."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT m.pk, m.session_id, s.id, LENGTH(m.text) + LENGTH(m.body) FROM messages m "
                "JOIN sessions ss ON ss.session_id = m.session_id "
                "JOIN summaries s ON s.session_id = m.session_id AND s.depth = 0 AND m.seq BETWEEN s.seq_lo AND s.seq_hi "
                "WHERE s.parent_id IS NOT NULL AND s.fallback = 0 AND m.seq <= ss.frame_seq "
                "AND m.pk > ? AND SUBSTR(m.text, 1, ?) <> ? ORDER BY m.pk LIMIT ?",
                (after_pk, len(PRUNED_PREFIX), PRUNED_PREFIX, limit),
            )
            return [(int(r[0]), r[1], r[2], int(r[3])) for r in rows]

    def prune_message(self, session_id: str, pk: int, leaf_id: str, reason: str = SIZE_LIMIT) -> int:
        """Drop one message's raw text (see :meth:`enforce_size_limit`); the
        bytes of text it freed (0 when another writer pruned it first)."""
        with self._tx(session_id) as conn:
            row = conn.execute("SELECT id, text, body FROM messages WHERE pk = ? AND session_id = ?", (pk, session_id)).fetchone()
            if row is None or row[1].startswith(PRUNED_PREFIX):
                return 0
            mid, old_text, body = row[0], row[1], bytes(row[2])
            text = pruned_text(leaf_id, reason)
            new_body = _pruned_body(body, text)
            conn.execute("UPDATE messages SET text = ?, body = ? WHERE pk = ?", (text, new_body, pk))
            conn.reindex_message(pk, old_text, text)
            self._decoded.pop(mid, None)
            return max(0, len(old_text.encode()) + len(body) - len(text.encode()) - len(new_body))

    def enforce_size_limit(self, max_bytes: int) -> dict[str, Any]:
        """Keep the store under ``max_bytes``: while it is over, drop the raw
        text of the oldest :meth:`prunable` messages (their rows, ids, turns,
        times and token counts stay; their text becomes :func:`pruned_text`)
        until the bytes freed bring it to 90% of the limit. A message no
        summary covers, or covered only by an extractive or uncondensed
        leaf, or still in the assembly, is never touched, so the store may
        stay over the limit."""
        size = self.size_bytes()
        report: dict[str, Any] = {"sizeBytes": size, "maxBytes": max_bytes, "pruned": 0, "freedBytes": 0}
        if max_bytes <= 0 or size <= max_bytes:
            return report
        excess = size - int(max_bytes * 0.9)
        freed = pruned = last = 0
        while freed < excess:
            batch = self.prunable(after_pk=last)
            if not batch:
                break
            for pk, session_id, leaf_id, _ in batch:
                last = pk
                got = self.prune_message(session_id, pk, leaf_id)
                pruned += 1
                freed += got
                if freed >= excess:
                    break
        after = self.size_bytes()
        report.update(pruned=pruned, freedBytes=freed, sizeAfter=after, overLimit=after > max_bytes)
        if pruned:
            log.info("lossless store pruned to its size limit", extra={"fields": dict(report)})
        return report

    def doctor(self, max_bytes: int = 0) -> dict[str, Any]:
        """The store's health: ``problems`` (integrity, search index out of
        step with the rows, orphan or broken summaries, gaps in a session's
        messages; empty when healthy), ``warnings`` (over the size limit) and
        figures."""
        problems: list[str] = []
        with self._lock:
            problems.extend(self._conn.check())
            q = self._conn.execute

            def count(sql: str) -> int:
                return int(q(sql).fetchone()[0])

            checks = {
                "summary sources whose summary is missing": "SELECT COUNT(*) FROM summary_sources ss WHERE NOT EXISTS (SELECT 1 FROM summaries s WHERE s.id = ss.summary_id)",
                "summary sources naming no stored message or summary": (
                    "SELECT COUNT(*) FROM summary_sources ss WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = ss.source_id) "
                    "AND NOT EXISTS (SELECT 1 FROM summaries s WHERE s.id = ss.source_id)"
                ),
                "summaries without sources (orphan summaries)": "SELECT COUNT(*) FROM summaries s WHERE NOT EXISTS (SELECT 1 FROM summary_sources ss WHERE ss.summary_id = s.id)",
                "summaries condensed into a missing summary": (
                    "SELECT COUNT(*) FROM summaries s WHERE s.parent_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM summaries p WHERE p.id = s.parent_id)"
                ),
                "sessions whose messages have gaps in seq": (
                    "SELECT COUNT(*) FROM (SELECT session_id FROM messages GROUP BY session_id HAVING COUNT(*) <> MAX(seq)) g"
                ),
                "sessions whose summarized_seq is not where their leaf summaries reach": (
                    "SELECT COUNT(*) FROM sessions ss WHERE ss.summarized_seq <> "
                    "COALESCE((SELECT MAX(s.seq_hi) FROM summaries s WHERE s.session_id = ss.session_id AND s.depth = 0), 0)"
                ),
            }
            for what, sql in checks.items():
                n = count(sql)
                if n:
                    problems.append(f"{n} {what}")
            figures = {
                "sessions": count("SELECT COUNT(*) FROM sessions"),
                "messages": count("SELECT COUNT(*) FROM messages"),
                "prunedMessages": int(
                    q("SELECT COUNT(*) FROM messages WHERE SUBSTR(text, 1, ?) = ?", (len(PRUNED_PREFIX), PRUNED_PREFIX)).fetchone()[0]
                ),
                "summaries": count("SELECT COUNT(*) FROM summaries"),
            }
        size = self.size_bytes()
        warnings = []
        if max_bytes and size > max_bytes:
            warnings.append(
                f"the store holds {size / 2**20:.1f} MiB, over its limit of {max_bytes / 2**20:.1f} MiB "
                f"({len(self.prunable(1))} message(s) still prunable; maintenance prunes them)"
            )
        return {
            "backend": self._conn.kind,
            "where": self.where,
            "schemaVersion": self.schema_version(),
            "sizeBytes": size,
            "maxBytes": max_bytes or None,
            **figures,
            "problems": problems,
            "warnings": warnings,
        }

    def backup(self, path: str | os.PathLike[str]) -> None:
        """A consistent copy of the store in a new SQLite file at ``path``
        while writers go on: SQLite's online backup API, or a logical copy of
        a PostgreSQL store's rows (see :meth:`.PostgresBackend.backup`). The
        copy is a complete SQLite store."""
        dest = Path(path)
        if dest.exists():
            raise StoreError(f"{dest} exists; give a new file name")
        try:
            fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # it holds prompts
            os.close(fd)
            with self._lock:
                self._conn.backup(dest)
        except BackendError as exc:
            dest.unlink(missing_ok=True)
            raise StoreError(str(exc)) from None
        except Exception as exc:  # OSError, sqlite3.Error, psycopg.Error
            dest.unlink(missing_ok=True)
            raise StoreError(f"cannot back up the lossless store to {dest}: {exc}") from exc

    # ------------------------------------------------------------ status

    def status(self, session_id: str) -> dict[str, Any]:
        """Per-session figures for an operator (see :func:`engines.lossless.status`)."""
        session = self.session(session_id)
        with self._lock:
            count, tokens = self._conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            by_depth = {
                str(depth): {"total": int(total), "active": int(active), "fallback": int(fallback)}
                for depth, total, active, fallback in self._conn.execute(
                    "SELECT depth, COUNT(*), SUM(CASE WHEN parent_id IS NULL THEN 1 ELSE 0 END), SUM(fallback) FROM summaries "
                    "WHERE session_id = ? GROUP BY depth ORDER BY depth",
                    (session_id,),
                )
            }
        return {
            "sessionId": session_id,
            "sessionKey": session.session_key,
            "messages": int(count),
            "messageTokens": int(tokens),
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
            "skipped": skipped_figures(self, session_id),
            "modelCalls": call_figures(self, session_id),
        }


PRUNED_PREFIX = "[pruned: "


def pruned_text(leaf_id: str, reason: str = SIZE_LIMIT) -> str:
    """What a message's text becomes when the size limit (or a retention
    rule, see :mod:`.retention`) drops it (see :meth:`Store.enforce_size_limit`)."""
    return f"{PRUNED_PREFIX}this message's raw text was dropped {reason}; summary {leaf_id} keeps what it said]"


def _pruned_body(body: bytes, text: str) -> bytes:
    """The message's OpenClaw JSON with every content block replaced by one text
    block holding ``text`` (role, ids, tool name and time kept), so it still decodes."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return json.dumps({"role": "user", "content": text, "timestamp": 0}).encode()
    if isinstance(data.get("content"), list):
        data["content"] = [{"type": "text", "text": text}]
    elif "content" in data:
        data["content"] = text
    if "summary" in data:
        data["summary"] = text
    data.pop("details", None)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


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
