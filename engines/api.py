"""The context-engine plugin contract, in Python.

This module is the Python form of OpenClaw's ``ContextEngine`` contract (see
``ENGINE_API.md``): the same names in snake_case, so that an author who knows
OpenClaw finds what they expect.  Everything here is importable from the
``engines`` package itself.

Data types
----------
Every type is a :class:`msgspec.Struct` with keyword-only fields (so adding a
field with a default later never breaks a caller) and ``rename="camel"`` (so
its JSON form uses OpenClaw's field names: ``tool_call_id`` <-> ``toolCallId``,
``is_error`` <-> ``isError``, ``mime_type`` <-> ``mimeType``, ...).
Messages are tagged by ``role`` and content blocks by ``type``; the tag is also
a class attribute, so ``message.role`` and ``block.type`` work on instances
and on the classes.  Use :func:`to_openclaw` / :func:`from_openclaw` (Python
objects) or :func:`encode_openclaw` / :func:`decode_openclaw` (JSON bytes) to
cross the boundary to OpenClaw's transcript shape.

OpenClaw writes optional fields by leaving them out, never as ``null``.  The
message and block types therefore omit fields that equal their default when
encoded, and every field OpenClaw requires (``isError``, ``timestamp``, the
usage counters, ...) has no default so it is always written.  A few optional
pi-ai fields outside the minimal contract (``textSignature``, ``api``,
``provider``, ``details``, ...) are modelled too, so that reading and
rewriting a real transcript keeps them; any other unknown field is dropped on
decode, as msgspec does for every Struct.

The engine object itself (the ``ContextEngine`` protocols,
:class:`BaseContextEngine` and how optional methods are found) is
:mod:`engines.engine`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

__all__ = [
    "AGENT_MESSAGE_ROLES",
    "AfterTurnParams",
    "AgentMessage",
    "AssembleParams",
    "AssembleResult",
    "AssistantContent",
    "AssistantMessage",
    "BootstrapParams",
    "BootstrapResult",
    "CompactParams",
    "CompactResult",
    "CompactionDetails",
    "CompactionSummaryMessage",
    "CompleteParams",
    "CompleteResult",
    "ContentBlock",
    "ContextProjection",
    "EngineHost",
    "EngineHostError",
    "EngineInfo",
    "ImageBlock",
    "IngestBatchParams",
    "IngestBatchResult",
    "IngestParams",
    "IngestResult",
    "MaintainParams",
    "MaintainResult",
    "PromptCacheInfo",
    "SessionResetParams",
    "RuntimeContext",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "ToolCallParams",
    "ToolCallResult",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UserContent",
    "UserMessage",
    "decode_openclaw",
    "encode_openclaw",
    "from_openclaw",
    "messages_from_openclaw",
    "to_openclaw",
]


# --------------------------------------------------------------------------
# Struct bases
# --------------------------------------------------------------------------


class _Wire(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """Base of the shapes OpenClaw stores in its transcript.

    msgspec does not inherit ``kw_only`` (it applies to the fields a class
    defines), so every subclass repeats it.  ``omit_defaults`` reproduces OpenClaw's habit of leaving optional fields
    out instead of writing ``null``.
    """


class _Model(msgspec.Struct, kw_only=True, rename="camel"):
    """Base of the sidecar-side shapes (params, results, info).

    Defaults are kept on encode: these are not stored by OpenClaw, and an
    explicit ``"reason": null`` is clearer in a debug dump than a missing key.
    """


# --------------------------------------------------------------------------
# Content blocks (tagged by ``type``)
# --------------------------------------------------------------------------


class _Block(_Wire, tag_field="type", kw_only=True):
    """Common base so that every block shares the ``type`` tag field."""


class TextBlock(_Block, tag="text", kw_only=True):
    """Plain text (``{"type": "text", "text": ...}``)."""

    type: ClassVar[Literal["text"]] = "text"
    text: str
    # pi-ai: opaque provider signature for the text, kept for lossless rewrite.
    text_signature: str | None = None


class ImageBlock(_Block, tag="image", kw_only=True):
    """An inline image: base64 ``data`` and its ``mimeType``."""

    type: ClassVar[Literal["image"]] = "image"
    data: str
    mime_type: str


class ThinkingBlock(_Block, tag="thinking", kw_only=True):
    """Model reasoning; the signature lets a provider verify replayed thinking."""

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    # pi-ai: set when the provider returned the reasoning only in encrypted form.
    redacted: bool | None = None


class ToolCallBlock(_Block, tag="toolCall", kw_only=True):
    """A tool invocation requested by the assistant."""

    type: ClassVar[Literal["toolCall"]] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any]
    # pi-ai: provider signature attached to a tool call (Gemini), kept as-is.
    thought_signature: str | None = None


UserContent = TextBlock | ImageBlock
AssistantContent = TextBlock | ThinkingBlock | ToolCallBlock
ContentBlock = TextBlock | ImageBlock | ThinkingBlock | ToolCallBlock


# --------------------------------------------------------------------------
# Usage and runtime context
# --------------------------------------------------------------------------


class Usage(_Wire, kw_only=True):
    """Token usage of one model call, in OpenClaw's (pi-ai's) shape.

    The counters have no defaults on purpose: OpenClaw requires them, so they
    must always be written.
    """

    input: int
    output: int
    cache_read: int
    cache_write: int
    total_tokens: int
    # pi-ai: {input, output, cacheRead, cacheWrite, total} in currency units.
    cost: dict[str, Any] | None = None


class PromptCacheInfo(_Model, kw_only=True):
    """Prompt-cache observation; omitted (None) when the backend does not report it."""

    cached_input_tokens: int
    input_tokens: int


class RuntimeContext(_Model, kw_only=True):
    """What the sidecar knows about the current run; every field may be unknown."""

    cwd: str | None = None
    model: str | None = None
    token_budget: int | None = None
    current_token_count: int | None = None
    context_window: int | None = None
    last_usage: Usage | None = None
    prompt_cache: PromptCacheInfo | None = None


# --------------------------------------------------------------------------
# Messages (tagged by ``role``)
# --------------------------------------------------------------------------


class _Message(_Wire, tag_field="role", kw_only=True):
    """Common base so that every message shares the ``role`` tag field."""


class UserMessage(_Message, tag="user", kw_only=True):
    """A user turn: a plain string or text/image blocks."""

    role: ClassVar[Literal["user"]] = "user"
    content: str | list[UserContent]
    timestamp: int  # ms since the epoch


class AssistantMessage(_Message, tag="assistant", kw_only=True):
    """A model reply: text, thinking and tool-call blocks plus call metadata."""

    role: ClassVar[Literal["assistant"]] = "assistant"
    content: list[AssistantContent]
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    timestamp: int
    # pi-ai metadata, optional here so that transcripts round-trip.
    api: str | None = None
    provider: str | None = None
    response_id: str | None = None
    error_message: str | None = None


class ToolResultMessage(_Message, tag="toolResult", kw_only=True):
    """The result of one tool call, linked by ``toolCallId``."""

    role: ClassVar[Literal["toolResult"]] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[UserContent]
    is_error: bool
    timestamp: int
    # pi-ai: tool-specific structured details (not sent to the model).
    details: Any | None = None


class CompactionSummaryMessage(_Message, tag="compactionSummary", kw_only=True):
    """A summary standing in for compacted history."""

    role: ClassVar[Literal["compactionSummary"]] = "compactionSummary"
    summary: str
    tokens_before: int
    tokens_after: int | None = None
    timestamp: int


AgentMessage = UserMessage | AssistantMessage | ToolResultMessage | CompactionSummaryMessage

AGENT_MESSAGE_ROLES: frozenset[str] = frozenset(
    {"user", "assistant", "toolResult", "compactionSummary"}
)


# --------------------------------------------------------------------------
# Engine description
# --------------------------------------------------------------------------


class EngineInfo(_Model, kw_only=True):
    """Identity and declared capabilities of an engine."""

    id: str
    name: str
    version: str
    owns_compaction: bool = False
    turn_maintenance_mode: Literal["foreground", "background"] = "foreground"


class ContextProjection(_Model, kw_only=True):
    """How the engine wants its assembled context projected into Codex.

    ``per_turn`` re-projects on every turn; ``thread_bootstrap`` projects once
    per ``epoch`` (a new epoch means: start a new Codex thread).
    """

    mode: Literal["per_turn", "thread_bootstrap"]
    epoch: str | None = None
    fingerprint: str | None = None


# --------------------------------------------------------------------------
# Params (every one carries session_id and session_key)
# --------------------------------------------------------------------------


class BootstrapParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    session_file: str
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class IngestParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    message: AgentMessage
    is_heartbeat: bool = False
    #: ``turn/start``'s ``turnTrigger`` as the client sent it (OpenClaw: ``user``,
    #: ``heartbeat``, ``cron``, ``memory``, ...); None when it sent none.
    turn_trigger: str | None = None


class IngestBatchParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    messages: list[AgentMessage]
    is_heartbeat: bool = False
    #: ``turn/start``'s ``turnTrigger`` as the client sent it (OpenClaw: ``user``,
    #: ``heartbeat``, ``cron``, ``memory``, ...); None when it sent none.
    turn_trigger: str | None = None


class AssembleParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    messages: list[AgentMessage]
    token_budget: int | None = None
    available_tools: frozenset[str] = frozenset()
    citations_mode: str | None = None
    model: str | None = None
    prompt: str | None = None
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class AfterTurnParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    session_file: str
    messages: list[AgentMessage]
    pre_prompt_message_count: int
    token_budget: int | None = None
    is_heartbeat: bool = False
    #: ``turn/start``'s ``turnTrigger`` as the client sent it (OpenClaw: ``user``,
    #: ``heartbeat``, ``cron``, ``memory``, ...); None when it sent none.
    turn_trigger: str | None = None
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class MaintainParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    session_file: str
    reason: Literal["bootstrap", "turn", "manual"]
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class CompactParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    token_budget: int | None = None
    force: bool = False
    current_token_count: int | None = None
    compaction_target: Literal["budget", "threshold"] = "budget"
    custom_instructions: str | None = None
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class SessionResetParams(_Model, kw_only=True):
    """OpenClaw reset the session (``/new``, ``/reset``): ``session_id`` and
    ``session_key`` name the engine session that begins now, empty;
    ``previous_session_id`` and ``previous_session_key`` the one it follows,
    whose data the sidecar never deletes. For the optional ``on_session_reset`` method."""

    session_id: str
    session_key: str
    previous_session_id: str
    previous_session_key: str
    session_file: str
    reason: Literal["openclaw_reset"] = "openclaw_reset"
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


class BootstrapResult(_Model, kw_only=True):
    bootstrapped: bool
    imported_messages: int | None = None
    reason: str | None = None


class IngestResult(_Model, kw_only=True):
    ingested: bool


class IngestBatchResult(_Model, kw_only=True):
    ingested_count: int


class AssembleResult(_Model, kw_only=True):
    messages: list[AgentMessage]
    estimated_tokens: int
    system_prompt_addition: str | None = None
    context_projection: ContextProjection | None = None


class MaintainResult(_Model, kw_only=True):
    changed: bool
    bytes_freed: int = 0
    rewritten_entries: int = 0
    reason: str | None = None


class CompactionDetails(_Model, kw_only=True):
    summary: str | None = None
    first_kept_entry_id: str | None = None
    tokens_before: int
    tokens_after: int | None = None
    details: dict[str, Any] = {}


class CompactResult(_Model, kw_only=True):
    ok: bool
    compacted: bool
    reason: str | None = None
    result: CompactionDetails | None = None


# --------------------------------------------------------------------------
# Engine tools and the host
# --------------------------------------------------------------------------


class ToolSpec(_Model, kw_only=True):
    """A tool the engine offers the model: its name, what it does, and the
    JSON Schema of its arguments (an ``object`` schema)."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ToolCallParams(_Model, kw_only=True):
    """One call by the model to one of the engine's tools."""

    session_id: str
    session_key: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    runtime_context: RuntimeContext = msgspec.field(default_factory=RuntimeContext)


