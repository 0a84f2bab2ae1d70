"""The method table's vocabulary: what a row of
:data:`sidecar.methods.METHODS` says, and what is read from rows given.

A :class:`Row` declares, for one Codex method, the hook that sees the
request (or the notification, or the server's request), the hook that sees
the answer, the part it belongs to, its phase, the members that carry
thread ids and whether it is a read the archive splices turns into. The
rows themselves hold the jobs' methods, so the table is assembled above the
jobs (:mod:`sidecar.methods`); everything here is data and pure functions
over the rows it is handed, and imports none of the jobs: the relay
installs its own rows (``RELAY``) with :func:`install`, the lifecycle its
parts, and the history's edge is handed the keys :func:`thread_id_keys`
reads. So no floor below the table imports it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

import msgspec


class HookTable(Protocol):
    """Where :func:`install` puts the rows' hooks (the relay's
    :class:`~sidecar.relay.Hooks`): named here, so that the relay, which
    installs its own rows, is not imported back."""

    def on_client_request(self, method: str, hook: Any) -> None: ...
    def on_server_notification(self, method: str, hook: Any) -> None: ...
    def on_server_request(self, method: str, hook: Any) -> None: ...
    def on_response(self, method: str, hook: Any) -> None: ...

RequestHandler = Callable[[Any, Any], Any]
"""A job's method on a request, a notification or a server request (unbound:
``Turns.on_turn_start``; ``(job, Message) -> Decision``, named loosely here so
that this module, which the relay reads, does not import the relay back)."""
ResponseHandler = Callable[[Any, Any, Any], Any]
"""A job's method on the answer to a client request (unbound; ``(job, Message, PendingRequest) -> Decision``)."""


class Part(enum.Enum):
    """Which sidecar a row belongs to; :func:`install` takes a set of them."""

    RELAY = "relay"
    """The relay's own observations (``sidecar/status``), with or without a lifecycle."""
    HISTORY = "history"
    """What keeps the client's history whole: installed whatever the engine."""
    BARE = "bare"
    """History with no engine: what the engine's own jobs do, and more, when there is one."""
    ENGINE = "engine"
    """The turn lifecycle: only with an engine."""
    TOOLS = "tools"
    """The engine's tools on the client's threads: only with an engine that has some."""
    COMPACTION = "compaction"
    """A turn that overflowed Codex's context window, retried after the engine
    makes room: only with an engine that owns compaction."""


class Phase(enum.IntEnum):
    """Where a hook runs among the hooks on its method."""

    SEE = 0
    """Sees the message as it came, before any hook rewrites it."""
    FRONT = 1
    """Rewrites or drops what the jobs after it must not see."""
    MAIN = 2
    """The jobs."""
    BACK = 3
    """After the jobs: sees (and may trim) what they made of the answer."""


class Sender(enum.Enum):
    CLIENT = "client"
    """A client request (``request``) and Codex's answer to it (``response``)."""
    NOTIFICATION = "notification"
    """A notification from Codex (``request`` sees it)."""
    SERVER_REQUEST = "server request"
    """A request from Codex to the client (``request`` sees it)."""


class Row(msgspec.Struct, frozen=True, kw_only=True):
    method: str
    source: Sender = Sender.CLIENT
    request: RequestHandler | None = None
    """The hook on the request (or notification, or server request): a job's method."""
    response: ResponseHandler | None = None
    """The hook on Codex's answer to a client request: a job's method."""
    part: Part = Part.HISTORY
    phase: Phase = Phase.MAIN
    thread_keys: tuple[str, ...] = ()
    """Members of its params or its answer whose UUID values are thread ids
    (mapped at the child's edge, :mod:`sidecar.history.backing`)."""
    read: bool = False
    """A read of a thread's turns: the archive splices the turns rebuilds
    took out of Codex into its answer, and the engine's items leave it."""
    shapes: bool = False
    """Its hook only shapes what the client sees of a notification (an
    overflow retry's ids renamed): a notification the client opted out of
    needs none, so it is not one the sidecar must keep (:func:`notifications_read`)."""


