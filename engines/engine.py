"""The engine object: what an engine is, and how the sidecar finds its optional methods.

Optional engine methods
-----------------------
``ingest``, ``assemble`` and ``compact`` are required.  ``bootstrap``,
``ingest_batch``, ``after_turn``, ``maintain``, ``dispose`` and
``on_session_reset`` are optional,
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
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from .api import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    BootstrapResult,
    CompactParams,
    CompactResult,
    EngineHost,
    EngineInfo,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    MaintainParams,
    MaintainResult,
    SessionResetParams,
    ToolCallParams,
    ToolCallResult,
    ToolSpec,
)

__all__ = [
    "EXTENSION_METHODS",
    "OPTIONAL_METHODS",
    "REQUIRED_METHODS",
    "BaseContextEngine",
    "ContextEngine",
    "ContextEngineWithOptionals",
    "ContextEngineWithTools",
    "after_turn_with_fallback",
    "engine_default",
    "implements",
    "optional_method",
]

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
    "on_session_reset",
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
    ``maintain``, ``dispose``, ``on_session_reset``) are deliberately not
    members: a Protocol member
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

    async def on_session_reset(self, params: SessionResetParams) -> None: ...


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
                turn_trigger=params.turn_trigger,
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
                turn_trigger=params.turn_trigger,
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
                    turn_trigger=params.turn_trigger,
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
    async def on_session_reset(self, params: SessionResetParams) -> None:
        """Stand-in: the new session simply starts empty (its first assemble says so)."""
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
