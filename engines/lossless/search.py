"""``lcm_grep``'s search over the store: full text ranked by relevance (FTS5
``bm25`` on SQLite, ``ts_rank`` on PostgreSQL) or a regular expression
(Python's ``re``, the same on both backends), in one session or every
session of the same OpenClaw agent, within a time range, with snippets.

An OpenClaw agent's sessions share the store's ``sessions.agent_id``
(migration 4). The agent of a session is known from its session key
(``agent:<id>:...``, OpenClaw's own keys, as an import or a
``session_key`` template gives them) or else from the process: OpenClaw
starts the app-server (the sidecar) with ``CODEX_HOME`` set to
``<state>/agents/<id>/agent/codex-home`` (see :func:`agent_of`).

The pure parts (the agent of a session, times given as text, the regex
snippet) are functions without I/O; :func:`search` runs the queries.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Literal

import msgspec

from .backends import snippet as word_snippet
from .store import Store

__all__ = [
    "REGEX_SCAN_ROWS",
    "GrepQuery",
    "Hit",
    "agent_of",
    "agent_sessions",
    "owner",
    "parse_time",
    "regex_snippet",
    "search",
    "session_agent",
    "set_agent",
]

#: Most rows (messages, then summaries) a regex search reads, newest first,
#: before it stops: a regex cannot use the index, so its work is bounded.
REGEX_SCAN_ROWS = 50_000
_PAGE = 500
_AGENT_KEY = re.compile(r"agent:([^:\s]+):")
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class GrepQuery(msgspec.Struct, frozen=True, kw_only=True):
    """One search. ``match`` is an FTS5 query (quoted words joined by AND or
    OR, see :func:`engines.lossless.tools.fts_queries`) or, with ``regex``, a
    Python regular expression. ``since`` (inclusive) and ``before``
    (exclusive) are ms since the epoch. With ``agent`` every session of that
    agent is searched, else ``session_id`` only."""

    match: str
    session_id: str
    regex: bool = False
    agent: str | None = None
    since: int | None = None
    before: int | None = None
    sort: Literal["relevance", "newest"] = "relevance"
    limit: int = 10


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    kind: Literal["message", "summary"]
    session_id: str
    role: str
    turns: tuple[int, int]
    seq: int
    time: int
    snippet: str
    #: Higher is more relevant (-bm25 on SQLite, ts_rank on PostgreSQL; regex hits: 0).
    score: float = 0.0


# ---------------------------------------------------------------- pure parts


def agent_of(session_key: str | None, codex_home: str | None = None) -> str | None:
    """The OpenClaw agent id of a session: from a session key
    ``agent:<id>:<rest>``, else from ``CODEX_HOME`` when it is OpenClaw's
    per-agent folder ``.../agents/<id>/agent/codex-home``; else None."""
    if session_key:
        m = _AGENT_KEY.match(session_key.strip())
        if m and _AGENT_ID.fullmatch(m.group(1)):
            return m.group(1)
    if codex_home:
        parts = PurePath(codex_home.rstrip("/")).parts
        if len(parts) >= 4 and parts[-1] == "codex-home" and parts[-2] == "agent" and parts[-4] == "agents":
            if _AGENT_ID.fullmatch(parts[-3]):
                return parts[-3]
    return None


_RELATIVE = re.compile(r"(\d+)\s*(m|min|h|d|w)", re.IGNORECASE)
_UNIT_MS = {"m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_time(value: str, now_ms: int) -> int:
    """ms since the epoch for an ISO 8601 date or time (``2026-11-30``,
    ``2026-11-30T14:05``, with ``Z`` or an offset; UTC when none) or a time
    ago (``90m``, ``6h``, ``3d``, ``2w`` before ``now_ms``). Raises
    ValueError saying what is accepted."""
    text = value.strip()
    rel = _RELATIVE.fullmatch(text)
    if rel:
        return now_ms - int(rel.group(1)) * _UNIT_MS[rel.group(2).lower()]
    try:
        moment = _dt.datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" and text else text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time: give an ISO date or time (2026-11-30, 2026-11-30T14:05Z) or a time ago (90m, 6h, 3d, 2w)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return int(moment.timestamp() * 1000)


def regex_snippet(text: str, match: re.Match[str], width: int = 160) -> str:
    """About ``width`` characters of ``text`` around ``match``, ``…`` where cut."""
    start, end = match.span()
    room = max(0, width - (end - start))
    lo = max(0, start - room // 3)
    hi = min(len(text), max(end, lo + width))
    return ("…" if lo > 0 else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _calls_only(body: Any, tools: Sequence[str]) -> bool:
    """Whether an assistant message only calls tools in ``tools`` (a recall
    tool's call is not a fact worth finding again)."""
    if not tools:
        return False
    try:
        data = json.loads(bytes(body))
    except (ValueError, TypeError):
        return False
    blocks = data.get("content") if isinstance(data, dict) else None
    if not isinstance(blocks, list) or not blocks:
        return False
    return all(isinstance(b, dict) and b.get("type") == "toolCall" and b.get("name") in tools for b in blocks)


# ---------------------------------------------------------------- agents


def set_agent(store: Store, session_id: str, agent: str) -> None:
    """Record the agent a session belongs to (its first agent stays)."""
    with store._tx(session_id) as conn:
        conn.execute("INSERT INTO sessions (session_id) VALUES (?) ON CONFLICT DO NOTHING", (session_id,))
        conn.execute("UPDATE sessions SET agent_id = ? WHERE session_id = ? AND agent_id IS NULL", (agent, session_id))


def session_agent(store: Store, session_id: str) -> str | None:
    """The agent recorded for a session, if any."""
    with store._lock:
        row = store.backend.execute("SELECT agent_id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def agent_sessions(store: Store, agent: str) -> list[str]:
    with store._lock:
        return [r[0] for r in store.backend.execute("SELECT session_id FROM sessions WHERE agent_id = ? ORDER BY 1", (agent,))]


def owner(store: Store, session_id: str, agent: str | None, ident: str) -> str | None:
    """The session holding message or summary ``ident`` if it is ``session_id``
    or, with ``agent``, a session of that agent; else None."""
    table = "messages" if ident.startswith("msg_") else "summaries"
    with store._lock:
        row = store.backend.execute(
            f"SELECT t.session_id, ss.agent_id FROM {table} t LEFT JOIN sessions ss ON ss.session_id = t.session_id WHERE t.id = ?",
            (ident,),
        ).fetchone()
    if row is None:
        return None
    if row[0] == session_id or (agent is not None and row[1] == agent):
        return str(row[0])
    return None


# ---------------------------------------------------------------- search


def _scope(q: GrepQuery, alias: str, time_lo: str, time_hi: str) -> tuple[str, list[Any]]:
    """The WHERE terms (after the match) for the sessions and the time range."""
    if q.agent is not None:
        sql = f" AND {alias}.session_id IN (SELECT session_id FROM sessions WHERE agent_id = ?)"
        params: list[Any] = [q.agent]
    else:
        sql = f" AND {alias}.session_id = ?"
        params = [q.session_id]
    if q.since is not None:
        sql += f" AND {alias}.{time_hi} >= ?"
        params.append(q.since)
    if q.before is not None:
        sql += f" AND {alias}.{time_lo} < ?"
        params.append(q.before)
    return sql, params


def _newest(q: GrepQuery, alias: str, time_col: str, seq_col: str) -> str:
    # One session: its order; an agent's sessions: by time first.
    return f"{alias}.{seq_col} DESC" if q.agent is None else f"{alias}.{time_col} DESC, {alias}.{seq_col} DESC"


def search(store: Store, q: GrepQuery, exclude_tools: Sequence[str] = ()) -> list[Hit]:
    """The hits of ``q``: full text by relevance (or newest first), or regex
    matches newest first, messages of the ``exclude_tools`` tools left out;
    at most ``q.limit``. Raises ``re.error`` for a bad regex."""
    if q.regex:
        return _regex(store, q, exclude_tools)
    kind = store.backend.kind
    with store._lock:
        messages = _fts_messages(store, q, kind)
        summaries = _fts_summaries(store, q, kind)
    hits: list[Hit] = []
    for row in messages:
        mid, session_id, role, turn, seq, ts, tool_name, body, snip, score = row
        if tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools)):
            continue
        hits.append(Hit(id=mid, kind="message", session_id=session_id, role=role, turns=(turn, turn), seq=seq, time=ts, snippet=snip, score=float(score)))
    for row in summaries:
        sid, session_id, depth, turn_lo, turn_hi, seq_hi, ts, snip, score = row
        hits.append(
            Hit(id=sid, kind="summary", session_id=session_id, role=f"summary d{depth}", turns=(turn_lo, turn_hi), seq=seq_hi, time=ts, snippet=snip, score=float(score))
        )
    if q.sort == "relevance":
        hits.sort(key=lambda h: (-h.score, -h.time, -h.seq, h.kind != "message", h.id))
    elif q.agent is None:
        hits.sort(key=lambda h: (-h.seq, h.kind != "message", h.id))
    else:
        hits.sort(key=lambda h: (-h.time, -h.seq, h.kind != "message", h.id))
    return hits[: q.limit]