class ToolCallResult(_Model, kw_only=True):
    """What the model reads back; ``is_error`` marks a failed call."""

    text: str
    is_error: bool = False


class CompleteParams(_Model, kw_only=True):
    """One model call the engine asks the host for (e.g. to write a summary)."""

    system: str
    prompt: str
    max_output_tokens: int | None = None
    model: str | None = None
    #: The reasoning effort of the call (``low``, ``medium``, ...); None: the model's default.
    effort: str | None = None


class CompleteResult(_Model, kw_only=True):
    """The model's text answer to a :class:`CompleteParams`."""

    text: str
    usage: Usage | None = None


class EngineHostError(Exception):
    """The host cannot answer a :meth:`EngineHost.complete` call (no
    app-server, deadline, model error).  An engine must fall back on its own."""


@runtime_checkable
class EngineHost(Protocol):
    """What the sidecar gives an engine through ``bind(host)``.

    ``state_dir`` is a folder (mode 0700) of the engine's own that survives
    restarts; ``count_tokens`` is exact for the model's tokenizer (o200k for
    current OpenAI models) and works offline; ``complete`` runs one model
    call invisibly to the client and raises :class:`EngineHostError` when it
    cannot answer.
    """

    state_dir: str

    def count_tokens(self, text: str, model: str | None = None) -> int: ...

    async def complete(self, params: CompleteParams) -> CompleteResult: ...


