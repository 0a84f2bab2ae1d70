"""A message's identity for the ledger, and its size for the stale slack.

Identity is what the model sees of a message, nothing else: its role; its
text; its images (type and data); a tool call's id, name and arguments; a
tool result's call id, tool name, content and error flag; a summary's text.
Never timestamps, usage, model or provider metadata, signatures, thinking
(the projection never renders it) or object identity: an engine that keeps
the conversation in its own store and builds new message objects with the
same content (its own timestamps, no usage) holds the same ledger, so the
sidecar projects only what is new instead of rebuilding.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from engines import AgentMessage, AssistantMessage, CompactionSummaryMessage, ImageBlock, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage

_encode = msgspec.json.Encoder(order="sorted").encode


def fingerprint(message: AgentMessage) -> str:
    """A message's identity for the ledger: a hash of its model-visible content."""
    return hashlib.sha256(_encode(visible_content(message))).hexdigest()[:16]


def visible_content(message: AgentMessage) -> list[Any]:
    """The parts of a message the model sees, as plain data in a fixed shape."""
    if isinstance(message, UserMessage):
        content = message.content
        return ["user", content if isinstance(content, str) else [_block(b) for b in content]]
    if isinstance(message, AssistantMessage):
        return ["assistant", [_block(b) for b in message.content if not _invisible(b)]]
    if isinstance(message, ToolResultMessage):
        return ["toolResult", message.tool_call_id, message.tool_name, [_block(b) for b in message.content], bool(message.is_error)]
    if isinstance(message, CompactionSummaryMessage):
        return ["compactionSummary", message.summary]
    raise TypeError(f"not an AgentMessage: {type(message).__name__}")


def _invisible(block: Any) -> bool:
    return not isinstance(block, (TextBlock, ImageBlock, ToolCallBlock))


def _block(block: Any) -> list[Any]:
    if isinstance(block, TextBlock):
        return ["text", block.text]
    if isinstance(block, ImageBlock):
        return ["image", block.mime_type, block.data]
    if isinstance(block, ToolCallBlock):
        return ["toolCall", block.id, block.name, block.arguments]
    return [type(block).__name__]


def message_chars(message: AgentMessage) -> int:
    """Size of a message's text, for inspection (never the text itself)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            for attr in ("text", "thinking"):
                value = getattr(block, attr, None)
                if isinstance(value, str):
                    total += len(value)
        return total
    summary = getattr(message, "summary", None)
    return len(summary) if isinstance(summary, str) else 0


def fingerprints(sizes: dict[str, int], messages: list[AgentMessage], cache: FingerprintCache | None = None) -> list[str]:
    """The messages' fingerprints, noting each one's size in ``sizes``."""
    out = []
    if cache is not None:
        cache.expect(len(messages))
    for m in messages:
        f = cache.get(m) if cache is not None else fingerprint(m)
        if f not in sizes:
            sizes[f] = message_chars(m)
        out.append(f)
    return out


class FingerprintCache:
    """Fingerprints of message objects seen before, so a turn hashes only
    the messages it has not met: the mirror hands the same objects every
    turn, and an engine that assembles from them hands them back. Keyed by
    object but holding the object, so a key is never reused; an entry no
    call has asked for in a while is let go (the cache stays about the size
    of what one turn assembles). The fingerprint itself is still the
    content's."""

    def __init__(self) -> None:
        self._by_object: dict[int, tuple[AgentMessage, str]] = {}
        self._previous: dict[int, tuple[AgentMessage, str]] = {}
        self._limit = 1024

    def get(self, message: AgentMessage) -> str:
        key = id(message)
        hit = self._by_object.get(key) or self._previous.get(key)
        if hit is not None and hit[0] is message:
            self._by_object[key] = hit
            return hit[1]
        f = fingerprint(message)
        self._by_object[key] = (message, f)
        if len(self._by_object) > self._limit:
            # Two generations: what was used since the last swap survives it.
            self._previous, self._by_object = self._by_object, {}
        return f

    def expect(self, count: int) -> None:
        """A call is about to ask for ``count`` messages: room for twice that."""
        self._limit = max(1024, 2 * count)
