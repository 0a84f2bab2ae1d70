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
    "FTS_CANDIDATES",
    "REGEX_SCAN_ROWS",
    "GrepQuery",
    "Hit",
    "agent_of",
    "agent_sessions",
    "owner",
    "page_filter",
    "parse_time",
    "regex_reach",
    "regex_snippet",
    "search",
    "session_agent",
    "set_agent",
]

#: Most rows (messages, then summaries) a regex search reads, newest first
#: (from ``before`` when given), before it stops: a regex cannot use the
#: index, so its work is bounded (about 40 ms on a quiet 2-CPU machine; the
#: answer says when rows were left unread, see :func:`regex_reach`).
REGEX_SCAN_ROWS = 4_000
#: The full-text hits ranked, per table: the newest this many matches of the
#: scope (and time range). A word in every message of a long session would
#: otherwise be scored, and sorted, for each of them (0.5-0.7 s at 20,000
#: messages); a rarer word's matches are all ranked.
FTS_CANDIDATES = 2_000
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


def _order(q: GrepQuery, rank: str, time_col: str, seq_col: str) -> str:
    """The order of the ranked candidates: by relevance (ties newest first),
    else newest first (one session: its order; an agent's sessions: by time first)."""
    if q.sort == "relevance":
        return f"{rank} DESC, {time_col} DESC, {seq_col} DESC"
    return f"{seq_col} DESC" if q.agent is None else f"{time_col} DESC, {seq_col} DESC"


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
    sources: dict[str, Any] = {}  # what each hit's snippet is made from, once the hits are chosen
    for row in messages:
        mid, session_id, role, turn, seq, ts, tool_name, body, source, score = row
        if tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools)):
            continue
        sources[mid] = source
        hits.append(Hit(id=mid, kind="message", session_id=session_id, role=role, turns=(turn, turn), seq=seq, time=ts, snippet="", score=float(score)))
    for row in summaries:
        sid, session_id, depth, turn_lo, turn_hi, seq_hi, ts, source, score = row
        sources[sid] = source
        hits.append(
            Hit(id=sid, kind="summary", session_id=session_id, role=f"summary d{depth}", turns=(turn_lo, turn_hi), seq=seq_hi, time=ts, snippet="", score=float(score))
        )
    if q.sort == "relevance":
        hits.sort(key=lambda h: (-h.score, -h.time, -h.seq, h.kind != "message", h.id))
    elif q.agent is None:
        hits.sort(key=lambda h: (-h.seq, h.kind != "message", h.id))
    else:
        hits.sort(key=lambda h: (-h.time, -h.seq, h.kind != "message", h.id))
    chosen = hits[: q.limit]
    with store._lock:
        snippets = _snippets(store, q, [(h.id, h.kind, sources[h.id]) for h in chosen])
    return [msgspec.structs.replace(h, snippet=snippets.get(h.id, "")) for h in chosen]


def _snippets(store: Store, q: GrepQuery, wanted: Sequence[tuple[str, str, Any]]) -> dict[str, str]:
    """The snippets of the hits shown only: FTS5's ``snippet`` on SQLite (one
    query a table: FTS5 reads the match again for each row asked), a window
    of the text's words on PostgreSQL."""
    out: dict[str, str] = {}
    by_table: dict[str, dict[int, str]] = {}
    for ident, kind, source in wanted:
        if isinstance(source, tuple):  # (text, words)
            out[ident] = word_snippet(source[0], source[1])
        else:
            by_table.setdefault("messages" if kind == "message" else "summaries", {})[int(source)] = ident
    for table, idents in by_table.items():
        fts = f"{table}_fts"
        marks = ",".join("?" * len(idents))
        for pk, snip in store.backend.execute(
            f"SELECT rowid, snippet({fts}, 0, '', '', '…', 16) FROM {fts} WHERE {fts} MATCH ? AND rowid IN ({marks})", (q.match, *idents)
        ):
            out[idents[pk]] = snip
    return out


