"""The recall tools the model can call: ``lcm_grep``, ``lcm_describe``, ``lcm_expand``.

Each handler is a synchronous function of the store and the parsed
arguments (the engine runs it in a worker thread) and returns the text the
model reads. Bad arguments raise :class:`ToolArgumentError`, which the engine
turns into an error result with its message.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from engines.api import ToolSpec

from .config import LosslessConfig
from .messages import iso_minute
from .search import REGEX_SCAN_ROWS, GrepQuery, owner, parse_time, regex_reach, search, session_agent
from .store import MessageRow, Store

__all__ = ["TOOL_NAMES", "TOOL_SPECS", "ToolArgumentError", "run_tool"]


class ToolArgumentError(ValueError):
    """A tool call's arguments are unusable; the message says how."""


TOOL_SPECS: list[ToolSpec] = [
    ToolSpec(
        name="lcm_grep",
        description=(
            "Search every message and summary of this conversation, including parts no longer "
            "shown in full (scope \"agent\": every conversation of this agent). Full-text by "
            "default, most relevant first; regex: true for a regular expression, newest first. "
            "since/before narrow it to a time range. Each hit with its id (msg_... or sum_...), "
            "role, turn, time and a snippet. Use it to recall a detail before answering from memory."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Words to look for (all of them; any of them if nothing has all), or with regex: true a regular expression (Python syntax; (?i) for any case).",
                },
                "regex": {"type": "boolean", "description": "Read query as a regular expression (default false)."},
                "since": {
                    "type": "string",
                    "description": "Only hits at or after this time: an ISO date or time (UTC unless an offset is given), or a time ago such as 90m, 6h, 3d, 2w.",
                },
                "before": {"type": "string", "description": "Only hits before this time (same forms as since)."},
                "scope": {
                    "type": "string",
                    "enum": ["session", "agent"],
                    "description": "session (default): this conversation; agent: every conversation of this agent kept in the store.",
                },
                "sort": {
                    "type": "string",
                    "enum": ["relevance", "newest"],
                    "description": "Order of full-text hits: relevance (default) or newest first. Regex hits are newest first.",
                },
                "limit": {"type": "integer", "minimum": 1, "description": "Most hits to return."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="lcm_describe",
        description=(
            "What a summary (sum_...) covers: its text, depth, turns, time range and source ids. "
            "Given a message id (msg_...), its role, turn, time and the summary that covers it."
        ),
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "string", "description": "A sum_... or msg_... id."}},
            "required": ["id"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="lcm_expand",
        description=(
            "The original messages under a summary (sum_...), oldest first, up to max_tokens; "
            "or one message (msg_...) in full, up to max_tokens, a page at a time (offset) when it is longer."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "A sum_... or msg_... id."},
                "max_tokens": {"type": "integer", "minimum": 1, "description": "Largest answer, in tokens."},
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "For a long message: the character to start from (the previous page says where the next starts).",
                },
            },
            "required": ["id"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        name="lcm_expand_query",
        description=(
            "Answer a question from the original messages of this conversation without filling "
            "this context: the matching messages (full-text matches of the query, or the "
            "summaries/messages given in summary_ids, expanded down to the raw messages, large "
            "outputs included) go to a separate model call, and only its answer comes back, "
            "with the ids it used, within max_tokens."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "The question to answer from the conversation's history."},
                "summary_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Summaries (sum_...) or messages (msg_...) to answer from; without them, the full-text matches of the query.",
                },
                "max_tokens": {"type": "integer", "minimum": 100, "description": "Largest answer, in tokens."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
]

TOOL_NAMES: tuple[str, ...] = tuple(spec.name for spec in TOOL_SPECS)

_ID = re.compile(r"(msg|sum)_[0-9a-f]{16}")
#: lcm_grep's bounds: the whole answer, one snippet, a regular expression.
MAX_GREP_CHARS = 12_000
MAX_SNIPPET_CHARS = 300
MAX_REGEX_CHARS = 500
_WORD = re.compile(r"\w+", re.UNICODE)


def _check_keys(args: Mapping[str, Any], allowed: set[str], name: str) -> None:
    extra = sorted(set(args) - allowed)
    if extra:
        raise ToolArgumentError(f"{name} takes {', '.join(sorted(allowed))}; unknown argument(s): {', '.join(extra)}")


