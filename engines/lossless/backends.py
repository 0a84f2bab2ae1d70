"""Where the lossless store's rows live: SQLite (the embedded default) or PostgreSQL.

:class:`~engines.lossless.store.Store` holds every operation of the store in
portable SQL (``?`` placeholders, ``ON CONFLICT ... DO NOTHING``); a
:class:`Backend` is what differs between the databases:

- running a statement (``execute``/``executemany``: the PostgreSQL backend
  turns ``?`` into psycopg's ``%s``);
- a write transaction that excludes every other writer of the same session,
  in this process or another host (:meth:`Backend.transaction`: SQLite's
  ``BEGIN IMMEDIATE``, which locks the whole file; PostgreSQL's transaction
  with ``pg_advisory_xact_lock`` on a key hashed from the session id);
- the migrations (:data:`.schema.MIGRATIONS` for SQLite,
  :data:`.schema.PG_MIGRATIONS` for PostgreSQL, with a DDL translation for
  any later migration that has no PostgreSQL text of its own);
- full-text search (FTS5 ``MATCH`` and ``snippet``; ``tsvector`` ``@@``
  and :func:`snippet`);
- the size of the store, its integrity checks and its backup.

Both are synchronous: the engine calls the store from worker threads
(``trio.to_thread.run_sync``), serialised by the store's lock.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from .schema import MIGRATIONS, PG_MIGRATIONS, SCHEMA_VERSION, pg_ddl

__all__ = ["BUSY_TIMEOUT", "Backend", "BackendError", "PostgresBackend", "SqliteBackend", "enter_wal", "fts_words", "redact_url"]

_VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
_MIGRATION_LOCK = "lossless:migrations"


class BackendError(Exception):
    """The database cannot be reached or used; the message says which and why."""


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Backend(Protocol):
    """One connection to one database (see the module documentation)."""

    #: ``"sqlite"`` or ``"postgres"``.
    kind: str
    #: Where the rows are, for messages: a file path, or the URL without its password.
    where: str

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self, lock: str) -> contextlib.AbstractContextManager[None]:
        """One write transaction, excluding every other writer holding ``lock``."""
        ...

    def migrate(self, log: Any) -> None:
        """Bring the database to :data:`SCHEMA_VERSION`, each migration in its own transaction."""
        ...

    def version(self) -> int: ...

    def reindex_message(self, pk: int, old_text: str, new_text: str) -> None:
        """Keep the search index in step after a message's text changed (inside a transaction)."""
        ...

    def size_bytes(self) -> int:
        """Bytes the store's data takes in the database."""
        ...

    def check(self) -> list[str]:
        """Problems the database itself finds (integrity, search index); empty when none."""
        ...

    def backup(self, path: Path) -> None: ...

    def tidy_index(self) -> None:
        """Fold the full-text index's pending entries into it (PostgreSQL's
        GIN pending lists; nothing on SQLite). Never raises."""
        ...

    def close(self) -> None: ...


def fts_words(match: str) -> tuple[list[str], bool]:
    """The words of an FTS5 query as :func:`engines.lossless.tools.fts_queries`
    builds them (quoted words joined by AND or OR), and whether any word will do."""
    words = [w.replace('""', '"') for w in re.findall(r'"((?:[^"]|"")*)"', match)]
    if not words:  # a bare word
        words = re.findall(r"\w+", match)
    return words, " OR " in match


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://…"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc[-1]}"))


# ---------------------------------------------------------------- SQLite

BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another connection's write lock."""


