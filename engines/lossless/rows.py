"""The lossless store's rows as typed records, and the core every part of
:class:`~engines.lossless.store.Store` works through: the backend, the lock
that serialises calls, the cache of decoded messages and the one way to
write (:meth:`StoreCore._tx`)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from engines.api import AgentMessage

from .backends import Backend


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


class DecodedMessages:
    """Decoded messages by id, least recently used first out, within
    ``max_count`` messages and ``max_bytes`` of their stored bodies: what
    assembly reads again every turn (the tail after the frame) stays, what
    compaction has put behind the frame goes. The messages of the newest
    :meth:`use` stay even past the bounds (a tail larger than the cache is
    decoded once, not every turn). Rows never change in place; a pruned
    message is :meth:`drop`-ped."""

    def __init__(self, max_count: int = 4_096, max_bytes: int = 8 << 20) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[AgentMessage, int]] = OrderedDict()
        #: The stored body bytes of the cached messages.
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, mid: object) -> bool:
        return mid in self._items

    def put(self, mid: str, message: AgentMessage, size: int) -> None:
        """Cache ``message`` (its stored body ``size`` bytes) under ``mid``."""
        self.drop(mid)
        self._items[mid] = (message, size)
        self.bytes += size

    def drop(self, mid: str) -> None:
        old = self._items.pop(mid, None)
        if old is not None:
            self.bytes -= old[1]

    def use(self, ids: Sequence[str]) -> list[AgentMessage]:
        """The cached messages of ``ids`` (each must be cached), now the most
        recently used; then the oldest others go until the bounds hold."""
        items = self._items
        out = []
        for mid in ids:
            out.append(items[mid][0])
            items.move_to_end(mid)
        self.trim(keep=len(set(ids)))
        return out

    def trim(self, keep: int = 0) -> None:
        """The oldest go until the bounds hold, but for the newest ``keep``."""
        items = self._items
        while len(items) > keep and (len(items) > self.max_count or self.bytes > self.max_bytes):
            _, (_, size) = items.popitem(last=False)
            self.bytes -= size


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class StoreCore:
    """The backend and its lock; what every part of the store shares."""

    def __init__(self, backend: Backend, path: Path | None = None) -> None:
        #: The backend; its ``execute``/``executemany`` take portable SQL with ``?`` placeholders.
        self._conn = backend
        self.backend = backend
        #: The SQLite file, or None for PostgreSQL.
        self.path = path
        self.where = backend.where
        self._lock = threading.RLock()
        self._decoded = DecodedMessages()
        #: Characters of text this store wrote since it last folded the
        #: search index's pending entries (:meth:`.Upkeep.tidy_search_index`).
        self._unfolded_chars = 0

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
