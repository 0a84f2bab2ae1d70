"""The Codex methods the sidecar intercepts: one table, as data.

Each :class:`Row` declares, for one method, what the sidecar does with it:
the hook that sees the request (or the notification, or the server's
request), the hook that sees the answer, the part it belongs to (installed
whatever the engine, or only with one), its phase (where the order of two
hooks on one method matters), the members of its params or its answer that
carry thread ids (what the child's edge maps), and whether it is a read the
archive splices turns into. :func:`install` puts a part's rows on the
relay's :class:`~sidecar.relay.Hooks`; nothing else registers a hook.

Adding an intercepted method is one row here and one handler on the job it
belongs to. A row holds its handler as the job class's method
(``ArchivedTurns.on_thread_read``), so mypy checks that it exists and takes
what a hook takes; :func:`install` binds it to the one job of that class
among those it is given (the lifecycle's jobs; the relay installs its own
rows, ``RELAY``, on the router's).

Hooks on one method run in (phase, row) order: a row's phase first, then
its place in :data:`METHODS`. The phases that matter today:

* ``thread/start``: the client's own tools are noted (``SEE``) before the
  engine's join them (``FRONT``), and the lifecycle remembers the params as
  rewritten (``MAIN``), so a backing thread is started with the same tools;
* ``item/started`` / ``item/completed`` / ``turn/completed``: the engine's
  tool call items are dropped (``FRONT``) before the lifecycle's finalizer
  mirrors the turn (``MAIN``);
* ``thread/readState/changed``: a rebuild revert's notifications are
  swallowed (``FRONT``) before the archive rewrites the read state (``MAIN``);
* ``thread/status/changed``: likewise swallowed (``FRONT``) before an idle
  status ends the joins of a turn whose ``turn/completed`` was lost
  (``MAIN``), so a rebuild's own revert never ends one;
* the reads: the archive splices its turns in (``MAIN``), then the engine's
  items are taken out of the whole answer (``BACK``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol

import msgspec

from .session.overflow import TURN_CLIENT_REQUESTS, TURN_NOTIFICATIONS, TURN_SERVER_REQUESTS


class HookTable(Protocol):
    """Where :func:`install` puts the rows' hooks (the relay's
    :class:`~sidecar.relay.Hooks`): named here, so the table, which the
    relay reads, does not import the relay back."""

    def on_client_request(self, method: str, hook: Any) -> None: ...
    def on_server_notification(self, method: str, hook: Any) -> None: ...
    def on_server_request(self, method: str, hook: Any) -> None: ...
    def on_response(self, method: str, hook: Any) -> None: ...

RequestHandler = Callable[[Any, Any], Any]
"""A job's method on a request, a notification or a server request (unbound:
``Turns.on_turn_start``; ``(job, Message) -> Decision``, named loosely here so
that the table, which the relay reads, does not import the relay back)."""
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


THREAD = ("id", "sessionId", "forkedFromId", "parentThreadId", "parent_thread_id", "attachedToThreadId")
"""Members of a ``Thread`` (``result.thread``, ``thread/list``'s entries,
``thread/started``'s ``thread``) whose values are thread ids (codex 0.169.0)."""
ITEMS = ("senderThreadId", "agentThreadId")
"""Members of the collaboration items in a turn (in reads and item
notifications) whose values are thread ids."""
ID = ("threadId",)

C, N, S = Sender.CLIENT, Sender.NOTIFICATION, Sender.SERVER_REQUEST
RELAY, HISTORY, BARE, ENGINE, TOOLS, COMPACTION = Part.RELAY, Part.HISTORY, Part.BARE, Part.ENGINE, Part.TOOLS, Part.COMPACTION
SEE, FRONT, MAIN, BACK = Phase.SEE, Phase.FRONT, Phase.MAIN, Phase.BACK

METHODS: tuple[Row, ...]
"""The table (built on first use: its hooks are the jobs' methods, and the
jobs' modules import the relay, which imports this one)."""


def __getattr__(name: str) -> Any:
    if name == "METHODS":
        table = globals()["METHODS"] = _table()
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _table() -> tuple[Row, ...]:
    from .history.reads import ArchivedTurns
    from .host.engine_tools import EngineTools
    from .lifecycle.compaction import Compaction
    from .lifecycle.core import Lifecycle
    from .lifecycle.finalize import Finalizer
    from .lifecycle.injections import Injections
    from .lifecycle.overflow import Overflow
    from .lifecycle.reverts import ClientReverts
    from .lifecycle.sessions import Sessions
    from .lifecycle.turns import Turns
    from .rebuild.fresh import Spares
    from .rebuild.inplace import InPlace
    from .relay.negotiation import Negotiation
    from .relay.observe import Observed

    # fmt: off
    return (
        # -- the relay's (what the client negotiated; sidecar/status: Codex's version, the threads seen)
        Row(method="initialize", request=Negotiation.on_initialize, part=RELAY, phase=FRONT),
        Row(method="initialize", response=Observed.on_initialize, part=RELAY, phase=SEE),
        Row(method="thread/start", response=Observed.on_thread_result, part=RELAY, phase=SEE),
        Row(method="thread/resume", response=Observed.on_thread_result, part=RELAY, phase=SEE),
        Row(method="thread/fork", response=Observed.on_thread_result, part=RELAY, phase=SEE),
        Row(method="thread/started", source=N, request=Observed.on_thread_started, part=RELAY, phase=SEE, thread_keys=THREAD + ITEMS),
        # -- the history: reads spliced, names, deletes and archives follow a switched thread
        Row(method="thread/read", request=ArchivedTurns.on_thread_read, response=ArchivedTurns.on_thread_read_response, thread_keys=ID + THREAD + ITEMS, read=True),
        Row(method="thread/resume", request=Sessions.on_resume, thread_keys=ID + THREAD + ITEMS, read=True),
        Row(method="thread/resume", response=Lifecycle.splice_opened, part=BARE),
        Row(method="thread/fork", request=Sessions.remember_params, response=Lifecycle.splice_opened, part=BARE),
        Row(method="thread/fork", thread_keys=ID + THREAD + ITEMS, read=True),  # (its hooks: BARE above, ENGINE below)
        Row(method="thread/turns/list", request=ArchivedTurns.on_turns_list, response=ArchivedTurns.on_list_response, thread_keys=ID + ITEMS, read=True),
        Row(method="thread/items/list", request=ArchivedTurns.on_items_list, response=ArchivedTurns.on_list_response, thread_keys=ID + ITEMS, read=True),
        Row(method="thread/list", response=ArchivedTurns.on_thread_list_response, thread_keys=("parentThreadId", "ancestorThreadId", "attachedToThreadId") + THREAD + ITEMS),
        Row(method="thread/readState/changed", source=N, request=ArchivedTurns.on_read_state, thread_keys=ID),
        Row(method="thread/name/set", request=Spares.on_name_set, thread_keys=ID),
        Row(method="thread/delete", request=Sessions.remember_request, response=Spares.follow_to_retired, thread_keys=ID),
        Row(method="thread/archive", request=Sessions.remember_request, response=Spares.follow_to_retired, thread_keys=ID),
        # -- the turn lifecycle (an engine)
        Row(method="initialize", response=Lifecycle.after_initialize, part=ENGINE),
        Row(method="thread/start", request=Lifecycle.note_client_tools, part=ENGINE, phase=SEE),
        Row(method="thread/start", request=Sessions.remember_params, response=Sessions.on_thread_response, part=ENGINE, thread_keys=THREAD + ITEMS),
        Row(method="thread/resume", response=Sessions.on_thread_response, part=ENGINE),
        Row(method="thread/fork", request=ClientReverts.on_fork, response=Sessions.on_thread_response, part=ENGINE),
        Row(method="thread/start", response=ArchivedTurns.note_opened, part=ENGINE),
        Row(method="thread/start", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/resume", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/fork", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/revert", request=ClientReverts.on_revert, response=ClientReverts.on_revert_response, part=ENGINE, thread_keys=ID + THREAD + ITEMS),
        Row(method="turn/start", request=Turns.on_turn_start, response=Turns.on_turn_start_response, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/compact/start", request=Compaction.on_compact_start, response=Compaction.on_compact_response, part=ENGINE, thread_keys=ID),
        Row(method="thread/inject_items", request=Injections.on_inject, response=Injections.on_inject_response, part=ENGINE, thread_keys=ID),
        Row(method="item/completed", source=N, request=Finalizer.on_item_completed, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/tokenUsage/updated", source=N, request=Finalizer.on_token_usage, part=ENGINE, thread_keys=ID),
        Row(method="turn/completed", source=N, request=Finalizer.on_turn_completed, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/closed", source=N, request=Sessions.on_thread_closed, part=ENGINE, thread_keys=ID),
        # a rebuild's revert: its notifications never reach the client (before the archive's read state)
        Row(method="thread/status/changed", source=N, request=InPlace.swallow_noise, part=ENGINE, phase=FRONT, thread_keys=ID),
        Row(method="thread/readState/changed", source=N, request=InPlace.swallow_noise, part=ENGINE, phase=FRONT),
        Row(method="thread/reverted", source=N, request=InPlace.swallow_noise, part=ENGINE, phase=FRONT, thread_keys=ID),
        # a turn whose turn/completed was lost ends when Codex says the thread is idle (a rebuild's own status swallowed above)
        Row(method="thread/status/changed", source=N, request=Turns.on_thread_status, part=ENGINE),
        # -- the engine's tools: offered on thread/start, answered, their items out of sight
        Row(method="thread/start", request=EngineTools.on_thread_start, part=TOOLS, phase=FRONT),
        Row(method="thread/start", response=EngineTools.on_started, part=TOOLS, phase=BACK),
        Row(method="thread/fork", request=EngineTools.on_fork, part=TOOLS, phase=FRONT),
        Row(method="thread/turns/list", request=EngineTools.on_list, part=TOOLS, phase=FRONT),
        Row(method="thread/items/list", request=EngineTools.on_list, part=TOOLS, phase=FRONT),
        Row(method="item/tool/call", source=S, request=EngineTools.on_tool_call, part=TOOLS, phase=FRONT, thread_keys=ID),
        Row(method="item/started", source=N, request=EngineTools.on_item, part=TOOLS, phase=FRONT, thread_keys=ID + ITEMS),
        Row(method="item/completed", source=N, request=EngineTools.on_item, part=TOOLS, phase=FRONT),
        Row(method="turn/completed", source=N, request=EngineTools.on_turn_completed, part=TOOLS, phase=FRONT),
        Row(method="serverRequest/resolved", source=N, request=EngineTools.on_resolved, part=TOOLS, phase=FRONT, thread_keys=ID),
        # (EngineTools.on_read_response is on every read's answer, from the ``read`` column: see derived)
        # -- a turn that overflowed the context window (an engine that owns compaction): withheld after the engine's
        #    tools took their items (FRONT, after those rows), retried, and the retry shown under the first attempt's id (BACK)
        Row(method="error", source=N, request=Overflow.on_error, part=COMPACTION, phase=FRONT, thread_keys=ID),
        Row(method="turn/completed", source=N, request=Overflow.on_turn_completed, part=COMPACTION, phase=FRONT),
        *(Row(method=m, request=Overflow.on_turn_request, part=COMPACTION, thread_keys=ID) for m in TURN_CLIENT_REQUESTS),
        Row(method="turn/start", response=Overflow.on_turn_start_response, part=COMPACTION, phase=BACK),
        *(Row(method=m, source=N, request=Overflow.as_client_sees, part=COMPACTION, phase=BACK) for m in TURN_NOTIFICATIONS),
        *(Row(method=m, source=S, request=Overflow.as_client_sees, part=COMPACTION, phase=BACK) for m in TURN_SERVER_REQUESTS),
        # -- hooked nowhere: only their thread ids, mapped at the edge
        Row(method="review/start", thread_keys=ID + ("reviewThreadId",) + ITEMS),
        Row(method="thread/section/move", thread_keys=ID + ("beforeThreadId",)),
        Row(method="applyPatchApproval", source=S, thread_keys=("conversationId",)),
        Row(method="execCommandApproval", source=S, thread_keys=("conversationId",)),
    )
    # fmt: on


def _rows(rows: Iterable[Row] | None) -> tuple[Row, ...]:
    if rows is not None:
        return tuple(rows)
    table = globals().get("METHODS")
    return table if table is not None else __getattr__("METHODS")


def read_response() -> ResponseHandler:
    """What every read's answer goes through last with the engine's tools."""
    from .host.engine_tools import EngineTools

    return EngineTools.on_read_response


COMPLETION_READS = ("turn/started", "item/completed", "thread/tokenUsage/updated", "turn/completed")
"""What the engine's completions read of their hidden threads (``sidecar.host.completion``)."""


def shapes_only() -> frozenset[RequestHandler]:
    """Hooks that only shape what the client sees of a notification (an
    overflow retry's ids renamed): one the client opted out of needs none."""
    from .lifecycle.overflow import Overflow

    return frozenset({Overflow.as_client_sees})


def notifications_read(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """Every notification some hook reads (the notification rows, but those
    that only shape what the client sees) or a completion collects: what a
    client's opt-out must not take from the sidecar when it speaks for an engine."""
    shaping = shapes_only()
    read = (r.method for r in _rows(rows) if r.source is Sender.NOTIFICATION and r.request not in shaping)
    return tuple(dict.fromkeys([*read, *COMPLETION_READS]))


def reads(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """The methods whose answers are reads of a thread's turns (the ``read`` column)."""
    return tuple(dict.fromkeys(r.method for r in _rows(rows) if r.read))


def derived(rows: Iterable[Row] | None = None) -> tuple[Row, ...]:
    """Rows the columns imply: every read's answer loses the engine's items
    (``BACK``, after the archive spliced its turns in)."""
    last = read_response()
    return tuple(Row(method=m, response=last, part=TOOLS, phase=BACK) for m in reads(rows))


def thread_id_keys(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """Every member the table says carries thread ids (the edge's key list), first seen first."""
    return tuple(dict.fromkeys(k for r in _rows(rows) for k in r.thread_keys))


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


def installed(parts: Collection[Part], rows: Iterable[Row] | None = None) -> list[Row]:
    """The rows of ``parts``, in the order their hooks are installed."""
    every = _rows(rows)
    every = every + derived(every)
    chosen = [(r.phase, n, r) for n, r in enumerate(every) if r.part in parts and (r.request or r.response)]
    return [r for _, _, r in sorted(chosen, key=lambda t: (t[0], t[1]))]


def install(hooks: HookTable, jobs: Iterable[object], parts: Collection[Part], rows: Iterable[Row] | None = None) -> None:
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
