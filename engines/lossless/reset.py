"""OpenClaw's ``/new`` and ``/reset``: what a new session takes of the one before.

Nothing by default: the sidecar gives the new session an id of its own, so
its assembly, its recall tools and its compactions start empty, and the
previous session's messages and summaries stay stored under its id. With
``reset_keep_summaries = N`` the previous session's newest N summaries (of
those its frame shows) begin the new session's frame: the model keeps their
gist, the new session's recall tools find none of the old text, and the
carried frame gives way at the new session's first compaction step.
"""

from __future__ import annotations

from engines.api import AgentMessage, CompactionSummaryMessage, decode_openclaw, encode_openclaw
from engines.tokens import estimate_message_tokens

from .store import Store

__all__ = ["carry_summaries"]


def carry_summaries(store: Store, previous: str, new: str, keep: int) -> int:
    """Begin ``new``'s frame with ``previous``'s newest ``keep`` summaries;
    how many were carried. Nothing when ``keep`` is 0, the previous session
    shows none, or the new session already has a frame of its own (a replay
    of the reset changes nothing). Synchronous: run it in a worker thread."""
    if keep <= 0 or store.session(new).frame != b"[]":
        return 0
    before = store.session(previous)
    frame: list[AgentMessage] = decode_openclaw(before.frame, type=list[AgentMessage])
    ids = before.frame_ids if len(before.frame_ids) == len(frame) else [""] * len(frame)
    kept = [(sid, m) for sid, m in zip(ids, frame, strict=True) if isinstance(m, CompactionSummaryMessage)][-keep:]
    if not kept:
        return 0
    messages = [m for _, m in kept]
    store.set_frame(
        new,
        frame_seq=0,
        frame=encode_openclaw(messages),
        frame_ids=[sid for sid, _ in kept],
        frame_tokens=sum(estimate_message_tokens(m) for m in messages),
        compaction={"reason": "session-reset", "previousSessionId": previous, "frameSummaries": len(kept)},
    )
    return len(kept)
