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

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from .backends import Backend, BackendError, PostgresBackend, SqliteBackend
from .calls_budget import call_figures
from .fulltext import FullText
from .ingest import MessageRows
from .rows import LargeOutputRow, MessageRow, NewSummary, SessionRow, StoreError, SummaryRow
from .schema import MIGRATIONS, SCHEMA_VERSION
from .session_rows import SessionRows
from .skipping import skipped_figures
from .summary_rows import SummaryRows
from .upkeep import PRUNED_PREFIX, Upkeep, pruned_text

log = logging.getLogger("engines.lossless.store")

__all__ = [
    "DB_NAME",
    "MIGRATIONS",
    "PRUNED_PREFIX",
    "SCHEMA_VERSION",
    "LargeOutputRow",
    "MessageRow",
    "NewSummary",
    "SessionRow",
    "Store",
    "StoreError",
    "SummaryRow",
    "pruned_text",
]

DB_NAME = "lossless.sqlite3"


# What to do about an SQLite file the engine cannot read (not a database,
# damaged): the sidecar runs legacy until it is dealt with.
_UNUSABLE_FIX = "; fix: put back a copy made by `codex-sidecar engines lossless backup`, or move the file aside (the engine then starts an empty store)"
_PERMISSION_FIX = "; fix: run this as the user the sidecar runs as (the file's owner), or give the state dir to that user (chown -R)"


def _unusable_fix(exc: BaseException) -> str:
    """The fix for a damaged file (not a database, malformed); none for an
    error of the moment (locked, read-only, cannot open), whose own words
    say what is wrong and which no restore would mend."""
    return "" if isinstance(exc, sqlite3.OperationalError) else _UNUSABLE_FIX


class Store(MessageRows, SummaryRows, SessionRows, FullText, Upkeep):
    """One store (an SQLite file or a PostgreSQL database); see the module
    documentation. Its operations live with their tables: messages
    (:mod:`.ingest`), summaries (:mod:`.summary_rows`), sessions and large
    outputs (:mod:`.session_rows`), search (:mod:`.fulltext`), size, checks
    and backup (:mod:`.upkeep`), over the shared core in :mod:`.rows`."""

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
        except PermissionError as exc:
            raise StoreError(f"cannot open the lossless store {path}: {exc.strerror}{_PERMISSION_FIX}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"the lossless store {path} is unusable: {exc}{_unusable_fix(exc)}") from exc
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
            raise StoreError(f"the lossless store {backend.where} is unusable: {exc}{_unusable_fix(exc) if path is not None else ''}") from exc
        return store

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
