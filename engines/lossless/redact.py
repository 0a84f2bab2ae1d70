"""Credentials out of what the lossless store keeps: a message redacted
before it is stored, and so before it is summarised, searched or sent to the
summary model (every one of those reads the stored text).

The rules are the recordings' (:mod:`engines.scrub`, one scanner): text,
thinking, a tool call's arguments (a JSON value: keys that name a credential,
``DB_PASSWORD`` in an env map), a tool result's content and ``details``, a
compaction summary. What is not text is kept as it is: ids, signatures,
images, numbers. A message with nothing to redact comes back as the same
object.

A redacted message keeps the identity of the original (the engine computes
identities first), so the next snapshot's copy of it is known and not stored
again, and the assembly can hand the model the client's own copy of a raw
message (see :meth:`~engines.lossless.engine.LosslessEngine.assemble`): the
client's transcript, and what codex holds, stay whole.

``[engines.lossless] redact_secrets = false`` stores messages as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from engines.api import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from engines.scrub import redact_credentials, scrub_string

__all__ = ["redact_arguments", "redact_batch", "redact_message"]


def _block(block: Any) -> Any:
    if isinstance(block, TextBlock):
        text = scrub_string(block.text)
        return block if text == block.text else msgspec.structs.replace(block, text=text)
    if isinstance(block, ThinkingBlock):
        thinking = scrub_string(block.thinking)
        return block if thinking == block.thinking else msgspec.structs.replace(block, thinking=thinking)
    if isinstance(block, ToolCallBlock):
        arguments = redact_credentials(block.arguments)
        return block if arguments is block.arguments else msgspec.structs.replace(block, arguments=arguments)
    return block  # an image: data, not text


def _blocks(blocks: list[Any]) -> list[Any]:
    out = [_block(b) for b in blocks]
    return blocks if all(a is b for a, b in zip(out, blocks, strict=True)) else out


def redact_message(message: AgentMessage) -> AgentMessage:
    """``message`` with every credential replaced by ``[redacted credential]``
    (the same object when it holds none)."""
    if isinstance(message, UserMessage):
        content = message.content
        new: Any = scrub_string(content) if isinstance(content, str) else _blocks(content)
        return message if new is content or new == content else msgspec.structs.replace(message, content=new)
    if isinstance(message, AssistantMessage):
        blocks = _blocks(message.content)
        error = scrub_string(message.error_message) if message.error_message else message.error_message
        if blocks is message.content and error == message.error_message:
            return message
        return msgspec.structs.replace(message, content=blocks, error_message=error)
    if isinstance(message, ToolResultMessage):
        blocks = _blocks(message.content)
        details = redact_credentials(message.details) if message.details is not None else None
        if blocks is message.content and details is message.details:
            return message
        return msgspec.structs.replace(message, content=blocks, details=details)
    if isinstance(message, CompactionSummaryMessage):
        summary = scrub_string(message.summary)
        return message if summary == message.summary else msgspec.structs.replace(message, summary=summary)
    return message


def redact_batch(
    messages: Sequence[AgentMessage], count_tokens: Callable[[AgentMessage], int]
) -> tuple[list[AgentMessage], Callable[[AgentMessage], int]]:
    """The messages redacted, and a counter that gives each redacted message
    the tokens of its original: the assembly hands the model the original
    (when the client still has it), so the budget counts what the model reads."""
    out: list[AgentMessage] = []
    tokens: dict[int, int] = {}
    for message in messages:
        clean = redact_message(message)
        tokens[id(clean)] = count_tokens(message)
        out.append(clean)
    return out, lambda m: tokens[id(m)] if id(m) in tokens else count_tokens(m)


def redact_arguments(arguments: Any) -> Any:
    """A tool call's arguments without credentials (``lcm_expand_query``'s
    question goes to the summary model)."""
    return redact_credentials(arguments)