def _sqlite_hits(store: Store, q: GrepQuery, table: str, order_new: str, where: str, params: list[Any], fetch: int) -> list[tuple[int, float, str]]:
    """FTS5 hits of one table: ``(pk, score, snippet)``, best first. The
    index drives (``CROSS JOIN`` keeps the FTS5 table the outer loop: joined
    the other way, SQLite walks the session's rows and runs the match for
    each, seconds for a rare word in a long session); snippets are made for
    the hits kept only."""
    fts = f"{table}_fts"
    alias = "m" if table == "messages" else "s"
    order = f"bm25({fts})" if q.sort == "relevance" else order_new
    rows = store.backend.execute(
        f"SELECT {fts}.rowid, -bm25({fts}) FROM {fts} CROSS JOIN {table} {alias} ON {alias}.pk = {fts}.rowid "
        f"WHERE {fts} MATCH ?{where} ORDER BY {order} LIMIT ?",
        (q.match, *params, fetch),
    ).fetchall()
    if not rows:
        return []
    marks = ",".join("?" * len(rows))
    snippets = dict(
        store.backend.execute(
            f"SELECT rowid, snippet({fts}, 0, '', '', '…', 16) FROM {fts} WHERE {fts} MATCH ? AND rowid IN ({marks})",
            (q.match, *[r[0] for r in rows]),
        )
    )
    return [(r[0], r[1], snippets.get(r[0], "")) for r in rows]


