"""The lossless store's tables and the migrations that make them.

Tables
------
``messages``
    Every message of every session, verbatim (``body`` is
    :func:`engines.api.encode_openclaw` of the message), with its identity
    (``ident``, see :mod:`.messages`), its place in the session (``seq``, from
    1, gap-free, in ingestion order), the user turn it belongs to (``turn``:
    the number of user messages up to and including it), role, tool name,
    timestamp, token count and plain text. ``(session_id, ident)`` is unique,
    so ingestion is idempotent whoever replays it.
``summaries`` / ``summary_sources``
    Leaf summaries (depth 0, over consecutive raw messages) and condensed
    summaries (depth d+1, over consecutive depth-d summaries), each with the
    message range it covers (``seq_lo``..``seq_hi``, turns, times), its text,
    whether the text is the extractive stand-in (``fallback``), and the
    summary that later condensed it (``parent_id``). ``summary_sources`` lists
    the source ids in order.
``sessions``
    Per session: how far leaf summaries reach (``summarized_seq``), the
    current *frame* (the summary messages the assembly starts with, as
    rendered JSON, and ``frame_seq``: raw messages after it follow verbatim),
    the number of compaction steps, and the last compaction and assembly (for
    the operator's status view), and the OpenClaw agent it belongs to
    (``agent_id``, migration 4; NULL when unknown).
``messages_fts`` / ``summaries_fts``
    FTS5 indexes over the texts, kept in step by triggers (external content).
``large_outputs``
    Messages kept out of line (a tool result or user message over
    ``large_output_tokens``): the message itself stays whole in ``messages``;
    this row holds the short summary the assembly shows in its place and the
    tokens of that stand-in (migration 3).
``model_calls``
    The engine's own model calls (summaries, retries, ``lcm_expand_query``):
    when, for which session and purpose, on which model, and whether the
    hourly cap refused it (``capped``); rows older than a week are dropped
    (migration 5).
``skipped_messages``
    Identities of messages the engine left out of the store: OpenClaw's
    heartbeat turns and sessions whose key matches
    ``ignore_session_patterns`` (``reason``), so a later snapshot holding
    them does not store them either (migration 5).
``schema_version``
    The migrations applied; :data:`MIGRATIONS` brings an older file up to
    date when :class:`~engines.lossless.store.Store` opens it, each
    migration in its own transaction.

PostgreSQL
----------
The same tables and columns in PostgreSQL (:data:`PG_MIGRATIONS`, same
version numbers): ``BIGINT`` for every integer (millisecond times overflow
``INTEGER``), ``BYTEA`` for the JSON bodies and frames, identity ``pk``
columns, and instead of FTS5 a stored generated ``text_tsv`` column with a
GIN index on ``messages`` and ``summaries``, built with the ``lossless`` text
search configuration (the English Snowball stemmer without a stop-word list,
so that, as with FTS5's porter tokenizer, every word is searchable). A
migration with no PostgreSQL text of its own is applied through
:func:`pg_ddl`, a translation of the SQLite DDL used here.
"""

from __future__ import annotations

import re

__all__ = ["MIGRATIONS", "PG_MIGRATIONS", "SCHEMA_VERSION", "pg_ddl"]

