"""Typed views of the Codex app-server messages the sidecar reads (sans I/O).

These are msgspec Structs for *reading* only. A Struct keeps the fields
listed here and silently drops every other one, so a message must never be
re-encoded from them. The relay decodes a message once, to its dict form, and
hands hooks a typed view converted from it (``Message.typed``); a hook that
changes a request sets new params built from the dict form
(``Message.set_params``), so every field survives, including ones this
module has never heard of, and the message is encoded once on its way out.

Tolerance is the design rule. Codex adds fields and item types between
releases; a message that the protocol allows must always decode:

* unknown fields are ignored (msgspec's default);
* every field the schema does not require has a default, and the schema's
  ``null`` is accepted wherever the schema allows it (``tests/protocol/test_codex_types.py``
  checks both against ``codex app-server generate-json-schema``);
* statuses, phases and kinds are plain ``str``, never ``Literal``: a new
  status value must not break decoding (constants for the known values are
  below);
* the tagged unions (thread items, user input) have a fallback: an unknown
  ``type``, or a known type whose shape no longer fits, decodes to
  :class:`UnknownItem` / :class:`UnknownInput` carrying the raw dict, and is
  logged at debug level (type and id only, never content).

Only a message that is not valid at all (not JSON, not an object, a required
id of the wrong type, ...) raises :class:`CodexDecodeError`, whose text names
the Struct and the JSON path, never a value.

Entry points: :func:`decode_as` (by Struct), :func:`thread_item` and
:func:`user_input` (one union member from a dict). Each accepts JSON (``bytes``/``str``/``msgspec.Raw``,
e.g. ``Envelope.params``) or already decoded builtins.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypeVar, cast

import msgspec

log = logging.getLogger("codex_sidecar.protocol.codex")

# Known values of the string enums (kept open: new values must decode).
TURN_COMPLETED = "completed"
TURN_INTERRUPTED = "interrupted"
TURN_FAILED = "failed"
TURN_IN_PROGRESS = "inProgress"

# Item statuses (CommandExecutionStatus, PatchApplyStatus, McpToolCallStatus,
# DynamicToolCallStatus share these spellings).
STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
STATUS_DECLINED = "declined"


class CodexDecodeError(ValueError):
    """A message that is not a valid instance of the expected shape.

    The text names the Struct and msgspec's JSON path, never a value from the
    message, so it is safe to log.
    """


class _Codex(msgspec.Struct, kw_only=True, rename="camel"):
    """Base: Codex's camelCase field names; unknown fields are ignored."""


# --------------------------------------------------------------------------
# User input (``UserInput``, tagged by ``type``)
# --------------------------------------------------------------------------


class ByteRange(_Codex, kw_only=True):
    start: int
    end: int


class TextElement(_Codex, kw_only=True):
    """A UI span inside a text input (byte offsets into ``text``)."""

    byte_range: ByteRange | None = None
    placeholder: str | None = None


class _Input(_Codex, tag_field="type", kw_only=True):
    """Base of the known user-input kinds."""


class TextInput(_Input, tag="text", kw_only=True):
    type: ClassVar[str] = "text"
    text: str
    # The only snake_case key in UserInput: spelled explicitly.
    text_elements: list[TextElement] = msgspec.field(default_factory=list, name="text_elements")


class ImageInput(_Input, tag="image", kw_only=True):
    """An image by URL (OpenClaw sends ``data:`` URLs) or by uploaded file id."""

    type: ClassVar[str] = "image"
    url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class LocalImageInput(_Input, tag="localImage", kw_only=True):
    type: ClassVar[str] = "localImage"
    path: str
    detail: str | None = None


class SkillInput(_Input, tag="skill", kw_only=True):
    type: ClassVar[str] = "skill"
    name: str
    path: str


class MentionInput(_Input, tag="mention", kw_only=True):
    type: ClassVar[str] = "mention"
    name: str
    path: str


class UnknownInput(_Codex, kw_only=True):
    """A user input whose ``type`` is not modelled here (or no longer fits)."""

    type: str
    raw: dict[str, Any] = msgspec.field(default_factory=dict)


UserInput = TextInput | ImageInput | LocalImageInput | SkillInput | MentionInput | UnknownInput

USER_INPUT_TYPES: dict[str, type[_Input]] = {
    str(cls.__struct_config__.tag): cls
    for cls in (TextInput, ImageInput, LocalImageInput, SkillInput, MentionInput)
}


# --------------------------------------------------------------------------
# Thread items (``ThreadItem``, tagged by ``type``)
# --------------------------------------------------------------------------


