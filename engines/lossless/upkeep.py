"""Keeping the lossless store healthy: its size limit (pruning the raw
text of messages a model summary keeps), its checks and its backup."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from .backends import BackendError
from .rows import StoreCore, StoreError

log = logging.getLogger("engines.lossless.store")

#: Characters of stored text between two folds of PostgreSQL's GIN pending
#: lists (about 8 turns of ~1,000 tokens). A fold has a fixed cost that
#: grows with the index (at 13,000 messages ~5 ms of server CPU for one
#: turn's words), so folding every turn cost more than the searches gained;
#: a search reads at most the pending entries of this much text.
FOLD_CHARS = 32 * 1024


def fold_due(unfolded_chars: int, limit: int) -> bool:
    """Whether the text written since the last fold is enough to fold it in."""
    return unfolded_chars >= limit


#: Why the size limit drops a message's raw text, in its ``[pruned: ...]`` notice.
SIZE_LIMIT = "to keep the store under its size limit (max_store_mb)"


class Upkeep(StoreCore):
    """Size, pruning, checks and backup of the whole store."""

    def size_bytes(self) -> int:
        """Bytes the store's data takes (SQLite: pages in use; PostgreSQL: the tables with their indexes)."""
        with self._lock:
            return self._conn.size_bytes()

    def tidy_search_index(self) -> bool:
        """Fold the full-text index's pending entries into it
        (:meth:`.backends.PostgresBackend.tidy_index`; nothing on SQLite)
        once this store has written :data:`FOLD_CHARS` characters of text
        since the last fold (:func:`fold_due`); whether it folded. The engine
        calls it in ``maintain``, off the client's path."""
        with self._lock:
            if not fold_due(self._unfolded_chars, FOLD_CHARS):
                return False
            self._unfolded_chars = 0
            self._conn.tidy_index()
            return True

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
            self._unfolded_chars += len(text)
            self._decoded.drop(mid)
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