# --------------------------------------------------------------------------
# OpenClaw JSON conversion
# --------------------------------------------------------------------------

_T = TypeVar("_T")


def to_openclaw(obj: Any) -> Any:
    """Convert a Struct (or list/dict of them) to OpenClaw's camelCase builtins.

    The result is made of dicts, lists, strings and numbers, ready for any
    JSON encoder; tags (``role``, ``type``) are included.
    """
    return msgspec.to_builtins(obj)


def from_openclaw(data: Any, type: Any = AgentMessage) -> Any:  # noqa: A002 - mirrors msgspec
    """Build Structs from OpenClaw-shaped builtins (camelCase keys).

    ``type`` defaults to :data:`AgentMessage`, so a message is picked by its
    ``role``.  Raises :class:`msgspec.ValidationError` on a wrong shape or an
    unknown role.
    """
    return msgspec.convert(data, type)


def encode_openclaw(obj: Any) -> bytes:
    """Encode a Struct (or list of them) as OpenClaw-shaped JSON bytes."""
    return msgspec.json.encode(obj)


def decode_openclaw(data: bytes | str, type: Any = AgentMessage) -> Any:  # noqa: A002
    """Decode OpenClaw-shaped JSON into Structs (``AgentMessage`` by default)."""
    return msgspec.json.decode(data, type=type)


def messages_from_openclaw(
    items: Iterable[Mapping[str, Any]], *, skip_unknown: bool = False
) -> list[AgentMessage]:
    """Convert a sequence of OpenClaw message objects.

    OpenClaw transcripts also hold roles outside this contract (``custom``,
    ``bashExecution``, ``branchSummary``, ...).  With ``skip_unknown`` such
    items are left out instead of raising; a *known* role with a wrong shape
    still raises, because silently dropping a real message would corrupt an
    engine's view of history.
    """
    out: list[AgentMessage] = []
    for item in items:
        if skip_unknown and (
            not isinstance(item, Mapping) or item.get("role") not in AGENT_MESSAGE_ROLES
        ):
            continue
        out.append(msgspec.convert(item, AgentMessage))
    return out