class _Item(_Codex, tag_field="type", kw_only=True):
    """Base of the known thread-item kinds; every item has an ``id``."""

    id: str


class UserMessageItem(_Item, tag="userMessage", kw_only=True):
    """The user's input as Codex recorded it (after any sidecar rewrite)."""

    type: ClassVar[str] = "userMessage"
    content: list[Any] = msgspec.field(default_factory=list)  # list[UserInput]
    client_id: str | None = None

    def __post_init__(self) -> None:
        self.content = user_inputs(self.content)


class AgentMessageItem(_Item, tag="agentMessage", kw_only=True):
    type: ClassVar[str] = "agentMessage"
    text: str = ""
    phase: str | None = None  # commentary | partial_answer | final_answer


class ReasoningItem(_Item, tag="reasoning", kw_only=True):
    """Reasoning summary parts and (when the model exposes it) raw reasoning text."""

    type: ClassVar[str] = "reasoning"
    summary: list[str] = msgspec.field(default_factory=list)
    content: list[str] = msgspec.field(default_factory=list)


class CommandExecutionItem(_Item, tag="commandExecution", kw_only=True):
    """A shell command run by Codex (its id is the model's tool call id)."""

    type: ClassVar[str] = "commandExecution"
    command: str = ""
    cwd: str | None = None
    status: str | None = None
    aggregated_output: str | None = None
    exit_code: int | None = None
    duration_ms: int | None = None
    process_id: str | None = None
    source: str | None = None
    command_actions: list[Any] = msgspec.field(default_factory=list)


class FileUpdateChange(_Codex, kw_only=True):
    """One file of a patch; ``kind`` is ``{"type": "add"|"delete"|"update", ...}``."""

    path: str
    diff: str = ""
    kind: dict[str, Any] | str | None = None

    @property
    def kind_type(self) -> str | None:
        if isinstance(self.kind, dict):
            value = self.kind.get("type")
            return value if isinstance(value, str) else None
        return self.kind

    @property
    def move_path(self) -> str | None:
        if isinstance(self.kind, dict):
            value = self.kind.get("move_path")
            return value if isinstance(value, str) else None
        return None


class FileChangeItem(_Item, tag="fileChange", kw_only=True):
    """A patch applied (or not) by Codex's apply_patch tool."""

    type: ClassVar[str] = "fileChange"
    changes: list[FileUpdateChange] = msgspec.field(default_factory=list)
    status: str | None = None


class McpToolCallResult(_Codex, kw_only=True):
    content: list[Any] = msgspec.field(default_factory=list)  # MCP content blocks
    structured_content: Any = None


class McpToolCallError(_Codex, kw_only=True):
    message: str = ""


class McpToolCallItem(_Item, tag="mcpToolCall", kw_only=True):
    type: ClassVar[str] = "mcpToolCall"
    server: str = ""
    tool: str = ""
    status: str | None = None
    arguments: Any = None
    result: McpToolCallResult | None = None
    error: McpToolCallError | None = None
    duration_ms: int | None = None


class DynamicToolCallItem(_Item, tag="dynamicToolCall", kw_only=True):
    """A client-side (dynamic) tool call; ``content_items`` is its output."""

    type: ClassVar[str] = "dynamicToolCall"
    tool: str = ""
    namespace: str | None = None
    arguments: Any = None
    status: str | None = None
    # [{"type": "inputText", "text"} | {"type": "inputImage", "imageUrl"} | ...]
    content_items: list[dict[str, Any]] | None = None
    success: bool | None = None
    duration_ms: int | None = None


class WebSearchItem(_Item, tag="webSearch", kw_only=True):
    type: ClassVar[str] = "webSearch"
    query: str = ""
    # {"type": "search", "query", "queries"} | {"type": "openPage", "url"} | ...
    action: dict[str, Any] | None = None
    results: list[Any] | None = None


class ContextCompactionItem(_Item, tag="contextCompaction", kw_only=True):
    """Codex compacted the thread's history natively (no summary text exposed)."""

    type: ClassVar[str] = "contextCompaction"


class PlanItem(_Item, tag="plan", kw_only=True):
    type: ClassVar[str] = "plan"
    text: str = ""


class UnknownItem(_Codex, kw_only=True):
    """A thread item whose ``type`` is not modelled here (or no longer fits)."""

    type: str
    id: str = ""
    raw: dict[str, Any] = msgspec.field(default_factory=dict)


ThreadItem = (
    UserMessageItem
    | AgentMessageItem
    | ReasoningItem
    | CommandExecutionItem
    | FileChangeItem
    | McpToolCallItem
    | DynamicToolCallItem
    | WebSearchItem
    | ContextCompactionItem
    | PlanItem
    | UnknownItem
)