def enter_wal(conn: sqlite3.Connection, deadline: float) -> None:
    """Put the file in WAL mode, trying again while another connection holds
    it, until ``deadline`` (``time.monotonic()``).

    Two processes opening one new store at once both switch it to WAL. The
    switch reads the file's header, then takes the write lock to rewrite it;
    when the other connection is mid-switch, SQLite answers ``database is
    locked`` at once rather than call the busy handler (waiting while holding
    the read lock could deadlock), so the busy timeout does not cover it. A
    sidecar starting beside another then failed to open its store (the
    two-process test: 1 open in a few hundred under load)."""
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class SqliteBackend:
    """One SQLite file in WAL mode (``synchronous=NORMAL``, :data:`BUSY_TIMEOUT` busy timeout)."""

    kind = "sqlite"

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.where = str(path)

    @classmethod
    def open(cls, path: Path) -> SqliteBackend:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
            enter_wal(conn, time.monotonic() + BUSY_TIMEOUT)
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return cls(conn, path)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self, lock: str) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the file's write lock: every writer is excluded, whatever ``lock``.
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def version(self) -> int:
        self.conn.execute(_VERSION_TABLE)
        row = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def migrate(self, log: Any) -> None:
        with self.transaction(_MIGRATION_LOCK):
            current = self.version()
        _refuse_newer(current, self.where)
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            with self.transaction(_MIGRATION_LOCK):
                if self.version() >= version:  # another process got there first
                    continue
                for statement in statements:
                    self.conn.execute(statement)
                self.conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, int(time.time() * 1000)))
            log.info("lossless store migrated", extra={"fields": {"path": self.where, "version": version}})

    def reindex_message(self, pk: int, old_text: str, new_text: str) -> None:
        self.conn.execute("INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', ?, ?)", (pk, old_text))
        self.conn.execute("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (pk, new_text))

    def size_bytes(self) -> int:
        # Pages in use: freed pages (after pruning) are reused before the file grows.
        page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * page_size)

    def check(self) -> list[str]:
        problems: list[str] = []
        result = [r[0] for r in self.conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            problems.append("integrity_check: " + "; ".join(str(r) for r in result[:5]))
        for table in ("messages", "summaries"):
            try:
                self.conn.execute(f"INSERT INTO {table}_fts ({table}_fts, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{table}_fts does not match the {table} table: {exc}")
                continue
            rows = self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            indexed = self.conn.execute(f"SELECT COUNT(*) FROM {table}_fts_docsize").fetchone()[0]
            if rows != indexed:
                problems.append(f"{table}_fts indexes {indexed} rows, the {table} table holds {rows}")
        return problems

    def backup(self, path: Path) -> None:
        dest = sqlite3.connect(path)
        try:
            self.conn.backup(dest)  # the online backup API: consistent while writers go on
        finally:
            dest.close()

    def tidy_index(self) -> None:
        pass  # FTS5 merges its own segments as rows go in

    def close(self) -> None:
        self.conn.close()


# ---------------------------------------------------------------- PostgreSQL

_TOKEN = re.compile(r"\w+", re.UNICODE)


def snippet(text: str, words: Sequence[str], size: int = 16) -> str:
    """About what FTS5's ``snippet(..., '', '', '…', 16)`` gives: the window of
    ``size`` word tokens holding the most query words (a token matches a word
    it equals or, for a word of letters, shares a stem-like prefix with; a
    window of equal words wins over one of prefixes), cut at token
    boundaries, with ``…`` where text was left out. (``ts_headline`` drops
    the tail of a hyphenated identifier such as ``pg-kestrel-07`` at a
    fragment's end.) A word with digits (``pasted07``) is matched as it is,
    as both indexes take it: no stem."""
    tokens = [(m.start(), m.end(), m.group().lower()) for m in _TOKEN.finditer(text)]
    if not tokens:
        return text[:200]
    wanted = [w.lower() for w in words]

    def hit(token: str) -> tuple[int, bool]:
        for i, w in enumerate(wanted):
            if token == w:
                return i, True
        for i, w in enumerate(wanted):
            if w.isalpha() and len(w) >= 4 and len(token) >= 4 and token[: max(4, len(w) - 2)] == w[: max(4, len(w) - 2)]:
                return i, False
        return -1, False

    found = [hit(t[2]) for t in tokens]
    best, best_score = 0, (-1, -1)
    for start in range(len(tokens)):
        if found[start][0] < 0:
            continue
        window = found[start : start + size]
        score = (len({f for f, _ in window if f >= 0}), len({f for f, exact in window if exact}))
        if score > best_score:
            best, best_score = start, score
    start = max(0, min(best - 2, len(tokens) - size))
    end = min(len(tokens), start + size)
    out = text[tokens[start][0] : tokens[end - 1][1]]
    return ("…" if start > 0 else "") + out + ("…" if end < len(tokens) else "")


_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO", re.IGNORECASE)


class PostgresBackend:
    """One psycopg 3 connection (autocommit; explicit transactions for writes).

    A write transaction takes ``pg_advisory_xact_lock`` on a 64-bit hash of
    its lock name (``lossless:<session id>``), so two sidecars on two hosts
    writing one session take turns exactly as two processes on one SQLite
    file do; sessions do not wait for each other. Migrations take a lock of
    their own. A connection found broken is opened again before the next
    statement outside a transaction.
    """

    kind = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = redact_url(url)
        self._psycopg = _import_psycopg()
        self.conn: Any = None
        self._in_tx = False
        self._pipeline: Any = None
        self._tidy = True
        self._connect()

    def _connect(self) -> None:
        try:
            self.conn = self._psycopg.connect(self.url, autocommit=True, connect_timeout=10, application_name="codex-sidecar lossless")
        except self._psycopg.Error as exc:
            raise BackendError(f"cannot connect to the lossless store {self.where}: {_first_line(exc)}") from None
        # psycopg prepares a statement on its 5th run, and PostgreSQL then may
        # keep one generic plan for it for the connection's life: planned
        # while the session's tables were a few rows (and not yet analysed),
        # that plan scans them whole, and a turn's identity lookup grew from
        # 1 ms to 15 ms of server CPU over 5,000 turns. Each run is planned
        # for its own values and the tables as they are now (~0.1 ms).
        with contextlib.suppress(self._psycopg.Error):  # PostgreSQL before 12 has no such setting
            self.conn.execute("SET plan_cache_mode = force_custom_plan")

    def _live(self) -> Any:
        if not self._in_tx and (self.conn is None or self.conn.closed or self.conn.broken):
            self._connect()
        return self.conn

    @staticmethod
    def _sql(sql: str) -> str:
        """psycopg's placeholders; SQLite's ``INSERT OR IGNORE`` as ``ON CONFLICT DO NOTHING``."""
        out = sql.replace("%", "%%").replace("?", "%s")
        if _OR_IGNORE.match(out):
            out = _OR_IGNORE.sub("INSERT INTO", out, count=1).rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
        return out

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        cursor = self._live().execute(self._sql(sql), tuple(params))
        return cursor if self._pipeline is None else _PipelinedCursor(cursor, self._pipeline)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._live().cursor() as cur:
            cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    @contextlib.contextmanager
    def transaction(self, lock: str) -> Iterator[None]:
        """In pipeline mode: ``BEGIN``, the advisory lock and the statements
        up to the first read reach the server together, and the writes after
        the last read go with the ``COMMIT`` (a turn's ingestion is two round
        trips, not one per statement). The statements still run in order and
        the transaction is still all or nothing: on any error the pipeline is
        synced (the server skips what follows a failed statement) and the
        transaction rolled back."""
        conn = self._live()
        self._in_tx = True
        try:
            with conn.pipeline() as pipeline:
                self._pipeline = pipeline
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,))
                yield
                conn.execute("COMMIT")
        except BaseException:
            self._pipeline = None
            if not conn.closed and conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(self._psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
        finally:
            self._in_tx = False
            self._pipeline = None

    def version(self) -> int:
        row = self.conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'schema_version'"
        ).fetchone()
        if row is None:
            return 0
        return int(self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0)

    def migrate(self, log: Any) -> None:
        current = self.version()
        _refuse_newer(current, self.where)
        for version, statements in MIGRATIONS:
            if version <= current:
                continue
            with self.transaction(_MIGRATION_LOCK):
                self.conn.execute(pg_ddl(_VERSION_TABLE))
                if self.version() >= version:  # another sidecar got there first
                    continue
                for statement in PG_MIGRATIONS.get(version) or [pg_ddl(s) for s in statements]:
                    self.conn.execute(statement)
                self.conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, %s)", (version, int(time.time() * 1000)))
            log.info("lossless store migrated", extra={"fields": {"path": self.where, "version": version}})

    def reindex_message(self, pk: int, old_text: str, new_text: str) -> None:
        pass  # text_tsv is a generated column

    def size_bytes(self) -> int:
        row = self._live().execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' "
            "AND c.relname IN ('messages', 'summaries', 'summary_sources', 'sessions', 'large_outputs', 'schema_version')"
        ).fetchone()
        return int(row[0])

    def check(self) -> list[str]:
        problems: list[str] = []
        for table in ("messages", "summaries"):
            (stale,) = self._live().execute(
                f"SELECT COUNT(*) FROM {table} WHERE text_tsv IS DISTINCT FROM to_tsvector('lossless', text)"
            ).fetchone()
            if stale:
                problems.append(f"{table}: {stale} rows whose search vector does not match their text")
        return problems

    def backup(self, path: Path) -> None:
        """A logical copy into a new SQLite store file at ``path`` (the same
        rows, ids and ``pk`` values; its FTS5 index built as the rows go in),
        read in one ``REPEATABLE READ`` transaction, so it is consistent while
        other sidecars write. ``pg_dump`` remains the database-level backup."""
        import logging

        dest = SqliteBackend.open(path)
        try:
            dest.migrate(logging.getLogger("engines.lossless.store"))
            tables = [
                r[0]
                for r in dest.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
                if r[0] != "schema_version" and not r[0].startswith(("sqlite_", "messages_fts", "summaries_fts"))
            ]
            conn = self._live()
            with dest.transaction("backup"), conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                for table in tables:
                    ours = [r[1] for r in dest.conn.execute(f"PRAGMA table_info({table})")]
                    theirs = {
                        r[0]
                        for r in conn.execute(
                            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = %s",
                            (table,),
                        )
                    }
                    columns = [c for c in ours if c in theirs]
                    names = ", ".join(columns)
                    insert = f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT {names} FROM {table}")
                        while rows := cur.fetchmany(500):
                            dest.conn.executemany(insert, [tuple(r) for r in rows])
        finally:
            dest.close()

    def tidy_index(self) -> None:
        """Fold the GIN indexes' pending lists into them. With ``fastupdate``
        (PostgreSQL's default) new rows' words wait in a pending list, up to
        ``gin_pending_list_limit`` (4 MB) or the next (auto)vacuum, and every
        search reads that list whole: at 5,000 turns, 1.5 MB pending made a
        rare word's search 52 ms of server CPU instead of 1 ms. Done after
        each turn the list stays a turn's words. Only the indexes' owner may
        do it: when refused, it is not tried again (searches then read the
        list, as before)."""
        if not self._tidy:
            return
        try:
            self._live().execute(
                "SELECT gin_clean_pending_list('messages_text_tsv'::regclass), gin_clean_pending_list('summaries_text_tsv'::regclass)"
            )
        except self._psycopg.Error as exc:
            self._tidy = False
            logging.getLogger("engines.lossless.store").info(
                "lossless store: the search index's pending entries are left to autovacuum", extra={"fields": {"reason": _first_line(exc)}}
            )

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class _PipelinedCursor:
    """A cursor of a statement sent in pipeline mode: reading its rows waits
    for them (psycopg does that itself); so does its ``rowcount``."""

    def __init__(self, cursor: Any, pipeline: Any) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        if not self._cursor.pgresult:
            self._pipeline.sync()
        return int(self._cursor.rowcount)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall())

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise BackendError(
            "[engines.lossless] database_url names PostgreSQL, but psycopg is not installed: "
            "pip install 'openclaw-codex-sidecar[postgres]'"
        ) from None
    return psycopg


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _refuse_newer(current: int, where: str) -> None:
    if current > SCHEMA_VERSION:
        raise BackendError(
            f"the lossless store {where} has schema version {current}, newer than this "
            f"engine's {SCHEMA_VERSION}; upgrade the sidecar or use another store"
        )
