"""The lossless store's messages: taking a session's new messages in, in
order and once each, and reading them back (rows and decoded messages)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engines.api import AgentMessage, CompactionSummaryMessage, ToolResultMessage, UserMessage, decode_openclaw, encode_openclaw

from .messages import message_id, message_text
from .rows import _CHUNK, _MESSAGE_COLUMNS, LargeOutputRow, MessageRow, StoreCore, _message_row

#: Messages of one ingestion kept decoded in the cache (the newest).
_SEEDED = 256


class MessageRows(StoreCore):
    """Ingestion and reads of the ``messages`` table."""

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
        *,
        budget: int | None = None,
        expect_stored: bool = False,
    ) -> list[str] | None:
        """Store the messages whose identity is new, in order, in one
        transaction; return the ids of those stored. ``budget``: the token
        budget last seen, noted in the same transaction.

        ``expect_stored``: the caller knows the session to hold messages;
        when it holds none (its messages were dropped meanwhile, ``engines
        lossless prune``), nothing is written and None is returned, so that
        the caller can store the whole history again, oldest first.

        A ``compactionSummary`` message is stored only while the session has
        no message yet (history from before the engine knew the session):
        otherwise it stands for messages the store already holds verbatim.

        One read (the session's last message and which identities it holds)
        and one batch of writes: on PostgreSQL, two round trips.
        """
        if len(messages) != len(idents):
            raise ValueError("one identity per message is needed")
        if not messages:
            return []
        wanted = list(dict.fromkeys(idents))
        with self._tx(session_id) as conn:
            last = conn.execute("SELECT seq, turn FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,))
            found = []
            for i in range(0, len(wanted), _CHUNK):
                part = wanted[i : i + _CHUNK]
                marks = ",".join("?" * len(part))
                found.append(conn.execute(f"SELECT ident FROM messages WHERE session_id = ? AND ident IN ({marks})", (session_id, *part)))
            row = last.fetchone()
            if expect_stored and row is None:
                return None
            seq, turn = (row[0], row[1]) if row else (0, 0)
            present = {r[0] for cursor in found for r in cursor}
            rows: list[tuple[Any, ...]] = []
            stored: list[str] = []
            bodies: list[tuple[str, bytes]] = []
            for message, ident in zip(messages, idents, strict=True):
                if ident in present or (isinstance(message, CompactionSummaryMessage) and seq > 0):
                    continue
                present.add(ident)  # twice in one batch: stored once
                turn = turn + 1 if isinstance(message, UserMessage) else turn
                seq += 1
                mid = message_id(session_id, ident)
                body = encode_openclaw(message)
                rows.append(
                    (
                        mid,
                        session_id,
                        ident,
                        seq,
                        max(turn, 1),
                        message.role,
                        message.tool_name if isinstance(message, ToolResultMessage) else None,
                        int(getattr(message, "timestamp", 0) or 0),
                        count_tokens(message),
                        message_text(message),
                        body,
                    )
                )
                stored.append(mid)
                bodies.append((mid, body))
            if rows or budget is not None:
                conn.execute(
                    "INSERT INTO sessions (session_id, session_key, budget) VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
                    "session_key = COALESCE(excluded.session_key, sessions.session_key), budget = COALESCE(excluded.budget, sessions.budget)",
                    (session_id, session_key, budget),
                )
            if rows:
                # The identities were read under the session's lock: no row conflicts.
                conn.executemany(
                    "INSERT INTO messages (id, session_id, ident, seq, turn, role, tool_name, timestamp, tokens, text, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                self._unfolded_chars += sum(len(r[9]) for r in rows)  # their words wait in the index's pending list
        # What this process wrote, decoded once for the assemblies to come
        # (the newest of a large batch: the ones a tail reads), not read back;
        # under the lock, as every use of the cache (a decode in another
        # thread hands back what it found cached).
        with self._lock:
            for mid, body in bodies[-_SEEDED:]:
                self._decoded.put(mid, decode_openclaw(body), len(body))
            self._decoded.trim()
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

    def messages_with_outputs(self, session_id: str, lo: int, hi: int | None = None) -> tuple[list[MessageRow], dict[str, LargeOutputRow]]:
        """:meth:`messages_between` and the out-of-line records of those
        messages (:meth:`.SessionRows.large_outputs`), in one statement."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {', '.join('m.' + c for c in _MESSAGE_COLUMNS.split(', '))}, o.message_id, o.seq, o.tokens, o.stub_tokens, o.summary "
                "FROM messages m LEFT JOIN large_outputs o ON o.message_id = m.id "
                "WHERE m.session_id = ? AND m.seq >= ? AND m.seq <= ? ORDER BY m.seq",
                (session_id, lo, hi if hi is not None else 2**62),
            )
            out: list[MessageRow] = []
            recorded: dict[str, LargeOutputRow] = {}
            for r in rows:
                out.append(_message_row(r))
                if r[8] is not None:
                    recorded[r[8]] = LargeOutputRow(message_id=r[8], seq=r[9], tokens=r[10], stub_tokens=r[11], summary=r[12])
            return out, recorded

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
                    self._decoded.put(mid, decode_openclaw(body), len(body))
            return self._decoded.use([r.id for r in rows])