ITEM_TYPES: dict[str, type[_Item]] = {
    str(cls.__struct_config__.tag): cls
    for cls in (
        UserMessageItem,
        AgentMessageItem,
        ReasoningItem,
        CommandExecutionItem,
        FileChangeItem,
        McpToolCallItem,
        DynamicToolCallItem,
        WebSearchItem,
        ContextCompactionItem,
        PlanItem,
    )
}

_json_decoder = msgspec.json.Decoder()


def _as_builtins(data: Any) -> Any:
    if isinstance(data, (bytes, bytearray, memoryview, str, msgspec.Raw)):
        return _json_decoder.decode(data)
    return data


def thread_item(data: Any) -> ThreadItem:
    """One thread item from its dict (or JSON); never raises.

    An unknown ``type`` or a known type whose shape does not fit becomes an
    :class:`UnknownItem` holding the raw dict.
    """
    if isinstance(data, (_Item, UnknownItem)):
        return cast(ThreadItem, data)
    try:
        data = _as_builtins(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        log.debug("thread item is not JSON; kept as unknown")
        return UnknownItem(type="")
    if not isinstance(data, dict):
        log.debug("thread item is not an object; kept as unknown")
        return UnknownItem(type="")
    kind = data.get("type")
    raw_id = data.get("id")
    item_id = raw_id if isinstance(raw_id, str) else ""
    cls = ITEM_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        log.debug("unknown thread item type", extra={"fields": {"type": str(kind)[:64], "itemId": item_id}})
        return UnknownItem(type=kind if isinstance(kind, str) else "", id=item_id, raw=data)
    try:
        return cast(ThreadItem, msgspec.convert(data, cls))
    except msgspec.ValidationError as exc:
        log.debug(
            "thread item does not fit its type; kept as unknown",
            extra={"fields": {"type": kind, "itemId": item_id, "error": str(exc)[:200]}},
        )
        return UnknownItem(type=str(kind), id=item_id, raw=data)


def user_input(data: Any) -> UserInput:
    """One user-input item from its dict (or JSON); never raises."""
    if isinstance(data, (_Input, UnknownInput)):
        return cast(UserInput, data)
    try:
        data = _as_builtins(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return UnknownInput(type="")
    if not isinstance(data, dict):
        return UnknownInput(type="")
    kind = data.get("type")
    cls = USER_INPUT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        log.debug("unknown user input type", extra={"fields": {"type": str(kind)[:64]}})
        return UnknownInput(type=kind if isinstance(kind, str) else "", raw=data)
    try:
        return cast(UserInput, msgspec.convert(data, cls))
    except msgspec.ValidationError as exc:
        log.debug(
            "user input does not fit its type; kept as unknown",
            extra={"fields": {"type": kind, "error": str(exc)[:200]}},
        )
        return UnknownInput(type=str(kind), raw=data)


def user_inputs(items: Any) -> list[UserInput]:
    """A list of user inputs (see :func:`user_input`); a non-list gives ``[]``."""
    if not isinstance(items, list):
        return []
    return [user_input(x) for x in items]


def _thread_items(items: Any) -> list[ThreadItem]:
    if not isinstance(items, list):
        return []
    return [thread_item(x) for x in items]


# --------------------------------------------------------------------------
# Client requests (params)
# --------------------------------------------------------------------------


class DynamicToolNamespaceTool(_Codex, kw_only=True):
    name: str = ""
    type: str | None = None


class DynamicToolSpec(_Codex, kw_only=True):
    """A client-declared tool: ``{"type": "function", name}`` or a namespace of tools.

    ``type`` is optional because older clients send function specs without it.
    """

    name: str = ""
    type: str | None = None
    tools: list[DynamicToolNamespaceTool] | None = None

    def tool_names(self) -> list[str]:
        """Names the model can call: the function's, or a namespace's members."""
        if self.type == "namespace" or self.tools is not None:
            return [t.name for t in self.tools or () if t.name]
        return [self.name] if self.name else []


class ThreadCompactStartParams(_Codex, kw_only=True):
    thread_id: str


class AdditionalContextEntry(_Codex, kw_only=True):
    kind: str = ""  # untrusted | application
    value: str = ""
    name: str | None = None


class TurnStartParams(_Codex, kw_only=True):
    """``turn/start``'s params. ``input`` stays as decoded (dicts, every
    field kept: the projection copies the client's items as they are);
    :meth:`inputs` gives them typed. Decoding runs no Python code of this
    module, so the relay's typed view of a request costs a conversion only."""

    thread_id: str
    input: list[Any] = msgspec.field(default_factory=list)  # the decoded UserInput items
    additional_context: dict[str, AdditionalContextEntry] | None = None
    model: str | None = None
    cwd: str | None = None
    collaboration_mode: dict[str, Any] | None = None

    def inputs(self) -> list[UserInput]:
        """The input items typed (see :func:`user_input`)."""
        return user_inputs(self.input)


# --------------------------------------------------------------------------
# Turns, threads and results
# --------------------------------------------------------------------------


class TurnError(_Codex, kw_only=True):
    message: str = ""
    codex_error_info: Any = None
    additional_details: str | None = None


class Turn(_Codex, kw_only=True):
    """A turn. Note: ``turn/completed`` carries only a *summary* of the items
    (``itemsView: "summary"``, typically just the final agent message); the
    full list comes from ``item/completed`` notifications or ``thread/resume``.
    """

    id: str
    status: str = TURN_IN_PROGRESS
    error: TurnError | None = None
    items: list[Any] = msgspec.field(default_factory=list)  # list[ThreadItem]
    items_view: str | None = None
    started_at: int | None = None  # seconds
    completed_at: int | None = None  # seconds
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        self.items = _thread_items(self.items)


class TurnStartResult(_Codex, kw_only=True):
    turn: Turn


# --------------------------------------------------------------------------
# Server notifications
# --------------------------------------------------------------------------


class TurnCompletedNotification(_Codex, kw_only=True):
    """``turn/completed``. ``turn`` stays as decoded (the dict, every field
    kept: the archive stores the turn as Codex sent it, and a field of an
    unexpected shape must not cost the turn); :meth:`typed_turn` gives it
    typed."""

    thread_id: str
    turn: Any  # the decoded Turn

    def typed_turn(self) -> Turn:
        """The turn typed; raises :class:`CodexDecodeError` when it does not fit."""
        return decode_as(Turn, self.turn)


class ItemCompletedNotification(_Codex, kw_only=True):
    """``item/completed``. ``item`` stays as decoded (the dict, every field
    kept: the mirror stores the item as Codex sent it); :meth:`typed_item`
    gives it typed. ``completedAtMs`` is not checked: a stamp of the wrong
    type must not cost the item (the reader keeps only an int)."""

    thread_id: str
    turn_id: str
    item: Any = None  # the decoded ThreadItem
    completed_at_ms: Any = None  # int

    def typed_item(self) -> ThreadItem:
        """The item typed (see :func:`thread_item`)."""
        return thread_item(self.item)


class TokenUsageBreakdown(_Codex, kw_only=True):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_output_tokens: int = 0
    total_tokens: int = 0


class ThreadTokenUsage(_Codex, kw_only=True):
    total: TokenUsageBreakdown = msgspec.field(default_factory=TokenUsageBreakdown)
    last: TokenUsageBreakdown | None = None  # None: not sent
    model_context_window: int | None = None


class ThreadTokenUsageUpdatedNotification(_Codex, kw_only=True):
    """``thread/tokenUsage/updated`` (its ``turnId`` is not read)."""

    thread_id: str
    token_usage: ThreadTokenUsage | None = None  # None: not sent


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------

_S = TypeVar("_S", bound=msgspec.Struct)


def decode_as(cls: type[_S], data: Any) -> _S:
    """Decode ``data`` (JSON bytes/str/Raw, or builtins) as ``cls``.

    Raises :class:`CodexDecodeError` for an invalid message; unknown fields,
    unknown item types and missing optional fields never raise.
    """
    try:
        if isinstance(data, (bytes, bytearray, memoryview, str, msgspec.Raw)):
            if isinstance(data, msgspec.Raw) and not data:
                raise CodexDecodeError(f"{cls.__name__}: missing")
            return msgspec.json.decode(data, type=cls)
        return msgspec.convert(data, cls)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise CodexDecodeError(f"{cls.__name__}: {str(exc)[:200]}") from None


def callable_tool_names(tools: list[Any]) -> frozenset[str]:
    """The names the model can call among a client's ``dynamicTools``: a
    function's name, a namespace's members (OpenClaw declares most of its
    tools in the namespaces ``openclaw`` and ``openclaw_direct``); an entry
    of an unknown shape is skipped."""
    names: set[str] = set()
    for entry in tools:
        if not isinstance(entry, dict):
            continue
        try:
            names.update(decode_as(DynamicToolSpec, entry).tool_names())
        except CodexDecodeError:
            continue
    return frozenset(names)