def _fts_messages(store: Store, q: GrepQuery, kind: str) -> list[tuple[Any, ...]]:
    where, params = _scope(q, "m", "timestamp", "timestamp")
    cols = "m.id, m.session_id, m.role, m.turn, m.seq, m.timestamp, m.tool_name, m.body"
    fetch = q.limit + 64  # room for the recall tools' own messages, left out after
    if kind == "sqlite":
        hits = _sqlite_hits(store, q, "messages", _newest(q, "m", "timestamp", "seq"), where, params, fetch)
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        by_pk = {r[0]: r[1:] for r in store.backend.execute(f"SELECT m.pk, {cols} FROM messages m WHERE m.pk IN ({marks})", [h[0] for h in hits])}
        return [(*by_pk[pk], snip, score) for pk, score, snip in hits if pk in by_pk]
    words, tsq = _tsquery(q.match)
    if not words:
        return []
    order = "ts_rank(m.text_tsv, t.q) DESC" if q.sort == "relevance" else _newest(q, "m", "timestamp", "seq")
    sql = (
        f"SELECT {cols}, m.text, ts_rank(m.text_tsv, t.q) FROM messages m, (SELECT {tsq}) AS t(q) "
        f"WHERE m.text_tsv @@ t.q{where} ORDER BY {order} LIMIT ?"
    )
    rows = store.backend.execute(sql, (*words, *params, fetch))
    return [(*r[:8], word_snippet(r[8], words), r[9]) for r in rows]


