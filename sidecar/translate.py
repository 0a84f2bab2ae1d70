"""Codex turn items -> OpenClaw AgentMessages, for the transcript mirror.

Pure functions, no I/O, no clock: every timestamp is given by the caller (ms
since the epoch), so the same items always translate to the same messages.

What maps where
---------------
=====================  =====================================================
Codex item             OpenClaw messages (``engines.api``)
=====================  =====================================================
``userMessage``        ``UserMessage``: text parts, ``data:`` images as
                       ``ImageBlock``, other images / skills / mentions as
                       text placeholders. The caller should pass the turn's
                       ORIGINAL input (``original_input``), because the
                       sidecar may have rewritten the turn input with a
                       projection; without it, projected text is reduced to
                       its "Current user request:" part as a safety net.
``agentMessage``       ``AssistantMessage([TextBlock])`` (empty text: nothing)
``reasoning``          ``AssistantMessage([ThinkingBlock, ...])``, one block
                       per summary part (raw reasoning ``content`` only when
                       there is no summary)
``commandExecution``   ``AssistantMessage([ToolCallBlock bash {command, cwd}])``
                       + ``ToolResultMessage`` (aggregated output; error when
                       failed/declined/unfinished or exit code != 0)
``fileChange``         tool ``apply_patch`` ``{changes: [{path, kind, diff}]}``
``mcpToolCall``        tool ``mcp__<server>__<tool>`` with the call arguments;
                       result from the MCP content (text / image blocks) or
                       the error message
``dynamicToolCall``    the client tool's own name; result from
                       ``contentItems`` (``success == false`` is an error)
``webSearch``          tool ``web_search`` ``{query, action...}``
``contextCompaction``  no message: a :class:`NativeCompaction` marker that
                       the mirror stores as a non-context ``custom`` entry
``plan``, unknown      nothing (logged at debug level, type and id only)
=====================  =====================================================

Every produced record carries an idempotency key
``codex-app-server:<threadId>:<turnId>:<itemId>:<part>`` (part is ``user``,
``assistant``, ``reasoning``, ``toolCall``, ``toolResult`` or
``compaction``), so a replayed or re-mirrored turn maps to the same keys and
the mirror stores it once. A tool call's ``id`` (and its result's
``toolCallId``) is the Codex item id, which for native tools is the model's
own call id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import msgspec

from engines.api import (
    AgentMessage,
    AssistantMessage,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from protocol.codex import (
    STATUS_COMPLETED,
    STATUS_DECLINED,
    STATUS_FAILED,
    TURN_COMPLETED,
    TURN_FAILED,
    TURN_INTERRUPTED,
    AgentMessageItem,
    CommandExecutionItem,
    ContextCompactionItem,
    DynamicToolCallItem,
    FileChangeItem,
    ImageInput,
    LocalImageInput,
    McpToolCallItem,
    MentionInput,
    PlanItem,
    ReasoningItem,
    SkillInput,
    TextInput,
    ThreadItem,
    TokenUsageBreakdown,
    UnknownInput,
    UnknownItem,
    UserInput,
    UserMessageItem,
    WebSearchItem,
    thread_item,
    user_input,
)

from .projection import CONTEXT_HEADER, RUNTIME_HEADER, user_request

log = logging.getLogger("codex_sidecar.translate")

__all__ = [
    "APPLY_PATCH_TOOL",
    "KEY_SOURCE",
    "NATIVE_COMPACTION_CUSTOM_TYPE",
    "SHELL_TOOL",
    "WEB_SEARCH_TOOL",
    "MirrorMessage",
    "NativeCompaction",
    "Translated",
    "mcp_tool_name",
    "messages_of",
    "mirror_key",
    "translate_item",
    "translate_turn",
    "turn_key_prefix",
    "usage_from_codex",
    "user_message_from_input",
]

KEY_SOURCE = "codex-app-server"
SHELL_TOOL = "bash"  # OpenClaw's name for Codex's shell tool (as upstream's harness)
APPLY_PATCH_TOOL = "apply_patch"
WEB_SEARCH_TOOL = "web_search"
NATIVE_COMPACTION_CUSTOM_TYPE = "codex-native-compaction"



# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


class MirrorMessage(msgspec.Struct, frozen=True):
    """One AgentMessage to mirror, with its idempotency key."""

    key: str
    message: AgentMessage


class NativeCompaction(msgspec.Struct, frozen=True):
    """Codex compacted the thread natively: a marker, not model context.

    The mirror stores it as a ``custom`` entry (:attr:`custom_type`,
    :meth:`data`), which OpenClaw never sends to a model. It is not an
    OpenClaw ``compaction`` entry: Codex exposes no summary, and the mirror
    keeps the full history for the context engine.
    """

    key: str
    thread_id: str
    turn_id: str
    item_id: str
    timestamp: int

    custom_type: ClassVar[str] = NATIVE_COMPACTION_CUSTOM_TYPE

    def data(self) -> dict[str, Any]:
        return {
            "backend": KEY_SOURCE,
            "threadId": self.thread_id,
            "turnId": self.turn_id,
            "itemId": self.item_id,
            "timestamp": self.timestamp,
        }


Translated = MirrorMessage | NativeCompaction


def mirror_key(thread_id: str, turn_id: str, item_id: str, part: str) -> str:
    """``codex-app-server:<threadId>:<turnId>:<itemId>:<part>``."""
    return f"{KEY_SOURCE}:{thread_id}:{turn_id}:{item_id}:{part}"


def turn_key_prefix(thread_id: str, turn_id: str) -> str:
    """The prefix shared by every key of one turn (e.g. to cut a fork before it)."""
    return f"{KEY_SOURCE}:{thread_id}:{turn_id}:"


def key_turn_id(key: str) -> str | None:
    """The turn id in a key ``codex-app-server:<thread>:<turn>:...``, whatever
    the thread (a fork's mirror keeps its parent's keys for inherited turns);
    None for other keys."""
    parts = key.split(":", 3)
    return parts[2] if len(parts) == 4 and parts[0] == KEY_SOURCE else None


def messages_of(records: Iterable[Translated]) -> list[AgentMessage]:
    """Just the AgentMessages, in order (markers left out)."""
    return [r.message for r in records if isinstance(r, MirrorMessage)]


def mcp_tool_name(server: str, tool: str) -> str:
    return f"mcp__{server}__{tool}"


# --------------------------------------------------------------------------
# Usage
# --------------------------------------------------------------------------


def usage_from_codex(usage: TokenUsageBreakdown) -> Usage:
    """Codex token counts in OpenClaw's (pi-ai's) shape.

    pi-ai counts ``input`` without the cached part (``cacheRead``), as its
    OpenAI Responses provider does; ``totalTokens`` is Codex's total.
    """
    cached = max(0, usage.cached_input_tokens)
    return Usage(
        input=max(0, usage.input_tokens - cached),
        output=usage.output_tokens,
        cache_read=cached,
        cache_write=max(0, usage.cache_write_input_tokens),
        total_tokens=usage.total_tokens,
    )


# --------------------------------------------------------------------------
# User input
# --------------------------------------------------------------------------


def _data_url_image(url: str) -> ImageBlock | None:
    # data:[<mime>][;param]*;base64,<data>
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep:
        return None
    params = head.split(";")
    if "base64" not in (p.strip().lower() for p in params[1:]):
        return None
    mime = params[0].strip() or "application/octet-stream"
    return ImageBlock(data=data, mime_type=mime)


def _input_blocks(item: UserInput) -> list[TextBlock | ImageBlock]:
    if isinstance(item, TextInput):
        if item.text.lstrip().startswith((CONTEXT_HEADER, RUNTIME_HEADER)):
            # The sidecar's projection is a text item of its own, ending with
            # the request header, in front of the client's items; OpenClaw's
            # own puts the prompt after the header in the same item, and so
            # does its runtime-context wrapper: the mirror keeps the request,
            # as OpenClaw's own transcript does.
            request = user_request(item.text)
            return [TextBlock(text=request)] if request else []
        return [TextBlock(text=item.text)]
    if isinstance(item, ImageInput):
        if item.url:
            image = _data_url_image(item.url)
            if image is not None:
                return [image]
            if item.url.startswith("data:"):
                return [TextBlock(text="[image]")]
            return [TextBlock(text=f"[image: {item.url}]")]
        if item.file_id:
            return [TextBlock(text=f"[image: file {item.file_id}]")]
        return [TextBlock(text="[image]")]
    if isinstance(item, LocalImageInput):
        return [TextBlock(text=f"[image: {item.path}]")]
    if isinstance(item, SkillInput):
        return [TextBlock(text=f"[skill: {item.name}]")]
    if isinstance(item, MentionInput):
        return [TextBlock(text=f"[mention: {item.name}]")]
    kind = item.type if isinstance(item, UnknownInput) and item.type else "unknown"
    return [TextBlock(text=f"[{kind} input]")]


def user_message_from_input(inputs: str | Sequence[Any], *, timestamp: int) -> UserMessage:
    """A ``UserMessage`` from a prompt string or ``turn/start`` input items.

    Items may be typed (``protocol.codex``) or raw dicts. Content is a plain
    string when it is one text part, else a list of text/image blocks. A
    projected or wrapped text is reduced to the user's request (``projection.user_request``).
    """
    if isinstance(inputs, str):
        return UserMessage(content=user_request(inputs), timestamp=timestamp)
    blocks: list[TextBlock | ImageBlock] = []
    for raw in inputs:
        blocks.extend(_input_blocks(user_input(raw)))
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        return UserMessage(content=blocks[0].text, timestamp=timestamp)
    if not blocks:
        return UserMessage(content="", timestamp=timestamp)
    return UserMessage(content=blocks, timestamp=timestamp)


# --------------------------------------------------------------------------
# Tool items
# --------------------------------------------------------------------------


def _arguments(value: Any) -> dict[str, Any]:
    """Tool arguments as an object (OpenClaw's ``toolCall.arguments``)."""
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            decoded = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return {"arguments": value}
        if isinstance(decoded, dict):
            return decoded
    return {"arguments": value}


def _json_text(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


def _status_note(status: str | None) -> str:
    return f"({status or 'no status'})"


def _tool_pair(
    *,
    thread_id: str,
    turn_id: str,
    item_id: str,
    name: str,
    arguments: dict[str, Any],
    result: list[TextBlock | ImageBlock],
    is_error: bool,
    timestamp: int,
    details: Any = None,
) -> list[Translated]:
    call = AssistantMessage(
        content=[ToolCallBlock(id=item_id, name=name, arguments=arguments)],
        stop_reason="toolUse",
        timestamp=timestamp,
    )
    if not result:
        result = [TextBlock(text="")]
    outcome = ToolResultMessage(
        tool_call_id=item_id,
        tool_name=name,
        content=result,
        is_error=is_error,
        timestamp=timestamp,
        details=details,
    )
    return [
        MirrorMessage(mirror_key(thread_id, turn_id, item_id, "toolCall"), call),
        MirrorMessage(mirror_key(thread_id, turn_id, item_id, "toolResult"), outcome),
    ]


def _command(item: CommandExecutionItem, ids: dict[str, Any]) -> list[Translated]:
    args: dict[str, Any] = {"command": item.command}
    if item.cwd:
        args["cwd"] = item.cwd
    # failed, declined, or never finished (an interrupted turn); or a non-zero exit
    failed = item.status != STATUS_COMPLETED or (item.exit_code is not None and item.exit_code != 0)
    if item.aggregated_output:
        text = item.aggregated_output
    elif item.exit_code is not None:
        text = f"(no output; exit code {item.exit_code})"
    else:
        text = f"(no output) {_status_note(item.status)}"
    details = {"status": item.status, "exitCode": item.exit_code, "durationMs": item.duration_ms}
    return _tool_pair(
        **ids, item_id=item.id, name=SHELL_TOOL, arguments=args, result=[TextBlock(text=text)],
        is_error=failed, details=details,
    )


def _file_change(item: FileChangeItem, ids: dict[str, Any]) -> list[Translated]:
    changes: list[dict[str, Any]] = []
    for change in item.changes:
        entry: dict[str, Any] = {"path": change.path, "kind": change.kind_type or "update", "diff": change.diff}
        if change.move_path:
            entry["movePath"] = change.move_path
        changes.append(entry)
    paths = ", ".join(c.path for c in item.changes) or "no files"
    if item.status == STATUS_COMPLETED:
        text = f"Patch applied: {paths}"
    elif item.status == STATUS_DECLINED:
        text = f"Patch declined: {paths}"
    elif item.status == STATUS_FAILED:
        text = f"Patch failed: {paths}"
    else:
        text = f"Patch not applied {_status_note(item.status)}: {paths}"
    return _tool_pair(
        **ids, item_id=item.id, name=APPLY_PATCH_TOOL, arguments={"changes": changes},
        result=[TextBlock(text=text)], is_error=item.status != STATUS_COMPLETED, details={"status": item.status},
    )


def _mcp_blocks(content: Sequence[Any]) -> list[TextBlock | ImageBlock]:
    blocks: list[TextBlock | ImageBlock] = []
    for part in content:
        if isinstance(part, dict):
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                blocks.append(TextBlock(text=part["text"]))
                continue
            if kind == "image" and isinstance(part.get("data"), str):
                mime = part.get("mimeType") or part.get("mime_type") or "application/octet-stream"
                blocks.append(ImageBlock(data=part["data"], mime_type=str(mime)))
                continue
        blocks.append(TextBlock(text=_json_text(part)))
    return blocks


def _mcp(item: McpToolCallItem, ids: dict[str, Any]) -> list[Translated]:
    if item.error is not None:
        result: list[TextBlock | ImageBlock] = [TextBlock(text=item.error.message or "MCP tool call failed")]
    elif item.result is not None:
        result = _mcp_blocks(item.result.content)
        if not result and item.result.structured_content is not None:
            result = [TextBlock(text=_json_text(item.result.structured_content))]
    else:
        result = [TextBlock(text=f"(no result) {_status_note(item.status)}")]
    is_error = item.error is not None or item.status != STATUS_COMPLETED
    return _tool_pair(
        **ids, item_id=item.id, name=mcp_tool_name(item.server, item.tool), arguments=_arguments(item.arguments),
        result=result, is_error=is_error, details={"status": item.status, "server": item.server, "tool": item.tool},
    )


def _dynamic(item: DynamicToolCallItem, ids: dict[str, Any]) -> list[Translated]:
    result: list[TextBlock | ImageBlock] = []
    for part in item.content_items or ():
        kind = part.get("type")
        if kind == "inputText" and isinstance(part.get("text"), str):
            result.append(TextBlock(text=part["text"]))
        elif kind == "inputImage" and isinstance(part.get("imageUrl"), str):
            image = _data_url_image(part["imageUrl"])
            result.append(image if image is not None else TextBlock(text="[image]"))
        else:
            result.append(TextBlock(text=f"[{kind or 'unknown'} output]"))
    if item.content_items is None:
        result = [TextBlock(text=f"(no result) {_status_note(item.status)}")]
    is_error = item.success is False or item.status != STATUS_COMPLETED
    details: dict[str, Any] = {"status": item.status, "success": item.success}
    if item.namespace:
        details["namespace"] = item.namespace
    return _tool_pair(
        **ids, item_id=item.id, name=item.tool, arguments=_arguments(item.arguments),
        result=result, is_error=is_error, details=details,
    )


def _web_search(item: WebSearchItem, ids: dict[str, Any]) -> list[Translated]:
    args: dict[str, Any] = {"query": item.query}
    action = item.action or {}
    for key in ("type", "url", "pattern", "queries"):
        value = action.get(key)
        if value is not None:
            args["action" if key == "type" else key] = value
    if item.results:
        text = _json_text(item.results)
    else:
        text = f"Searched the web: {item.query}" if item.query else "Searched the web"
    return _tool_pair(
        **ids, item_id=item.id, name=WEB_SEARCH_TOOL, arguments=args, result=[TextBlock(text=text)],
        is_error=False,
    )


# --------------------------------------------------------------------------
# Items and turns
# --------------------------------------------------------------------------


def translate_item(
    item: ThreadItem | Mapping[str, Any],
    *,
    thread_id: str,
    turn_id: str,
    timestamp: int,
    original_input: str | Sequence[Any] | None = None,
) -> list[Translated]:
    """The mirror records of one completed thread item (possibly none).

    ``original_input`` replaces a ``userMessage``'s content (the user's
    prompt before the sidecar rewrote it); it is ignored for other items.
    """
    item = thread_item(item)
    ids = {"thread_id": thread_id, "turn_id": turn_id, "timestamp": timestamp}
    if isinstance(item, UserMessageItem):
        if original_input is not None:
            message = user_message_from_input(original_input, timestamp=timestamp)
        else:
            message = user_message_from_input(item.content, timestamp=timestamp)
        return [MirrorMessage(mirror_key(thread_id, turn_id, item.id, "user"), message)]
    if isinstance(item, AgentMessageItem):
        if not item.text:
            log.debug("empty agent message not mirrored", extra={"fields": {"itemId": item.id}})
            return []
        answer = AssistantMessage(content=[TextBlock(text=item.text)], timestamp=timestamp)
        return [MirrorMessage(mirror_key(thread_id, turn_id, item.id, "assistant"), answer)]
    if isinstance(item, ReasoningItem):
        parts = [p for p in item.summary if p] or [p for p in item.content if p]
        if not parts:
            return []
        thinking = AssistantMessage(content=[ThinkingBlock(thinking=p) for p in parts], timestamp=timestamp)
        return [MirrorMessage(mirror_key(thread_id, turn_id, item.id, "reasoning"), thinking)]
    if isinstance(item, CommandExecutionItem):
        return _command(item, ids)
    if isinstance(item, FileChangeItem):
        return _file_change(item, ids)
    if isinstance(item, McpToolCallItem):
        return _mcp(item, ids)
    if isinstance(item, DynamicToolCallItem):
        return _dynamic(item, ids)
    if isinstance(item, WebSearchItem):
        return _web_search(item, ids)
    if isinstance(item, ContextCompactionItem):
        return [
            NativeCompaction(
                key=mirror_key(thread_id, turn_id, item.id, "compaction"),
                thread_id=thread_id,
                turn_id=turn_id,
                item_id=item.id,
                timestamp=timestamp,
            )
        ]
    kind = item.type if isinstance(item, (PlanItem, UnknownItem)) else type(item).__name__
    log.debug("thread item not mirrored", extra={"fields": {"type": kind, "itemId": item.id}})
    return []


_STOP_REASONS = {TURN_COMPLETED: "stop", TURN_INTERRUPTED: "aborted", TURN_FAILED: "error"}


def translate_turn(
    items: Sequence[ThreadItem | Mapping[str, Any]],
    *,
    thread_id: str,
    turn_id: str,
    timestamp: int,
    item_timestamps: Mapping[str, int] | None = None,
    original_input: str | Sequence[Any] | None = None,
    usage: Usage | TokenUsageBreakdown | None = None,
    model: str | None = None,
    turn_status: str | None = None,
    error_message: str | None = None,
) -> list[Translated]:
    """The mirror records of one turn's completed items, in order.

    * Each item's timestamp is ``item_timestamps[item.id]`` (e.g. the
      notification's ``completedAtMs``), else ``timestamp``.
    * ``original_input`` replaces the FIRST ``userMessage`` of the turn (the
      one ``turn/start`` created); later ones (steering) keep their content.
    * ``usage``, ``model`` and the stop reason derived from ``turn_status``
      (``completed`` -> ``stop``, ``interrupted`` -> ``aborted``, ``failed`` ->
      ``error`` with ``error_message``) go on the turn's last assistant message.
    """
    stamps = item_timestamps or {}
    out: list[Translated] = []
    pending_input = original_input
    for raw in items:
        item = thread_item(raw)
        override = None
        if isinstance(item, UserMessageItem) and pending_input is not None:
            override, pending_input = pending_input, None
        out.extend(
            translate_item(
                item,
                thread_id=thread_id,
                turn_id=turn_id,
                timestamp=stamps.get(item.id, timestamp),
                original_input=override,
            )
        )
    if isinstance(usage, TokenUsageBreakdown):
        usage = usage_from_codex(usage)
    stop_reason = _STOP_REASONS.get(turn_status) if turn_status else None
    if usage is None and model is None and stop_reason is None:
        return out
    for i in range(len(out) - 1, -1, -1):
        record = out[i]
        if isinstance(record, MirrorMessage) and isinstance(record.message, AssistantMessage):
            changes: dict[str, Any] = {}
            if usage is not None:
                changes["usage"] = usage
            if model is not None:
                changes["model"] = model
            if stop_reason is not None:
                changes["stop_reason"] = stop_reason
                if stop_reason == "error" and error_message:
                    changes["error_message"] = error_message
            out[i] = MirrorMessage(record.key, msgspec.structs.replace(record.message, **changes))
            break
    return out