# Each migration is a list of statements run in one transaction together with
# its schema_version row. Never edit a released migration: add a new one.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (
        1,
        [
            """CREATE TABLE messages (
                pk INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                session_id TEXT NOT NULL,
                ident TEXT NOT NULL,
                seq INTEGER NOT NULL,
                turn INTEGER NOT NULL,
                role TEXT NOT NULL,
                tool_name TEXT,
                timestamp INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                text TEXT NOT NULL,
                body BLOB NOT NULL,
                UNIQUE (session_id, ident),
                UNIQUE (session_id, seq)
            )""",
            """CREATE TABLE summaries (
                pk INTEGER PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                session_id TEXT NOT NULL,
                depth INTEGER NOT NULL,
                seq_lo INTEGER NOT NULL,
                seq_hi INTEGER NOT NULL,
                turn_lo INTEGER NOT NULL,
                turn_hi INTEGER NOT NULL,
                time_lo INTEGER NOT NULL,
                time_hi INTEGER NOT NULL,
                text TEXT NOT NULL,
                tokens INTEGER NOT NULL,
                source_tokens INTEGER NOT NULL,
                fallback INTEGER NOT NULL,
                attempts INTEGER NOT NULL,
                parent_id TEXT,
                created_at INTEGER NOT NULL
            )""",
            "CREATE INDEX summaries_by_session ON summaries (session_id, parent_id, depth, seq_lo)",
            """CREATE TABLE summary_sources (
                summary_id TEXT NOT NULL,
                ord INTEGER NOT NULL,
                source_id TEXT NOT NULL,
                PRIMARY KEY (summary_id, ord)
            )""",
            """CREATE TABLE sessions (
                session_id TEXT PRIMARY KEY,
                session_key TEXT,
                summarized_seq INTEGER NOT NULL DEFAULT 0,
                frame_seq INTEGER NOT NULL DEFAULT 0,
                frame BLOB NOT NULL DEFAULT '[]',
                frame_ids TEXT NOT NULL DEFAULT '[]',
                frame_tokens INTEGER NOT NULL DEFAULT 0,
                steps INTEGER NOT NULL DEFAULT 0,
                budget INTEGER,
                last_compaction TEXT,
                last_assembly TEXT
            )""",
        ],
    ),
    (
        2,
        [
            "CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages', content_rowid='pk', "
            "tokenize='porter unicode61 remove_diacritics 2')",
            "CREATE VIRTUAL TABLE summaries_fts USING fts5(text, content='summaries', content_rowid='pk', "
            "tokenize='porter unicode61 remove_diacritics 2')",
            """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
                INSERT INTO messages_fts (rowid, text) VALUES (new.pk, new.text);
            END""",
            """CREATE TRIGGER summaries_fts_insert AFTER INSERT ON summaries BEGIN
                INSERT INTO summaries_fts (rowid, text) VALUES (new.pk, new.text);
            END""",
            """CREATE TRIGGER summaries_fts_update AFTER UPDATE OF text ON summaries BEGIN
                INSERT INTO summaries_fts (summaries_fts, rowid, text) VALUES ('delete', old.pk, old.text);
                INSERT INTO summaries_fts (rowid, text) VALUES (new.pk, new.text);
            END""",
            # Rows written before the index existed (a version-1 file) are indexed now.
            "INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')",
            "INSERT INTO summaries_fts (summaries_fts) VALUES ('rebuild')",
        ],
    ),
    (
        3,
        [
            """CREATE TABLE large_outputs (
                message_id TEXT PRIMARY KEY,
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                tokens INTEGER NOT NULL,
                stub_tokens INTEGER NOT NULL,
                summary TEXT NOT NULL,
                created_at INTEGER NOT NULL
            )""",
            "CREATE INDEX large_outputs_by_session ON large_outputs (session_id, seq)",
        ],
    ),
    (
        4,
        [
            # The OpenClaw agent a session belongs to, for lcm_grep's scope "agent" (see :mod:`.search`).
            "ALTER TABLE sessions ADD COLUMN agent_id TEXT",
            "CREATE INDEX sessions_by_agent ON sessions (agent_id)",
        ],
    ),
    (
        5,
        [
            # The engine's own model calls (engines/lossless/calls_budget.py).
            """CREATE TABLE model_calls (
                pk INTEGER PRIMARY KEY,
                at_ms INTEGER NOT NULL,
                session_id TEXT NOT NULL,
                purpose TEXT NOT NULL,
                model TEXT,
                capped INTEGER NOT NULL
            )""",
            "CREATE INDEX model_calls_by_time ON model_calls (at_ms)",
            "CREATE INDEX model_calls_by_session ON model_calls (session_id, at_ms)",
            # Messages left out of the store (engines/lossless/skipping.py).
            """CREATE TABLE skipped_messages (
                session_id TEXT NOT NULL,
                ident TEXT NOT NULL,
                reason TEXT NOT NULL,
                at_ms INTEGER NOT NULL,
                PRIMARY KEY (session_id, ident)
            )""",
        ],
    ),
    (
        6,
        [
            # lcm_grep's since/before as a range of pk the full-text index reads (engines/lossless/search.py).
            "CREATE INDEX messages_by_time ON messages (session_id, timestamp)",
        ],
    ),
    (
        7,
        [
            # The extractive summaries maintain retries (Store.fallback_summaries): found without
            # reading every summary of the session (0.04 -> 0.7 ms a turn over 5,000 turns).
            "CREATE INDEX summaries_fallback ON summaries (session_id, attempts, seq_lo, depth) WHERE fallback = 1",
        ],
    ),
]

SCHEMA_VERSION = MIGRATIONS[-1][0]


def pg_ddl(statement: str) -> str:
    """A SQLite DDL statement of this module in PostgreSQL's terms: integers
    as ``BIGINT``, ``BLOB`` as ``BYTEA``, ``INTEGER PRIMARY KEY`` as an
    identity column. Enough for plain tables and indexes; FTS5 tables and
    triggers need a PostgreSQL text of their own in :data:`PG_MIGRATIONS`."""
    out = re.sub(r"\bINTEGER PRIMARY KEY\b(?!\s*\()", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", statement)
    out = re.sub(r"\bINTEGER\b", "BIGINT", out)
    out = re.sub(r"\bBLOB\b", "BYTEA", out)
    return out


def _pg_search(table: str) -> list[str]:
    return [
        f"ALTER TABLE {table} ADD COLUMN text_tsv tsvector GENERATED ALWAYS AS (to_tsvector('lossless'::regconfig, text)) STORED",
        f"CREATE INDEX {table}_text_tsv ON {table} USING GIN (text_tsv)",
    ]


# PostgreSQL texts of the migrations above, by version (see the module documentation).
PG_MIGRATIONS: dict[int, list[str]] = {
    1: [
        pg_ddl(s).replace("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
        for s in MIGRATIONS[0][1]
    ],
    2: [
        "CREATE TEXT SEARCH DICTIONARY lossless_stem (TEMPLATE = snowball, Language = english)",
        "CREATE TEXT SEARCH CONFIGURATION lossless (COPY = pg_catalog.simple)",
        "ALTER TEXT SEARCH CONFIGURATION lossless ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part "
        "WITH lossless_stem",
        *_pg_search("messages"),
        *_pg_search("summaries"),
    ],
}
