"""Counting what a store does, from the database drivers' own traces:
statements run on SQLite (``sqlite3``'s trace callback) and round trips to
PostgreSQL (libpq's protocol trace: each turn of the conversation from
the client's messages to the server's answer is one round trip)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any


class Counted:
    """What :func:`counting` saw: ``count`` (SQLite: statements; PostgreSQL:
    round trips) and the statements run (SQLite: their text; PostgreSQL: their
    kind, ``Execute``, as a prepared statement's text is not sent again)."""

    def __init__(self) -> None:
        self.count = 0
        self.statements: list[str] = []


@contextlib.contextmanager
def counting(backend: Any) -> Iterator[Counted]:
    """Count, while the block runs, the statements SQLite runs or the round
    trips to PostgreSQL of the store's connection ``backend``."""
    seen = Counted()
    if backend.kind == "sqlite":
        backend.conn.set_trace_callback(lambda sql: seen.statements.append(sql))
        try:
            yield seen
        finally:
            backend.conn.set_trace_callback(None)
        seen.count = len(seen.statements)
        return
    from psycopg import pq

    with tempfile.TemporaryFile("w+") as trace:
        pgconn = backend.conn.pgconn
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield seen
        finally:
            pgconn.untrace()
        trace.seek(0)
        direction = ""
        for line in trace:
            if line.startswith("F") and "\tExecute\t" in line:
                seen.statements.append("Execute")
            now = line[:1]
            if direction == "F" and now == "B":
                seen.count += 1
            direction = now or direction