def _sqlite_hits(
    store: Store, q: GrepQuery, table: str, cols: tuple[str, str], where: str, params: list[Any], fetch: int, candidates: int = FTS_CANDIDATES
) -> list[tuple[int, float]]:
    """FTS5 hits of one table: ``(pk, score)``, best first. The
    index drives (``CROSS JOIN`` keeps the FTS5 table the outer loop: joined
    the other way, SQLite walks the session's rows and runs the match for
    each, seconds for a rare word in a long session), newest match first
    (FTS5 reads its index backwards, no sort), and stops at ``candidates``
    (:data:`FTS_CANDIDATES`) matches of the scope; only those are scored and
    ordered (snippets are made for the hits shown only, :func:`_snippets`).
    ``cols``: the table's time and order columns."""
    fts = f"{table}_fts"
    alias = "m" if table == "messages" else "s"
    time_col, seq_col = cols
    rows = store.backend.execute(
        f"SELECT r, score FROM (SELECT {fts}.rowid AS r, -bm25({fts}) AS score, {alias}.{time_col} AS tm, {alias}.{seq_col} AS sq "
        f"FROM {fts} CROSS JOIN {table} {alias} ON {alias}.pk = {fts}.rowid WHERE {fts} MATCH ?{where} ORDER BY {fts}.rowid DESC LIMIT ?) "
        f"ORDER BY {_order(q, 'score', 'tm', 'sq')} LIMIT ?",
        (q.match, *params, candidates, fetch),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _pg_ranked(
    store: Store, q: GrepQuery, table: str, cols: str, times: tuple[str, str], where: str, params: list[Any], fetch: int, candidates: int = FTS_CANDIDATES
) -> list[Any]:
    """PostgreSQL's hits of one table, as :func:`_sqlite_hits`: the newest
    ``candidates`` (:data:`FTS_CANDIDATES`) matches of the scope (by ``pk``)
    ranked by ``ts_rank``, the best ``fetch`` of them kept, and only those
    read whole (joined before the choice, every candidate's text and body
    were read and the table scanned: half of a 5,000-turn search's time).
    The rank is computed above the candidates' ``LIMIT``, so on the
    candidates only, whatever the plan: below it, a plan that reads every
    match of the scope before sorting by ``pk`` (the planner's choice when
    it has no statistics) ranked each of them, reading its ``text_tsv``
    from TOAST (11,666 for ``status`` over an agent's sessions: 42,000
    buffers against 14,000).
    ``cols``: the columns returned (alias ``x``), followed by the text and
    the rank."""
    words, tsq = _tsquery(q.match)
    if not words:
        return []
    time_col, seq_col = times
    sql = (
        f"SELECT {cols}, x.text, c.score FROM (SELECT k.pk, ts_rank(k.tsv, k.q) AS score, k.tm, k.sq FROM "
        f"(SELECT x.pk, x.text_tsv AS tsv, t.q, x.{time_col} AS tm, x.{seq_col} AS sq "
        f"FROM {table} x, (SELECT {tsq}) AS t(q) WHERE x.text_tsv @@ t.q{where} ORDER BY x.pk DESC LIMIT ?) AS k "
        f"ORDER BY {_order(q, 'ts_rank(k.tsv, k.q)', 'k.tm', 'k.sq')} LIMIT ?) AS c "
        f"JOIN {table} x ON x.pk = c.pk ORDER BY {_order(q, 'c.score', 'c.tm', 'c.sq')}"
    )
    return [(*r, words) for r in store.backend.execute(sql, (*words, *params, candidates, fetch))]


def _pk_range(store: Store, q: GrepQuery) -> tuple[int, int] | None:
    """The ``pk`` range holding every message of the scope in the time range
    (``messages_by_time``), so that the full-text index reads that stretch
    only, not every match newer than ``since``; None when nothing is in it."""
    where, params = _scope(q, "m", "timestamp", "timestamp")
    row = store.backend.execute(f"SELECT MIN(m.pk), MAX(m.pk) FROM messages m WHERE 1 = 1{where}", params).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def _fts_messages(store: Store, q: GrepQuery, kind: str) -> list[tuple[Any, ...]]:
    fetch = q.limit + 64  # room for the recall tools' own messages, left out after
    # Newest first in one session: its newest ``fetch`` matches are the
    # answer (a session's messages are stored in order: ``pk`` follows ``seq``),
    # so only they are read and scored.
    candidates = min(fetch, FTS_CANDIDATES) if q.sort == "newest" and q.agent is None else FTS_CANDIDATES
    span: tuple[int, ...] = ()
    if q.since is not None or q.before is not None:
        bounds = _pk_range(store, q)
        if bounds is None:
            return []
        span = bounds
    if kind == "sqlite":
        where, params = _scope(q, "m", "timestamp", "timestamp")
        if span:
            where, params = where + " AND messages_fts.rowid BETWEEN ? AND ?", [*params, *span]
        cols = "m.id, m.session_id, m.role, m.turn, m.seq, m.timestamp, m.tool_name, m.body"
        hits = _sqlite_hits(store, q, "messages", ("timestamp", "seq"), where, params, fetch, candidates)
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        by_pk = {r[0]: r[1:] for r in store.backend.execute(f"SELECT m.pk, {cols} FROM messages m WHERE m.pk IN ({marks})", [h[0] for h in hits])}
        return [(*by_pk[pk], pk, score) for pk, score in hits if pk in by_pk]
    where, params = _scope(q, "x", "timestamp", "timestamp")
    if span:
        where, params = where + " AND x.pk BETWEEN ? AND ?", [*params, *span]
    cols = "x.id, x.session_id, x.role, x.turn, x.seq, x.timestamp, x.tool_name, x.body"
    rows = _pg_ranked(store, q, "messages", cols, ("timestamp", "seq"), where, params, fetch, candidates)
    return [(*r[:8], (r[8], r[10]), r[9]) for r in rows]


def _fts_summaries(store: Store, q: GrepQuery, kind: str) -> list[tuple[Any, ...]]:
    if kind == "sqlite":
        where, params = _scope(q, "s", "time_lo", "time_hi")
        cols = "s.id, s.session_id, s.depth, s.turn_lo, s.turn_hi, s.seq_hi, s.time_hi"
        hits = _sqlite_hits(store, q, "summaries", ("time_hi", "seq_hi"), where, params, q.limit)
        if not hits:
            return []
        marks = ",".join("?" * len(hits))
        by_pk = {r[0]: r[1:] for r in store.backend.execute(f"SELECT s.pk, {cols} FROM summaries s WHERE s.pk IN ({marks})", [h[0] for h in hits])}
        return [(*by_pk[pk], pk, score) for pk, score in hits if pk in by_pk]
    where, params = _scope(q, "x", "time_lo", "time_hi")
    cols = "x.id, x.session_id, x.depth, x.turn_lo, x.turn_hi, x.seq_hi, x.time_hi"
    rows = _pg_ranked(store, q, "summaries", cols, ("time_hi", "seq_hi"), where, params, q.limit)
    return [(*r[:7], (r[7], r[9]), r[8]) for r in rows]


def _tsquery(match: str) -> tuple[list[str], str]:
    from .backends import fts_words

    words, any_word = fts_words(match)
    return words, (" || " if any_word else " && ").join(["plainto_tsquery('lossless', ?)"] * len(words))


_NOT_ACROSS_ROWS = re.compile(r"\\[AZz]|\(\?<|\(\?[=!>]|[*+?}]\+")


def page_filter(regex: str) -> re.Pattern[str] | None:
    r"""A pattern that finds a match in rows joined by newlines whenever
    ``regex`` matches one of them (it may also match across two: the rows
    are then searched one by one), or None when joining could hide a match:
    ``\A``/``\Z`` anchors, lookarounds, atomic groups, possessive
    repeats. ``^`` and ``$`` match at each row's ends (``re.MULTILINE``)."""
    if _NOT_ACROSS_ROWS.search(regex):
        return None
    try:
        return re.compile(regex, re.MULTILINE)
    except re.error:
        return None


def regex_reach(store: Store, q: GrepQuery) -> int:
    """How many messages of the scope and time range a regex search left
    unread (beyond :data:`REGEX_SCAN_ROWS`); 0 when it read them all."""
    where, params = _scope(q, "m", "timestamp", "timestamp")
    with store._lock:
        row = store.backend.execute(f"SELECT COUNT(*) FROM messages m WHERE 1 = 1{where}", params).fetchone()
    return max(0, int(row[0]) - REGEX_SCAN_ROWS)


def _regex(store: Store, q: GrepQuery, exclude_tools: Sequence[str]) -> list[Hit]:
    """Regex hits newest first: rows read a page at a time, newest first
    (messages, then summaries; by ``seq`` in one session, else newest
    stored), at most :data:`REGEX_SCAN_ROWS`. A page is first searched
    whole (:func:`page_filter`): one C-speed search tells most pages apart
    without a Python step a row."""
    pattern = re.compile(q.match)
    whole = page_filter(q.match)
    hits: list[Hit] = []
    budget = REGEX_SCAN_ROWS
    for table in ("messages", "summaries"):
        if table == "messages":
            where, params = _scope(q, "m", "timestamp", "timestamp")
            # One session: pages down its (session_id, seq) index, no sort.
            key = "m.seq" if q.agent is None else "m.pk"
            sql = (
                f"SELECT {key}, m.id, m.session_id, m.role, m.turn, m.turn, m.seq, m.timestamp, m.tool_name, "
                "CASE WHEN m.role = 'assistant' AND substr(m.text, 1, 11) = '[tool call ' THEN m.body END, m.text "
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
            if whole is not None and whole.search("\n".join(r[-1] for r in rows)) is None:
                continue  # no row of the page can match
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