def _int_arg(args: Mapping[str, Any], key: str, default: int, maximum: int, name: str) -> int:
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolArgumentError(f"{name}: {key} must be a positive integer, got {value!r}")
    return min(value, maximum)


def _id_arg(args: Mapping[str, Any], name: str) -> str:
    value = args.get("id")
    if not isinstance(value, str) or not value.strip():
        raise ToolArgumentError(f"{name}: id must be a non-empty string such as sum_0123456789abcdef")
    value = value.strip()
    if not _ID.fullmatch(value):
        raise ToolArgumentError(f"{name}: {value!r} is not an id; ids look like sum_0123456789abcdef or msg_0123456789abcdef")
    return value


def fts_queries(query: str) -> list[str]:
    """FTS5 queries for free text: all words (each quoted, so no word is read
    as an operator), then any of them. Empty when there is no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    if not words:
        return []
    quoted = ['"' + w.replace('"', '""') + '"' for w in words[:32]]
    all_of = " AND ".join(quoted)
    return [all_of] if len(quoted) == 1 else [all_of, " OR ".join(quoted)]


def _render_message(row: MessageRow) -> str:
    return f"[{row.id} turn {row.turn} {row.role} {iso_minute(row.timestamp)}]\n{row.text}"


def _choice(args: Mapping[str, Any], key: str, allowed: tuple[str, ...], name: str) -> str:
    value = args.get(key, allowed[0])
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise ToolArgumentError(f"{name}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _time_arg(args: Mapping[str, Any], key: str, now_ms: int, name: str) -> int | None:
    value = args.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"{name}: {key} must be a string such as 2026-11-30, 2026-11-30T14:05Z or 3d")
    try:
        return parse_time(value, now_ms)
    except ValueError as exc:
        raise ToolArgumentError(f"{name}: {key}: {exc}") from None


def _grep(store: Store, cfg: LosslessConfig, session_id: str, args: Mapping[str, Any], agent: str | None, now_ms: int) -> str:
    _check_keys(args, {"query", "limit", "regex", "since", "before", "scope", "sort"}, "lcm_grep")
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolArgumentError("lcm_grep: query must be a non-empty string")
    limit = _int_arg(args, "limit", cfg.grep_default_limit, cfg.grep_max_limit, "lcm_grep")
    regex = args.get("regex", False)
    if not isinstance(regex, bool):
        raise ToolArgumentError(f"lcm_grep: regex must be true or false, got {regex!r}")
    scope = _choice(args, "scope", ("session", "agent"), "lcm_grep")
    sort = _choice(args, "sort", ("relevance", "newest"), "lcm_grep")
    since = _time_arg(args, "since", now_ms, "lcm_grep")
    before = _time_arg(args, "before", now_ms, "lcm_grep")
    if since is not None and before is not None and since >= before:
        raise ToolArgumentError("lcm_grep: since must be earlier than before")
    if scope == "agent" and agent is None:
        agent = session_agent(store, session_id)
    if scope == "agent" and agent is None:
        raise ToolArgumentError(
            "lcm_grep: scope agent needs this conversation's OpenClaw agent, which is not known here; search with scope session"
        )
    base = GrepQuery(
        match=query,
        session_id=session_id,
        regex=regex,
        agent=agent if scope == "agent" else None,
        since=since,
        before=before,
        sort="newest" if regex else sort,  # type: ignore[arg-type]
        limit=limit,
    )
    if regex:
        if len(query) > MAX_REGEX_CHARS:
            raise ToolArgumentError(f"lcm_grep: the regular expression is longer than {MAX_REGEX_CHARS} characters")
        try:
            hits = search(store, base, exclude_tools=TOOL_NAMES)
        except re.error as exc:
            raise ToolArgumentError(f"lcm_grep: {query!r} is not a regular expression: {exc}") from None
        mode = "regex"
    else:
        queries = fts_queries(query)
        if not queries:
            raise ToolArgumentError(f"lcm_grep: the query {query!r} has no word to search for")
        hits = []
        mode = "all words"
        for i, match in enumerate(queries):
            hits = search(store, msgspec.structs.replace(base, match=match), exclude_tools=TOOL_NAMES)
            if hits:
                mode = "all words" if i == 0 else "any word"
                break
    where = "this agent's conversations" if scope == "agent" else "this conversation"
    span = _span(since, before)
    unread = regex_reach(store, base) if regex and len(hits) < limit else 0
    if unread:
        span += f" (the newest {REGEX_SCAN_ROWS:,} messages: a regex search reads no further; {unread:,} older ones unread, give before to reach them)"
    if not hits:
        return f"No match for {query!r} in {where}{span}."
    order = "newest first" if base.sort == "newest" else "most relevant first"
    lines = [f"{len(hits)} hit{'s' if len(hits) != 1 else ''} for {query!r} ({mode}) in {where}{span}, {order}:"]
    used = len(lines[0])
    for n, h in enumerate(hits):
        turns = h.turns
        at = f"turn {turns[0]}" if turns[0] == turns[1] else f"turns {turns[0]}-{turns[1]}"
        other = f"session {h.session_id} · " if h.session_id != session_id else ""
        snippet = " ".join(str(h.snippet).split())
        if len(snippet) > MAX_SNIPPET_CHARS:
            snippet = snippet[: MAX_SNIPPET_CHARS - 1] + "…"
        line = f"- {h.id} · {other}{h.role} · {at} · {iso_minute(h.time)}: {snippet}"
        if used + len(line) + 1 > MAX_GREP_CHARS:
            lines.append(f"[… {len(hits) - n} more hit(s) not shown: narrow the query, the time range or the limit]")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def _span(since: int | None, before: int | None) -> str:
    if since is None and before is None:
        return ""
    parts = ([f"since {iso_minute(since)}"] if since is not None else []) + ([f"before {iso_minute(before)}"] if before is not None else [])
    return " " + " and ".join(parts)


def _describe(store: Store, cfg: LosslessConfig, session_id: str, args: Mapping[str, Any]) -> str:
    _check_keys(args, {"id"}, "lcm_describe")
    ident = _id_arg(args, "lcm_describe")
    if ident.startswith("msg_"):
        row = store.message(session_id, ident)
        if row is None:
            raise ToolArgumentError(f"lcm_describe: no message {ident} in this conversation")
        cover = store.covering_summary(session_id, row.seq)
        out_of_line = row.id in store.large_outputs(session_id, row.seq, row.seq)
        covered = (
            f"covered by summary {cover.id}"
            if cover
            else "not summarised yet (kept out of line: the context shows a reference and a short summary)"
            if out_of_line
            else "not summarised yet (still shown in full)"
        )
        return (
            f"{row.id}: {row.role} message, turn {row.turn}, {iso_minute(row.timestamp)}, {row.tokens} tokens, {covered}.\n"
            f"Use lcm_expand with this id for its full text{' (a page at a time)' if out_of_line else ''}."
        )
    s = store.summary(session_id, ident)
    if s is None:
        raise ToolArgumentError(f"lcm_describe: no summary {ident} in this conversation")
    sources = store.summary_sources(s.id)
    kind = "leaf summary of messages" if s.depth == 0 else f"condensed summary of depth-{s.depth - 1} summaries"
    parent = f"condensed into {s.parent_id}" if s.parent_id else "not condensed further"
    lines = [
        f"{s.id}: {kind}, depth {s.depth}, turns {s.turn_lo}-{s.turn_hi}, "
        f"{iso_minute(s.time_lo)} to {iso_minute(s.time_hi)}",
        f"{len(sources)} sources ({s.source_tokens} tokens) summarised in {s.tokens} tokens; "
        f"{'extractive stand-in (the summariser was unavailable)' if s.fallback else 'written by the model'}; {parent}.",
        "sources: " + ", ".join(sources),
        "",
        s.text,
    ]
    return "\n".join(lines)


def _expand(
    store: Store, cfg: LosslessConfig, session_id: str, args: Mapping[str, Any], count_tokens: Callable[[str], int]
) -> str:
    _check_keys(args, {"id", "max_tokens", "offset"}, "lcm_expand")
    ident = _id_arg(args, "lcm_expand")
    cap = _int_arg(args, "max_tokens", cfg.expand_default_tokens, cfg.expand_max_tokens, "lcm_expand")
    offset = args.get("offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ToolArgumentError(f"lcm_expand: offset must be a character offset (an integer >= 0), got {offset!r}")
    if ident.startswith("msg_"):
        row = store.message(session_id, ident)
        if row is None:
            raise ToolArgumentError(f"lcm_expand: no message {ident} in this conversation")
        if offset == 0:
            text = _render_message(row)
            if count_tokens(text) <= cap:
                return text
        return _page(row, offset, cap, cfg, count_tokens)
    if offset:
        raise ToolArgumentError("lcm_expand: offset applies to a message id (msg_...) only")
    s = store.summary(session_id, ident)
    if s is None:
        raise ToolArgumentError(f"lcm_expand: no summary {ident} in this conversation")
    rows = store.messages_between(session_id, s.seq_lo, s.seq_hi)
    header = f"{len(rows)} messages under {s.id} (turns {s.turn_lo}-{s.turn_hi}), oldest first:"
    used = count_tokens(header)
    parts = [header]
    shown = 0
    for row in rows:
        text = _render_message(row)
        tokens = count_tokens(text) + 1
        if used + tokens > cap:
            break
        parts.append(text)
        used += tokens
        shown += 1
    if shown < len(rows):
        rest = rows[shown:]
        hint = (
            f"expand its sources ({', '.join(store.summary_sources(s.id))}) one at a time"
            if s.depth > 0
            else f"pass a larger max_tokens (at most {cfg.expand_max_tokens}) or lcm_expand single messages such as {rest[0].id}"
        )
        parts.append(
            f"[… {len(rest)} more message{'s' if len(rest) != 1 else ''} (turns {rest[0].turn}-{rest[-1].turn}, "
            f"{sum(r.tokens for r in rest)} tokens) not shown within {cap} tokens; {hint}]"
        )
    return "\n\n".join(parts)


def _page(row: MessageRow, offset: int, cap: int, cfg: LosslessConfig, count_tokens: Callable[[str], int]) -> str:
    """One page of a long message: the characters from ``offset`` that fit
    ``cap`` tokens beside a header, then where the next page starts. The
    pages of one message, joined, are its text exactly."""
    text = row.text
    if offset >= len(text):
        raise ToolArgumentError(f"lcm_expand: offset {offset} is past the end of {row.id} ({len(text)} characters)")
    header = f"[{row.id} turn {row.turn} {row.role} {iso_minute(row.timestamp)}, characters {offset}-{{end}} of {len(text)}]\n"
    room = max(1, cap - count_tokens(header.format(end=len(text))) - 1)
    # A token is rarely longer than 16 characters: search a window that size.
    body = head_within(text[offset : offset + room * 16], room, count_tokens) or text[offset : offset + 1]
    end = offset + len(body)
    page = header.format(end=end) + body
    if end < len(text):
        page += (
            f"\n[… message cut at {cap} tokens: characters {end}-{len(text)} not shown; call lcm_expand with "
            f"id={row.id} offset={end} for the next page (max_tokens up to {cfg.expand_max_tokens})]"
        )
    return page


def head_within(text: str, cap: int, count_tokens: Callable[[str], int]) -> str:
    """The longest head of ``text`` (by characters, found by halving) within ``cap`` tokens."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def run_tool(
    store: Store,
    cfg: LosslessConfig,
    session_id: str,
    name: str,
    args: Mapping[str, Any],
    count_tokens: Callable[[str], int],
    agent: str | None = None,
) -> str:
    """Run one tool call; raises :class:`ToolArgumentError` on bad input.
    ``agent``: the conversation's OpenClaw agent (``lcm_grep`` scope
    ``agent``; ``lcm_describe``/``lcm_expand`` then take ids of the agent's
    other conversations too)."""
    if not isinstance(args, Mapping):
        raise ToolArgumentError(f"{name}: arguments must be a JSON object")
    if name == "lcm_grep":
        return _grep(store, cfg, session_id, args, agent, int(time.time() * 1000))
    if name in ("lcm_describe", "lcm_expand"):
        ident = args.get("id")
        if agent is not None and isinstance(ident, str) and _ID.fullmatch(ident.strip()):
            session_id = owner(store, session_id, agent, ident.strip()) or session_id
    if name == "lcm_describe":
        return _describe(store, cfg, session_id, args)
    if name == "lcm_expand":
        return _expand(store, cfg, session_id, args, count_tokens)
    raise ToolArgumentError(f"unknown tool {name!r}; this engine offers {', '.join(TOOL_NAMES)}")
