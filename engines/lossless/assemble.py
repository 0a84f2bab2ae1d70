"""Assembly: the frame (summary messages) then the raw tail, within the budget.

Pure functions of stored rows; the engine reads the rows and calls these.

Between compaction steps the frame is fixed (stored as rendered bytes), so the
assembly is ``frame + every message after frame_seq`` and a new message only
ever *appends* to it: the previous assembly is a prefix of the next, and the
sidecar's delta projection and the provider's prompt cache both survive. A
compaction step installs a new frame and moves ``frame_seq``, which changes
the assembly once, in one chunk.

Only if the frame and the tail together exceed the budget (maintenance has
not caught up, or the budget shrank) is something left out here: the oldest
summaries first, then the oldest raw messages, cutting only where no tool
call is separated from its result, and never the newest message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engines.api import AgentMessage, CompactionSummaryMessage, decode_openclaw

from .messages import iso_minute, valid_cuts
from .store import SummaryRow

__all__ = ["fit_budget", "render_summary", "select_frame"]


def render_summary(summary: SummaryRow) -> CompactionSummaryMessage:
    """A summary as the model sees it: its id, depth, turns and time range
    (so it can ask for the details with ``lcm_expand``), then its text."""
    turns = f"turn {summary.turn_lo}" if summary.turn_lo == summary.turn_hi else f"turns {summary.turn_lo}-{summary.turn_hi}"
    marker = ", extractive" if summary.fallback else ""
    head = (
        f"[summary {summary.id} depth {summary.depth}, {turns}, "
        f"{iso_minute(summary.time_lo)} to {iso_minute(summary.time_hi)}{marker}]"
    )
    return CompactionSummaryMessage(
        summary=f"{head}\n{summary.text}",
        tokens_before=summary.source_tokens,
        tokens_after=summary.tokens,
        timestamp=summary.time_hi,
    )


def select_frame(
    active: Sequence[SummaryRow], room: int, estimate: Callable[[AgentMessage], int]
) -> tuple[list[SummaryRow], list[CompactionSummaryMessage], int]:
    """The newest active summaries whose rendered messages fit ``room`` tokens,
    taken newest first and stopping at the first that does not fit (so the
    frame is a contiguous stretch of history up to the tail), returned oldest
    first with their messages and total tokens."""
    chosen: list[tuple[SummaryRow, CompactionSummaryMessage, int]] = []
    total = 0
    for summary in sorted(active, key=lambda s: (s.seq_hi, s.depth), reverse=True):
        message = render_summary(summary)
        tokens = estimate(message)
        if total + tokens > room:
            break
        chosen.append((summary, message, tokens))
        total += tokens
    chosen.reverse()
    return [c[0] for c in chosen], [c[1] for c in chosen], total


def fit_budget(
    frame: Sequence[AgentMessage],
    frame_tokens: Sequence[int],
    tail: Sequence[AgentMessage],
    tail_tokens: Sequence[int],
    budget: int,
) -> tuple[list[AgentMessage], int, dict[str, Any]]:
    """``frame + tail`` if it fits ``budget``; otherwise without its oldest
    parts (see the module notes). Returns the messages, their tokens and what
    was left out."""
    total = sum(frame_tokens) + sum(tail_tokens)
    if total <= budget:
        return [*frame, *tail], total, {"overflow": False}
    # Drop summaries, oldest first.
    f = 0
    while f < len(frame) and total > budget:
        total -= frame_tokens[f]
        f += 1
    if total <= budget:
        return [*frame[f:], *tail], total, {"overflow": True, "droppedSummaries": f, "droppedMessages": 0}
    # Then raw messages, oldest first, at cuts that split no tool pair; the
    # newest message (with the call it answers) always stays.
    cuts = valid_cuts(tail)
    n = len(tail)
    floor = max((c for c in range(n) if cuts[c]), default=0)
    start = 0
    running = total
    for c in range(n):
        if cuts[c] and (running <= budget or c == floor):
            start = c
            break
        running -= tail_tokens[c]
    else:
        start = floor
    kept = list(tail[start:])
    tokens = sum(tail_tokens[start:])
    return kept, tokens, {"overflow": True, "droppedSummaries": f, "droppedMessages": start}


class Frames:
    """Each session's frame decoded, with each message's token estimate,
    kept while its stored bytes stay the same: a frame changes once a
    compaction, so the assemblies between hand back the same message
    objects (the host's identity caches then hold one copy, not a fresh one
    a turn) and skip the decode."""

    def __init__(self, estimate: Callable[[AgentMessage], int]) -> None:
        self._estimate = estimate
        self._by_session: dict[str, tuple[bytes, tuple[AgentMessage, ...], tuple[int, ...]]] = {}

    def of(self, session_id: str, data: bytes) -> tuple[tuple[AgentMessage, ...], tuple[int, ...]]:
        """The frame whose stored bytes are ``data``, and its token estimates."""
        cached = self._by_session.get(session_id)
        if cached is not None and cached[0] == data:
            return cached[1], cached[2]
        frame = tuple(decode_openclaw(data, type=list[AgentMessage]))
        tokens = tuple(self._estimate(m) for m in frame)
        self._by_session[session_id] = (data, frame, tokens)
        return frame, tokens

    def forget(self, session_id: str) -> None:
        self._by_session.pop(session_id, None)