def _fts_summaries(store: Store, q: GrepQuery, kind: str) -> list[tuple[Any, ...]]:
    where, params = _scope(q, "s", "time_lo", "time_hi")
    cols = "s.id, s.session_id, s.depth, s.turn_lo, s.turn_hi, s.seq_hi, s.time_hi"
    if kind == "sqlite":
        hits = _sqlite_hits(store, q, "summaries", _newest(q, "s", "time_hi", "seq_hi"), where, params, q.limit)
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        by_pk = {r[0]: r[1:] for r in store.backend.execute(f"SELECT s.pk, {cols} FROM summaries s WHERE s.pk IN ({marks})", [h[0] for h in hits])}
        return [(*by_pk[pk], snip, score) for pk, score, snip in hits if pk in by_pk]
    words, tsq = _tsquery(q.match)
    if not words:
        return []
    order = "ts_rank(s.text_tsv, t.q) DESC" if q.sort == "relevance" else _newest(q, "s", "time_hi", "seq_hi")
    sql = (
        f"SELECT {cols}, s.text, ts_rank(s.text_tsv, t.q) FROM summaries s, (SELECT {tsq}) AS t(q) "
        f"WHERE s.text_tsv @@ t.q{where} ORDER BY {order} LIMIT ?"
    )
    rows = store.backend.execute(sql, (*words, *params, q.limit))
    return [(*r[:7], word_snippet(r[7], words), r[8]) for r in rows]


def _tsquery(match: str) -> tuple[list[str], str]:
    from .backends import fts_words

    words, any_word = fts_words(match)
    return words, (" || " if any_word else " && ").join(["plainto_tsquery('lossless', ?)"] * len(words))


def _regex(store: Store, q: GrepQuery, exclude_tools: Sequence[str]) -> list[Hit]:
    """Regex hits newest first: rows read a page at a time, newest first
    (messages, then summaries; by ``seq`` in one session, else newest
    stored), at most :data:`REGEX_SCAN_ROWS`."""
    pattern = re.compile(q.match)
    hits: list[Hit] = []
    budget = REGEX_SCAN_ROWS
    for table in ("messages", "summaries"):
        if table == "messages":
            where, params = _scope(q, "m", "timestamp", "timestamp")
            # One session: pages down its (session_id, seq) index, no sort.
            key = "m.seq" if q.agent is None else "m.pk"
            sql = (
                f"SELECT {key}, m.id, m.session_id, m.role, m.turn, m.turn, m.seq, m.timestamp, m.tool_name, "
                "CASE WHEN m.role = 'assistant' THEN m.body END, m.text "
                f"FROM messages m WHERE {key} < ?{where} ORDER BY {key} DESC LIMIT ?"
            )
        else:
            where, params = _scope(q, "s", "time_lo", "time_hi")
            sql = (
                "SELECT s.pk, s.id, s.session_id, s.depth, s.turn_lo, s.turn_hi, s.seq_hi, s.time_hi, NULL, NULL, s.text "
                f"FROM summaries s WHERE s.pk < ?{where} ORDER BY s.pk DESC LIMIT ?"
            )
        last = 2**62
        found = 0
        while budget > 0 and found < q.limit:
            with store._lock:
                rows = [tuple(r) for r in store.backend.execute(sql, (last, *params, min(_PAGE, budget)))]
            if not rows:
                break
            budget -= len(rows)
            last = rows[-1][0]
            for _, rid, session_id, role, turn_lo, turn_hi, seq, ts, tool_name, body, text in rows:
                if table == "messages" and (tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools))):
                    continue
                m = pattern.search(text)
                if m is None:
                    continue
                kind: Literal["message", "summary"] = "message" if table == "messages" else "summary"
                hits.append(
                    Hit(
                        id=rid,
                        kind=kind,
                        session_id=session_id,
                        role=role if kind == "message" else f"summary d{role}",
                        turns=(turn_lo, turn_hi),
                        seq=seq,
                        time=ts,
                        snippet=regex_snippet(text, m),
                    )
                )
                found += 1
                if found >= q.limit:
                    break
    if q.agent is None:
        hits.sort(key=lambda h: (-h.seq, h.kind != "message", h.id))
    else:
        hits.sort(key=lambda h: (-h.time, -h.seq, h.kind != "message", h.id))
    return hits[: q.limit]
