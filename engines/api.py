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

Optional engine methods
-----------------------
``ingest``, ``assemble`` and ``compact`` are required.  ``bootstrap``,
``ingest_batch``, ``after_turn``, ``maintain`` and ``dispose`` are optional,
and the spec's post-turn fallback (``after_turn``, else ``ingest_batch``, else
``ingest`` per new message) depends on knowing whether an engine *really*
implements one.  An engine signals "not implemented" in any of three ways:

* it has no such attribute;
* the attribute is ``None``;
* the attribute is a default supplied by :class:`BaseContextEngine` (these
  carry the :func:`engine_default` marker; an override in a subclass does not).

The sidecar must therefore never test ``hasattr``; it asks
:func:`optional_method` (bound method or ``None``) or :func:`implements`, and
can use :func:`after_turn_with_fallback` for the whole post-turn rule.  The
base defaults are still safe to call directly: ``ingest_batch`` ingests one by
one and ``after_turn`` performs the same ingest fallback, so a caller that
forgets to check cannot silently lose messages.

Engine tools and the host
-------------------------
Three more optional methods (:data:`EXTENSION_METHODS`) give an engine tools
the model can call and a handle on the host: ``tools()`` (synchronous; the
:class:`ToolSpec` list, fixed for the engine's lifetime), ``call_tool()``
(answers one call with a :class:`ToolCallResult`) and ``bind(host)`` (called
once, after load and before any session, with an :class:`EngineHost`: the
engine's own ``state_dir``, exact offline ``count_tokens`` and ``complete``
for one model call, which raises :class:`EngineHostError` when it cannot
answer).  :func:`optional_method` and :func:`implements` recognise them like
the lifecycle's optional methods.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

__all__ = [
    "AGENT_MESSAGE_ROLES",
    "EXTENSION_METHODS",
    "OPTIONAL_METHODS",
    "REQUIRED_METHODS",
    "AfterTurnParams",
    "AgentMessage",
    "AssembleParams",
    "AssembleResult",
    "AssistantContent",
    "AssistantMessage",
    "BaseContextEngine",
    "BootstrapParams",
    "BootstrapResult",
    "CompactParams",
    "CompactResult",
    "CompactionDetails",
    "CompactionSummaryMessage",
    "CompleteParams",
    "CompleteResult",
    "ContentBlock",
    "ContextEngine",
    "ContextEngineWithOptionals",
    "ContextEngineWithTools",
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
    "after_turn_with_fallback",
    "decode_openclaw",
    "encode_openclaw",
    "engine_default",
    "from_openclaw",
    "implements",
    "messages_from_openclaw",
    "optional_method",
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


class IngestBatchParams(_Model, kw_only=True):
    session_id: str
    session_key: str
    messages: list[AgentMessage]
    is_heartbeat: bool = False


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


# --------------------------------------------------------------------------
# The engine object
# --------------------------------------------------------------------------

REQUIRED_METHODS: tuple[str, ...] = ("ingest", "assemble", "compact")
OPTIONAL_METHODS: tuple[str, ...] = (
    "bootstrap",
    "ingest_batch",
    "after_turn",
    "maintain",
    "dispose",
)
#: Optional methods outside the turn lifecycle: engine tools and the host.
#: ``tools`` is synchronous; ``call_tool`` and ``bind`` are async.
EXTENSION_METHODS: tuple[str, ...] = ("tools", "call_tool", "bind")

# Attribute set on the functions BaseContextEngine supplies as stand-ins.
_DEFAULT_MARKER = "__context_engine_default__"


@runtime_checkable
class ContextEngine(Protocol):
    """The minimal engine shape: ``info`` plus the three required methods.

    The optional methods (``bootstrap``, ``ingest_batch``, ``after_turn``,
    ``maintain``, ``dispose``) are deliberately not members: a Protocol member
    is mandatory for a type checker, and an engine without them is valid.
    They are spelled out in :class:`ContextEngineWithOptionals`; at run time
    use :func:`optional_method` to find them.
    """

    info: EngineInfo

    async def ingest(self, params: IngestParams) -> IngestResult: ...

    async def assemble(self, params: AssembleParams) -> AssembleResult: ...

    async def compact(self, params: CompactParams) -> CompactResult: ...


@runtime_checkable
class ContextEngineWithOptionals(ContextEngine, Protocol):
    """An engine that has every optional method (for typing full implementations)."""

    async def bootstrap(self, params: BootstrapParams) -> BootstrapResult: ...

    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult: ...

    async def after_turn(self, params: AfterTurnParams) -> None: ...

    async def maintain(self, params: MaintainParams) -> MaintainResult: ...

    async def dispose(self) -> None: ...


@runtime_checkable
class ContextEngineWithTools(ContextEngine, Protocol):
    """An engine with tools and a host binding (the contract's additions)."""

    def tools(self) -> list[ToolSpec]: ...

    async def call_tool(self, params: ToolCallParams) -> ToolCallResult: ...

    async def bind(self, host: EngineHost) -> None: ...


_F = TypeVar("_F", bound=Callable[..., Any])


def engine_default(fn: _F) -> _F:
    """Mark a method as a stand-in for an optional method the engine lacks.

    :func:`optional_method` treats a marked method as absent.  The marker sits
    on the function object, so any override (which is a new function) is
    automatically "implemented".
    """
    setattr(fn, _DEFAULT_MARKER, True)
    return fn


def optional_method(engine: object, name: str) -> Callable[..., Any] | None:
    """Return ``engine.<name>`` if the engine really implements it, else ``None``.

    Absent means: no attribute, an attribute that is ``None`` or not callable,
    or a :func:`engine_default` stand-in (the :class:`BaseContextEngine`
    defaults).  Only names in :data:`OPTIONAL_METHODS` and
    :data:`EXTENSION_METHODS` are accepted, so a typo fails loudly instead of
    looking like "not implemented".  (``tools`` is returned as the plain
    method it is: call it without ``await``.)
    """
    if name not in OPTIONAL_METHODS and name not in EXTENSION_METHODS:
        raise ValueError(
            f"{name!r} is not an optional engine method; expected one of {OPTIONAL_METHODS + EXTENSION_METHODS}"
        )
    method = getattr(engine, name, None)
    if method is None or not callable(method):
        return None
    func = getattr(method, "__func__", method)
    if getattr(func, _DEFAULT_MARKER, False):
        return None
    return method


def implements(engine: object, name: str) -> bool:
    """Whether ``engine`` provides its own ``name`` (see :func:`optional_method`)."""
    if name in REQUIRED_METHODS:
        return callable(getattr(engine, name, None))
    return optional_method(engine, name) is not None


AfterTurnPath = Literal["after_turn", "ingest_batch", "ingest", "none"]


async def _ingest_new_messages(engine: Any, params: AfterTurnParams) -> AfterTurnPath:
    """The spec's fallback when an engine has no ``after_turn``.

    Only the messages after ``pre_prompt_message_count`` are new; they go to
    ``ingest_batch`` if implemented, else to ``ingest`` one by one, in order.
    Nothing is called when there is nothing new.
    """
    start = max(0, params.pre_prompt_message_count)
    new = list(params.messages[start:])
    if not new:
        return "none"
    batch = optional_method(engine, "ingest_batch")
    if batch is not None:
        await batch(
            IngestBatchParams(
                session_id=params.session_id,
                session_key=params.session_key,
                messages=new,
                is_heartbeat=params.is_heartbeat,
            )
        )
        return "ingest_batch"
    for message in new:
        await engine.ingest(
            IngestParams(
                session_id=params.session_id,
                session_key=params.session_key,
                message=message,
                is_heartbeat=params.is_heartbeat,
            )
        )
    return "ingest"


async def after_turn_with_fallback(engine: Any, params: AfterTurnParams) -> AfterTurnPath:
    """Run post-turn ingestion the way the spec prescribes, for any engine object.

    ``after_turn`` if implemented; otherwise ``ingest_batch`` with the new
    messages; otherwise ``ingest`` per new message.  Returns which path ran
    (``"none"`` when the fallback had no new message to ingest), so the caller
    can log it.  Exceptions from the engine propagate: the caller decides how
    a failed finalisation is reported.
    """
    after_turn = optional_method(engine, "after_turn")
    if after_turn is not None:
        await after_turn(params)
        return "after_turn"
    return await _ingest_new_messages(engine, params)


class BaseContextEngine(abc.ABC):
    """Convenience base class: subclass it, set ``info``, write three methods.

    The optional methods exist here as safe stand-ins marked with
    :func:`engine_default`, so :func:`optional_method` reports them as absent
    and the sidecar follows the spec's fallbacks.  Override any of them to
    implement it.  Subclassing is a convenience only: the sidecar accepts any
    object with the :class:`ContextEngine` shape.

    The constructor takes the engine's config mapping, so the class itself can
    be the entry-point factory.  It keeps a private copy in ``self.config``.
    """

    info: EngineInfo

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config: dict[str, Any] = dict(config or {})

    @abc.abstractmethod
    async def ingest(self, params: IngestParams) -> IngestResult: ...

    @abc.abstractmethod
    async def assemble(self, params: AssembleParams) -> AssembleResult: ...

    @abc.abstractmethod
    async def compact(self, params: CompactParams) -> CompactResult: ...

    @engine_default
    async def bootstrap(self, params: BootstrapParams) -> BootstrapResult:
        """Stand-in: nothing to import, so report "not bootstrapped"."""
        return BootstrapResult(bootstrapped=False, reason="bootstrap not implemented by this engine")

    @engine_default
    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        """Stand-in: ingest each message through ``ingest``, in order."""
        count = 0
        for message in params.messages:
            result = await self.ingest(
                IngestParams(
                    session_id=params.session_id,
                    session_key=params.session_key,
                    message=message,
                    is_heartbeat=params.is_heartbeat,
                )
            )
            count += bool(result.ingested)
        return IngestBatchResult(ingested_count=count)

    @engine_default
    async def after_turn(self, params: AfterTurnParams) -> None:
        """Stand-in: the spec's ingest fallback, so a blind call loses nothing."""
        await _ingest_new_messages(self, params)

    @engine_default
    async def maintain(self, params: MaintainParams) -> MaintainResult:
        """Stand-in: nothing to maintain."""
        return MaintainResult(changed=False, reason="maintain not implemented by this engine")

    @engine_default
    async def dispose(self) -> None:
        """Stand-in: nothing to release."""
        return None

    @engine_default
    def tools(self) -> list[ToolSpec]:
        """Stand-in: no tools."""
        return []

    @engine_default
    async def call_tool(self, params: ToolCallParams) -> ToolCallResult:
        """Stand-in: there are no tools, so every call is an error result."""
        return ToolCallResult(text=f"this engine has no tool named {params.name!r}", is_error=True)

    @engine_default
    async def bind(self, host: EngineHost) -> None:
        """Stand-in: the engine needs nothing from the host."""
        return None
