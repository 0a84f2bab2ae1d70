"""Large messages kept out of line: stored whole, shown as a reference.

A tool result or a user message (a pasted file) of more than
``large_output_tokens`` stays whole in the store (``messages.body``,
searchable like any message), and the assembly shows a *stand-in* in its
place: the same message (role, tool call id, tool name, error flag,
timestamp) whose only content is a reference to its id and a short
**extractive** summary (its size, its first lines, its last lines and the
lines that look like errors or warnings; deterministic, no model call). The
model reads the original with ``lcm_expand`` (a page at a time) or asks
``lcm_expand_query`` about it.

The stand-in is recorded (``large_outputs``) the first time the message is
seen over the threshold and never changes afterwards, so the assembly stays
a prefix of the next one. The client's own history (the sidecar's transcript
mirror) is not touched: the engine only changes what it assembles.

:func:`exploration_summary`, :func:`stand_in` and :func:`needs_record` are pure;
:func:`out_of_line_view` applies them to stored rows (synchronous, call it
in a worker thread).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import msgspec

from engines.api import AgentMessage, TextBlock, ToolResultMessage, UserMessage

from .config import LosslessConfig
from .store import LargeOutputRow, MessageRow, Store

__all__ = ["LARGE_ROLES", "exploration_summary", "needs_record", "out_of_line_view", "stand_in", "stand_in_text"]

#: The roles whose messages may be kept out of line.
LARGE_ROLES = ("toolResult", "user")

_NOTABLE = re.compile(r"error|fail|exception|traceback|warn|fatal|panic|denied|not found", re.IGNORECASE)
_LINE_CHARS = 200


def _line(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= _LINE_CHARS else text[:_LINE_CHARS] + " …"


def exploration_summary(text: str, target_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """A deterministic extractive summary of a large text within
    ``target_tokens``: its size, its first and last lines and up to a few
    lines that look like errors or warnings, shortened evenly until it fits."""
    lines = text.splitlines()
    nonblank = [(i, ln) for i, ln in enumerate(lines) if ln.strip()]
    notable = [(i, ln) for i, ln in nonblank if _NOTABLE.search(ln)]
    per = 12
    while True:
        head = nonblank[:per]
        tail = [x for x in nonblank[-per:] if x[0] > (head[-1][0] if head else -1)]
        shown = {i for i, _ in head} | {i for i, _ in tail}
        marks = [x for x in notable if x[0] not in shown][: max(1, per // 2)]
        parts = [f"{len(lines)} lines, {len(text)} characters."]
        if head:
            parts.append("First lines:")
            parts.extend(f"  {i + 1}: {_line(ln)}" for i, ln in head)
        if marks:
            parts.append("Lines that look like errors or warnings:")
            parts.extend(f"  {i + 1}: {_line(ln)}" for i, ln in marks)
        if tail:
            parts.append("Last lines:")
            parts.extend(f"  {i + 1}: {_line(ln)}" for i, ln in tail)
        out = "\n".join(parts)
        if per <= 1 or count_tokens(out) <= target_tokens:
            if count_tokens(out) > target_tokens:  # even one line each is too long: cut by characters
                out = out[: max(16, target_tokens * 2)]
            return out
        per = per * 2 // 3


def stand_in_text(row: MessageRow, summary: str) -> str:
    """What the model reads in place of an out-of-line message. The sidecar's
    projection shows a tool result's text only when it opens as
    ``sidecar.projection.OUT_OF_LINE_STAND_IN`` matches (every other tool
    result is a one-line placeholder there), so the opening stays as it is."""
    what = f"{row.tool_name or 'tool'} output" if row.role == "toolResult" else "user message"
    return (
        f"[large {what} kept out of line: {row.id}, {row.tokens} tokens, not shown here. "
        f"Read it with lcm_expand id={row.id} (a page at a time; offset= gives the next page), "
        f"or ask lcm_expand_query a question about it.]\n"
        f"Extractive summary (no model call):\n{summary}"
    )


def stand_in(message: AgentMessage, text: str) -> AgentMessage:
    """The message with ``text`` as its only content (ids, names, error flag
    and timestamp kept, so tool pairs and order stay as they were)."""
    if isinstance(message, ToolResultMessage):
        return ToolResultMessage(
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            content=[TextBlock(text=text)],
            is_error=message.is_error,
            timestamp=message.timestamp,
        )
    if isinstance(message, UserMessage):
        return UserMessage(content=text, timestamp=message.timestamp)
    return message


def needs_record(rows: Sequence[MessageRow], recorded: Mapping[str, LargeOutputRow], threshold: int) -> list[MessageRow]:
    """The rows over ``threshold`` tokens, of a role kept out of line, not recorded yet."""
    return [r for r in rows if r.role in LARGE_ROLES and r.tokens > threshold and r.id not in recorded]


def out_of_line_view(
    store: Store,
    cfg: LosslessConfig,
    session_id: str,
    rows: Sequence[MessageRow],
    count_text: Callable[[str], int],
    estimate: Callable[[AgentMessage], int],
    recorded: Mapping[str, LargeOutputRow] | None = None,
) -> tuple[list[MessageRow], dict[str, AgentMessage]]:
    """``rows`` as the assembly sees them (an out-of-line message with its
    stand-in's tokens and text) and the stand-in messages by id. Records the
    messages newly over the threshold first. ``recorded``: the records of
    ``rows`` when read with them (:meth:`.Store.messages_with_outputs`)."""
    if not rows:
        return list(rows), {}
    lo, hi = rows[0].seq, rows[-1].seq
    if recorded is None:
        recorded = store.large_outputs(session_id, lo, hi)
    new = needs_record(rows, recorded, cfg.large_output_tokens)
    if new:
        records = []
        for row, message in zip(new, store.decode(new), strict=True):
            summary = exploration_summary(row.text, cfg.large_output_summary_tokens, count_text)
            stub = stand_in(message, stand_in_text(row, summary))
            records.append(LargeOutputRow(message_id=row.id, seq=row.seq, tokens=row.tokens, stub_tokens=estimate(stub), summary=summary))
        store.add_large_outputs(session_id, records)
        recorded = store.large_outputs(session_id, lo, hi)  # another writer's record wins
    if not recorded:
        return list(rows), {}
    big = [r for r in rows if r.id in recorded]
    stubs: dict[str, AgentMessage] = {}
    for row, message in zip(big, store.decode(big), strict=True):
        stubs[row.id] = stand_in(message, stand_in_text(row, recorded[row.id].summary))
    view = [
        msgspec.structs.replace(r, tokens=recorded[r.id].stub_tokens, text=stand_in_text(r, recorded[r.id].summary))
        if r.id in recorded
        else r
        for r in rows
    ]
    return view, stubs
