"""The lossless store's messages: taking a session's new messages in, in
order and once each, and reading them back (rows and decoded messages)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from engines.api import AgentMessage, CompactionSummaryMessage, ToolResultMessage, UserMessage, decode_openclaw, encode_openclaw

from .messages import message_id, message_text
from .rows import _CHUNK, _MESSAGE_COLUMNS, MessageRow, StoreCore, _message_row


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
                    self._decoded.put(mid, decode_openclaw(body), len(body))
            return self._decoded.use([r.id for r in rows])
