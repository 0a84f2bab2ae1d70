"""What the lossless engine needs to know about one message: pure functions.

Identity
--------
The sidecar hands engines AgentMessages without their mirror keys, but every
message it hands over was read back from its transcript mirror, so a given
message always comes with the same content *and the same timestamp* (the
mirror stores both, and replays, resumes and restarts read them back). The
identity of a message is therefore

    sha256("lossless-ident/1", role, timestamp, model-visible content, n)

where the model-visible content is canonical JSON (sorted keys) of what the
model reads (texts, thinking, tool-call ids, names and arguments, tool-result
ids, names, contents and error flags, summary text) and ``n`` counts the
earlier messages *of the same batch* with the same role, timestamp and
content (0 for the first), so two genuinely identical messages in one turn
stay two. Metadata a replay may fill in differently (usage, model, stop
reason, signatures, ``details``) is not part of it.

Why not the position in the session: the mirror's message view is not
append-only. A compaction entry replaces everything before its first kept
entry with one summary message, and a client's revert takes turns out and
lets new ones take their places, so an ordinal would name a different message
after either, and a new message at a reverted position would be dropped as a
"replay". Content and timestamp survive both. The one case the identity folds
together is the same message handed over twice in *separate* single-message
``ingest`` calls with the same millisecond timestamp: that is treated as a
replay (the batch paths, which the sidecar uses, keep such pairs apart).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from engines.api import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)

__all__ = [
    "canonical_json",
    "content_identity",
    "identities",
    "iso_minute",
    "message_id",
    "message_text",
    "tool_call_ids",
    "valid_cuts",
]


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (the same value always gives the same text)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def _block_view(block: Any) -> Any:
    if isinstance(block, TextBlock):
        return ["text", block.text]
    if isinstance(block, ImageBlock):
        return ["image", block.mime_type, hashlib.sha256(block.data.encode("utf-8", "surrogatepass")).hexdigest()]
    if isinstance(block, ThinkingBlock):
        return ["thinking", block.thinking]
    if isinstance(block, ToolCallBlock):
        return ["toolCall", block.id, block.name, block.arguments]
    return ["other", type(block).__name__]


def _model_view(message: Any) -> Any:
    if isinstance(message, UserMessage):
        content = message.content
        return ["user", content if isinstance(content, str) else [_block_view(b) for b in content]]
    if isinstance(message, AssistantMessage):
        return ["assistant", [_block_view(b) for b in message.content]]
    if isinstance(message, ToolResultMessage):
        return [
            "toolResult",
            message.tool_call_id,
            message.tool_name,
            [_block_view(b) for b in message.content],
            message.is_error,
        ]
    if isinstance(message, CompactionSummaryMessage):
        return ["compactionSummary", message.summary]
    return ["unknown", type(message).__name__]


def content_identity(message: AgentMessage) -> str:
    """The hash of a message's role, timestamp and model-visible content."""
    view = [getattr(message, "timestamp", 0), _model_view(message)]
    return hashlib.sha256(("lossless-ident/1\n" + canonical_json(view)).encode("utf-8", "surrogatepass")).hexdigest()


def identities(messages: Sequence[AgentMessage], content_ids: Sequence[str] | None = None) -> list[str]:
    """The identity of each message of one batch (see the module notes).

    ``content_ids`` may give the precomputed :func:`content_identity` of each
    message (the engine caches them); the occurrence count is added here.
    """
    seen: dict[str, int] = {}
    out: list[str] = []
    for i, message in enumerate(messages):
        base = content_ids[i] if content_ids is not None else content_identity(message)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else hashlib.sha256(f"{base}#{n}".encode()).hexdigest())
    return out


def message_id(session_id: str, ident: str) -> str:
    """The public id of a stored message (``msg_`` and 16 hex digits)."""
    return "msg_" + hashlib.sha256(f"{session_id}\n{ident}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _block_text(block: Any) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ImageBlock):
        return f"[image {block.mime_type}]"
    if isinstance(block, ThinkingBlock):
        return f"(thinking) {block.thinking}"
    if isinstance(block, ToolCallBlock):
        return f"[tool call {block.name} {canonical_json(block.arguments)}]"
    return ""


def message_text(message: AgentMessage) -> str:
    """The message as plain text: what full-text search indexes, the
    summariser reads and ``lcm_expand`` shows."""
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return content
        return "\n".join(t for t in (_block_text(b) for b in content) if t)
    if isinstance(message, AssistantMessage):
        return "\n".join(t for t in (_block_text(b) for b in message.content) if t)
    if isinstance(message, ToolResultMessage):
        body = "\n".join(t for t in (_block_text(b) for b in message.content) if t)
        status = "error" if message.is_error else "ok"
        return f"[tool result {message.tool_name} {status}]\n{body}" if body else f"[tool result {message.tool_name} {status}]"
    if isinstance(message, CompactionSummaryMessage):
        return message.summary
    return ""


def tool_call_ids(message: AgentMessage) -> list[str]:
    """The ids of the tool calls an assistant message makes."""
    if isinstance(message, AssistantMessage):
        return [b.id for b in message.content if isinstance(b, ToolCallBlock)]
    return []


def valid_cuts(messages: Sequence[AgentMessage]) -> list[bool]:
    """``cuts[c]`` is True when a cut before ``messages[c]`` splits no tool
    call from its result (``cuts[0]`` and ``cuts[len]`` are always True).

    A pair is an assistant message with a tool call and a later
    ``toolResult`` answering it (matched to the latest earlier call with that
    id); results without their call, and calls without a result, constrain
    nothing.
    """
    n = len(messages)
    diff = [0] * (n + 2)
    last_call_at: dict[str, int] = {}
    for j, message in enumerate(messages):
        if isinstance(message, ToolResultMessage):
            i = last_call_at.get(message.tool_call_id)
            if i is not None and i < j:
                diff[i + 1] += 1
                diff[j + 1] -= 1
        for call_id in tool_call_ids(message):
            last_call_at[call_id] = j
    cuts: list[bool] = []
    running = 0
    for c in range(n + 1):
        running += diff[c]
        cuts.append(running == 0)
    return cuts


def iso_minute(ms: int) -> str:
    """``2025-01-31T12:34Z`` for a time in ms since the epoch (UTC)."""
    moment = _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%MZ")
