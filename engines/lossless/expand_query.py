"""``lcm_expand_query``: a question answered from the original messages by a
model call of its own, so the main context gets the answer, not the text.

1. :func:`prepare` (synchronous, in a worker thread) finds the sources: the
   ``summary_ids`` given (summaries and/or message ids), or else the
   full-text hits for the query (as ``lcm_grep`` finds them). Each is expanded
   down to its raw messages (a summary: every message it covers; a message
   hit: it and its neighbours), message hits first, then summary hits, each
   newest first, and as many
   messages as fit ``expand_query_input_tokens`` go into one prompt, oldest
   first, each under its id (an out-of-line message with its original text).
2. :func:`ask` sends that prompt through ``host.complete`` (the sidecar's lean
   completion thread) under ``expand_query_timeout``; any failure gives an
   error result naming the sources, so the model can fall back on
   ``lcm_expand`` (fail open: nothing is lost, nothing hangs).
3. :func:`finish` keeps the whole tool result within ``max_tokens``: the
   answer, cut if it must be, then a line with the ids the answer cites (or
   every id handed over when it cites none) and the sources expanded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
import trio

from engines.api import CompleteParams, EngineHost

from .config import LosslessConfig
from .messages import iso_minute
from .store import MessageRow, Store
from .tools import TOOL_NAMES, ToolArgumentError, fts_queries, head_within

log = logging.getLogger("engines.lossless.expand_query")

__all__ = ["NAME", "SYSTEM_PROMPT", "QueryPlan", "ask", "failure_text", "finish", "prepare"]

NAME = "lcm_expand_query"
MIN_ANSWER_TOKENS = 100
#: Neighbours on each side of a message hit that go with it.
HIT_NEIGHBOURS = 1
_LISTED = 12  # ids listed in the result's last line, per list

SYSTEM_PROMPT = (
    "You answer one question about earlier parts of a long conversation between a user and a "
    "coding assistant, using only the excerpts you are given (each under its id). Be brief and "
    "exact: quote identifiers, numbers, file paths and commands verbatim. If the excerpts do not "
    "answer the question, say so. Do not address the user. End with one line "
    "'Sources: ' followed by the ids (msg_...) of the excerpts you used."
)

_ID = re.compile(r"(?:msg|sum)_[0-9a-f]{16}")
_SOURCES_LINE = re.compile(r"^\s*sources?\s*:.*$", re.IGNORECASE | re.MULTILINE)


class QueryPlan(msgspec.Struct, frozen=True, kw_only=True):
    """One question ready for the model."""

    query: str
    max_tokens: int
    prompt: str
    sources: list[str]  # the summaries / message hits expanded, in the order used
    message_ids: list[str]  # the messages handed over, oldest first
    input_tokens: int
    left_out: int  # messages of the sources that did not fit the input cap


def _args(args: Mapping[str, Any], cfg: LosslessConfig) -> tuple[str, list[str] | None, int]:
    error = ToolArgumentError
    extra = sorted(set(args) - {"query", "summary_ids", "max_tokens"})
    if extra:
        raise error(f"{NAME} takes query, summary_ids, max_tokens; unknown argument(s): {', '.join(extra)}")
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise error(f"{NAME}: query must be a non-empty string (the question to answer)")
    ids = args.get("summary_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise error(f"{NAME}: summary_ids must be a list of ids such as sum_0123456789abcdef")
        ids = [i.strip() for i in ids if i.strip()]
        bad = [i for i in ids if not _ID.fullmatch(i)]
        if bad:
            raise error(f"{NAME}: {bad[0]!r} is not an id; ids look like sum_0123456789abcdef or msg_0123456789abcdef")
        ids = list(dict.fromkeys(ids)) or None
    value = args.get("max_tokens")
    if value is None:
        max_tokens = cfg.expand_query_default_tokens
    elif isinstance(value, bool) or not isinstance(value, int) or value < MIN_ANSWER_TOKENS:
        raise error(f"{NAME}: max_tokens must be an integer of at least {MIN_ANSWER_TOKENS}, got {value!r}")
    else:
        max_tokens = min(value, cfg.expand_query_max_tokens)
    return query.strip(), ids, max(max_tokens, MIN_ANSWER_TOKENS)


def _render(row: MessageRow, text: str) -> str:
    return f"[{row.id} turn {row.turn} {row.role} {iso_minute(row.timestamp)}]\n{text}"


def prepare(
    store: Store,
    cfg: LosslessConfig,
    session_id: str,
    args: Mapping[str, Any],
    count_tokens: Callable[[str], int],
) -> QueryPlan | str:
    """The prompt for one question, or (a plain string) the reason there is
    nothing to ask about. Raises ``error`` on bad arguments or unknown ids."""
    error = ToolArgumentError
    exclude_tools = TOOL_NAMES
    query, ids, max_tokens = _args(args, cfg)
    groups: list[tuple[str, list[MessageRow]]] = []
    if ids is not None:
        for ident in ids:
            if ident.startswith("sum_"):
                s = store.summary(session_id, ident)
                if s is None:
                    raise error(f"{NAME}: no summary {ident} in this conversation")
                groups.append((ident, store.messages_between(session_id, s.seq_lo, s.seq_hi)))
            else:
                row = store.message(session_id, ident)
                if row is None:
                    raise error(f"{NAME}: no message {ident} in this conversation")
                groups.append((ident, [row]))
    else:
        hits: list[dict[str, Any]] = []
        for match in fts_queries(query):
            hits = store.grep(session_id, match, cfg.grep_default_limit, exclude_tools=exclude_tools)
            if hits:
                break
        if not hits:
            return f"No match for {query!r} in this conversation: nothing to expand. Try other words, or lcm_grep."
        # The messages that match first (they are what was asked about), then
        # the summaries that match, each expanded whole while room lasts.
        for h in sorted(hits, key=lambda h: h["kind"] != "message"):
            if h["kind"] == "summary":
                s = store.summary(session_id, h["id"])
                if s is not None:
                    groups.append((h["id"], store.messages_between(session_id, s.seq_lo, s.seq_hi)))
            else:
                seq = int(h["seq"])
                groups.append((h["id"], store.messages_between(session_id, max(1, seq - HIT_NEIGHBOURS), seq + HIT_NEIGHBOURS)))
    room = cfg.expand_query_input_tokens
    chosen: dict[str, tuple[MessageRow, str]] = {}
    used_sources: list[str] = []
    left_out = 0
    for source, rows in groups:
        took = False
        for row in rows:
            if row.id in chosen:
                took = True
                continue
            if row.tool_name in exclude_tools:
                continue
            text = _render(row, row.text)
            tokens = count_tokens(text) + 1
            if tokens > room:
                if room < 200:
                    left_out += 1
                    continue
                head = head_within(row.text[: (room - 60) * 16], room - 60, count_tokens)
                text = _render(row, head) + f"\n[… cut: {len(row.text) - len(head)} more characters]"
                tokens = count_tokens(text) + 1
            chosen[row.id] = (row, text)
            room -= tokens
            took = True
        if took:
            used_sources.append(source)
    if not chosen:
        return f"The sources for {query!r} hold no message to expand."
    ordered = sorted(chosen.values(), key=lambda pair: pair[0].seq)
    excerpts = "\n\n".join(text for _, text in ordered)
    prompt = (
        f"Question: {query}\n\n"
        f"Answer in at most {max_tokens * 3 // 4} tokens, then the Sources line.\n\n"
        f"Excerpts ({len(ordered)} messages, oldest first):\n\n{excerpts}"
    )
    return QueryPlan(
        query=query,
        max_tokens=max_tokens,
        prompt=prompt,
        sources=used_sources,
        message_ids=[row.id for row, _ in ordered],
        input_tokens=cfg.expand_query_input_tokens - room,
        left_out=left_out,
    )


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_LISTED])
    return shown + (f" (+{len(ids) - _LISTED} more)" if len(ids) > _LISTED else "")


def finish(plan: QueryPlan, answer: str, count_tokens: Callable[[str], int]) -> str:
    """The tool's result: the answer and the ids it used, within ``plan.max_tokens``."""
    known = set(plan.message_ids) | set(plan.sources)
    cited = [i for i in dict.fromkeys(_ID.findall(answer)) if i in known]
    body = _SOURCES_LINE.sub("", answer).strip() or answer.strip()
    used = cited or plan.message_ids
    footer = (
        f"\n\n[ids used: {_listed(used)}{'' if cited else ' (the answer cites none: every message handed over)'}; "
        f"answered from {len(plan.message_ids)} messages ({plan.input_tokens} tokens) of {_listed(plan.sources)}"
        + (f"; {plan.left_out} more did not fit" if plan.left_out else "")
        + "; lcm_expand shows any of them in full]"
    )
    room = plan.max_tokens - count_tokens(footer) - 1
    if count_tokens(body) > room:
        body = head_within(body[: max(1, room - 8) * 16], max(1, room - 8), count_tokens).rstrip() + " […]"
    out = body + footer
    while count_tokens(out) > plan.max_tokens and len(footer) > 40:  # very long ids lists and a small cap
        footer = footer[: len(footer) * 3 // 4] + "…]"
        out = body + footer
    return out


async def ask(host: EngineHost | None, plan: QueryPlan, timeout: float) -> tuple[str | None, str]:
    """The model's answer to ``plan``, or ``(None, why)`` (``unbound``,
    ``timeout``, ``error:<type>``, ``empty``). Never raises (but lets the
    caller's cancellation through)."""
    if host is None:
        return None, "unbound"
    result: Any = None
    try:
        with trio.move_on_after(timeout):
            result = await host.complete(CompleteParams(system=SYSTEM_PROMPT, prompt=plan.prompt, max_output_tokens=plan.max_tokens))
    except Exception as exc:  # EngineHostError, or anything a host lets slip
        log.warning("lcm_expand_query call failed", extra={"fields": {"error": type(exc).__name__}})
        return None, f"error:{type(exc).__name__}"
    if result is None:
        log.warning("lcm_expand_query call timed out", extra={"fields": {"timeoutSeconds": timeout}})
        return None, "timeout"
    text = getattr(result, "text", None)
    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    return text.strip(), "model"


def failure_text(plan: QueryPlan, why: str, timeout: float) -> str:
    """The error result when the model cannot answer: why, and where to look instead."""
    reason = {
        "unbound": "this engine has no model access (it runs without the sidecar's host)",
        "timeout": f"the model did not answer within {timeout:g} s",
        "empty": "the model gave an empty answer",
        "error:CallCapReached": "the engine's model calls for this hour are used up (summary_max_calls_per_hour)",
    }.get(why, f"the model call failed ({why.removeprefix('error:')})")
    return (
        f"{NAME} could not answer: {reason}. The matching sources are {_listed(plan.sources)}; "
        f"read them with lcm_expand (or lcm_describe) instead."
    )