THREAD = ("id", "sessionId", "forkedFromId", "parentThreadId", "parent_thread_id", "attachedToThreadId")
"""Members of a ``Thread`` (``result.thread``, ``thread/list``'s entries,
``thread/started``'s ``thread``) whose values are thread ids (codex 0.169.0)."""
ITEMS = ("senderThreadId", "agentThreadId")
"""Members of the collaboration items in a turn (in reads and item
notifications) whose values are thread ids."""
ID = ("threadId",)

COMPLETION_READS = ("turn/started", "item/completed", "thread/tokenUsage/updated", "turn/completed")
"""What the engine's completions read of their hidden threads (``sidecar.host.completion``)."""


def notifications_read(rows: Iterable[Row]) -> tuple[str, ...]:
    """Every notification some hook of ``rows`` reads (the notification
    rows, but those that only shape what the client sees) or a completion
    collects: what a client's opt-out must not take from the sidecar when it
    speaks for an engine (``serve`` hands it to the relay)."""
    read = (r.method for r in rows if r.source is Sender.NOTIFICATION and not r.shapes)
    return tuple(dict.fromkeys([*read, *COMPLETION_READS]))


def reads(rows: Iterable[Row]) -> tuple[str, ...]:
    """The methods whose answers are reads of a thread's turns (the ``read`` column)."""
    return tuple(dict.fromkeys(r.method for r in rows if r.read))


def thread_id_keys(rows: Iterable[Row]) -> tuple[str, ...]:
    """Every member ``rows`` say carries thread ids (the edge's key list), first seen first."""
    return tuple(dict.fromkeys(k for r in rows for k in r.thread_keys))


def bind(handler: Callable[..., Any], jobs: Iterable[object]) -> Callable[..., Any]:
    """``handler`` (a job class's method) bound to the one job of ``jobs``
    whose class has it: the job's attribute of that name, so a method
    replaced on the class since the table was built (a test's patch) is the
    one bound."""
    jobs = tuple(jobs)
    found = [(job, name) for job in jobs for name in _names_of(type(job), handler)]
    if not found:  # replaced on its class: found by the class that defined it
        owner, _, name = getattr(handler, "__qualname__", "").rpartition(".")
        found = [(job, name) for job in jobs if any(k.__qualname__ == owner for k in type(job).__mro__)]
    if len(found) != 1:
        raise LookupError(f"{getattr(handler, '__qualname__', handler)!r}: {len(found)} jobs have it")
    job, name = found[0]
    bound: Callable[..., Any] = getattr(job, name)
    return bound


def _names_of(cls: type, handler: Any) -> list[str]:
    """The names ``cls`` (or a base of it) has ``handler`` under."""
    return list(dict.fromkeys(name for klass in cls.__mro__ for name, value in vars(klass).items() if value is handler))


def installed(parts: Collection[Part], rows: Iterable[Row]) -> list[Row]:
    """The rows of ``parts``, in the order their hooks are installed."""
    chosen = [(r.phase, n, r) for n, r in enumerate(rows) if r.part in parts and (r.request or r.response)]
    return [r for _, _, r in sorted(chosen, key=lambda t: (t[0], t[1]))]


def install(hooks: HookTable, jobs: Iterable[object], parts: Collection[Part], rows: Iterable[Row]) -> None:
    """Put the hooks of ``parts``' rows on ``hooks``, each handler bound to its job among ``jobs``."""
    jobs = tuple(jobs)
    for row in installed(parts, rows):
        if row.request is not None:
            hook = bind(row.request, jobs)
            if row.source is Sender.CLIENT:
                hooks.on_client_request(row.method, hook)
            elif row.source is Sender.NOTIFICATION:
                hooks.on_server_notification(row.method, hook)
            else:
                hooks.on_server_request(row.method, hook)
        if row.response is not None:
            if row.source is not Sender.CLIENT:
                raise ValueError(f"{row.method}: only a client request has a response hook")
            hooks.on_response(row.method, bind(row.response, jobs))
