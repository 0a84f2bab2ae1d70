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
belongs to. A handler is named by its path from the object that installs
the rows (``"archived.on_thread_read"``: the lifecycle's ``archived``, its
method ``on_thread_read``); the relay installs its own rows (``RELAY``) from
the router.

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
    request: str | None = None
    """The hook on the request (or notification, or server request), by path."""
    response: str | None = None
    """The hook on Codex's answer to a client request, by path."""
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

# fmt: off
METHODS: tuple[Row, ...] = (
    # -- the relay's (what the client negotiated; sidecar/status: Codex's version, the threads seen)
    Row(method="initialize", request="negotiation.on_initialize", part=RELAY, phase=FRONT),
    Row(method="initialize", response="observed.on_initialize", part=RELAY, phase=SEE),
    Row(method="thread/start", response="observed.on_thread_result", part=RELAY, phase=SEE),
    Row(method="thread/resume", response="observed.on_thread_result", part=RELAY, phase=SEE),
    Row(method="thread/fork", response="observed.on_thread_result", part=RELAY, phase=SEE),
    Row(method="thread/started", source=N, request="observed.on_thread_started", part=RELAY, phase=SEE, thread_keys=THREAD + ITEMS),
    # -- the history: reads spliced, names, deletes and archives follow a switched thread
    Row(method="thread/read", request="archived.on_thread_read", response="archived.on_thread_read_response", thread_keys=ID + THREAD + ITEMS, read=True),
    Row(method="thread/resume", request="opening.on_resume", thread_keys=ID + THREAD + ITEMS, read=True),
    Row(method="thread/resume", response="splice_opened", part=BARE),
    Row(method="thread/fork", request="opening.remember_params", response="splice_opened", part=BARE),
    Row(method="thread/fork", thread_keys=ID + THREAD + ITEMS, read=True),  # (its hooks: BARE above, ENGINE below)
    Row(method="thread/turns/list", request="archived.on_turns_list", response="archived.on_list_response", thread_keys=ID + ITEMS, read=True),
    Row(method="thread/items/list", request="archived.on_items_list", response="archived.on_list_response", thread_keys=ID + ITEMS, read=True),
    Row(method="thread/list", response="archived.on_thread_list_response", thread_keys=("parentThreadId", "ancestorThreadId", "attachedToThreadId") + THREAD + ITEMS),
    Row(method="thread/readState/changed", source=N, request="archived.on_read_state", thread_keys=ID),
    Row(method="thread/name/set", request="spares.on_name_set", thread_keys=ID),
    Row(method="thread/delete", request="opening.remember_request", response="spares.follow_to_retired", thread_keys=ID),
    Row(method="thread/archive", request="opening.remember_request", response="spares.follow_to_retired", thread_keys=ID),
    # -- the turn lifecycle (an engine)
    Row(method="initialize", response="after_initialize", part=ENGINE),
    Row(method="thread/start", request="note_client_tools", part=ENGINE, phase=SEE),
    Row(method="thread/start", request="opening.remember_params", response="opening.on_thread_response", part=ENGINE, thread_keys=THREAD + ITEMS),
    Row(method="thread/resume", response="opening.on_thread_response", part=ENGINE),
    Row(method="thread/fork", request="reverts.on_fork", response="opening.on_thread_response", part=ENGINE),
    Row(method="thread/start", response="archived.note_opened", part=ENGINE),
    Row(method="thread/start", response="note_client_thread", part=ENGINE),
    Row(method="thread/resume", response="note_client_thread", part=ENGINE),
    Row(method="thread/fork", response="note_client_thread", part=ENGINE),
    Row(method="thread/revert", request="reverts.on_revert", response="reverts.on_revert_response", part=ENGINE, thread_keys=ID + THREAD + ITEMS),
    Row(method="turn/start", request="turns.on_turn_start", response="turns.on_turn_start_response", part=ENGINE, thread_keys=ID + ITEMS),
    Row(method="thread/compact/start", request="compaction.on_compact_start", response="compaction.on_compact_response", part=ENGINE, thread_keys=ID),
    Row(method="thread/inject_items", request="injections.on_inject", response="injections.on_inject_response", part=ENGINE, thread_keys=ID),
    Row(method="item/completed", source=N, request="finalizer.on_item_completed", part=ENGINE, thread_keys=ID + ITEMS),
    Row(method="thread/tokenUsage/updated", source=N, request="finalizer.on_token_usage", part=ENGINE, thread_keys=ID),
    Row(method="turn/completed", source=N, request="finalizer.on_turn_completed", part=ENGINE, thread_keys=ID + ITEMS),
    Row(method="thread/closed", source=N, request="opening.on_thread_closed", part=ENGINE, thread_keys=ID),
    # a rebuild's revert: its notifications never reach the client (before the archive's read state)
    Row(method="thread/status/changed", source=N, request="inplace.swallow_noise", part=ENGINE, phase=FRONT, thread_keys=ID),
    Row(method="thread/readState/changed", source=N, request="inplace.swallow_noise", part=ENGINE, phase=FRONT),
    Row(method="thread/reverted", source=N, request="inplace.swallow_noise", part=ENGINE, phase=FRONT, thread_keys=ID),
    # a turn whose turn/completed was lost ends when Codex says the thread is idle (a rebuild's own status swallowed above)
    Row(method="thread/status/changed", source=N, request="turns.on_thread_status", part=ENGINE),
    # -- the engine's tools: offered on thread/start, answered, their items out of sight
    Row(method="thread/start", request="tools.on_thread_start", part=TOOLS, phase=FRONT),
    Row(method="thread/start", response="tools.on_started", part=TOOLS, phase=BACK),
    Row(method="thread/fork", request="tools.on_fork", part=TOOLS, phase=FRONT),
    Row(method="thread/turns/list", request="tools.on_list", part=TOOLS, phase=FRONT),
    Row(method="thread/items/list", request="tools.on_list", part=TOOLS, phase=FRONT),
    Row(method="item/tool/call", source=S, request="tools.on_tool_call", part=TOOLS, phase=FRONT, thread_keys=ID),
    Row(method="item/started", source=N, request="tools.on_item", part=TOOLS, phase=FRONT, thread_keys=ID + ITEMS),
    Row(method="item/completed", source=N, request="tools.on_item", part=TOOLS, phase=FRONT),
    Row(method="turn/completed", source=N, request="tools.on_turn_completed", part=TOOLS, phase=FRONT),
    Row(method="serverRequest/resolved", source=N, request="tools.on_resolved", part=TOOLS, phase=FRONT, thread_keys=ID),
    # (tools.on_read_response is on every read's answer, from the ``read`` column: see derived)
    # -- a turn that overflowed the context window (an engine that owns compaction): withheld after the engine's
    #    tools took their items (FRONT, after those rows), retried, and the retry shown under the first attempt's id (BACK)
    Row(method="error", source=N, request="overflow.on_error", part=COMPACTION, phase=FRONT, thread_keys=ID),
    Row(method="turn/completed", source=N, request="overflow.on_turn_completed", part=COMPACTION, phase=FRONT),
    *(Row(method=m, request="overflow.on_turn_request", part=COMPACTION, thread_keys=ID) for m in TURN_CLIENT_REQUESTS),
    Row(method="turn/start", response="overflow.on_turn_start_response", part=COMPACTION, phase=BACK),
    *(Row(method=m, source=N, request="overflow.as_client_sees", part=COMPACTION, phase=BACK) for m in TURN_NOTIFICATIONS),
    *(Row(method=m, source=S, request="overflow.as_client_sees", part=COMPACTION, phase=BACK) for m in TURN_SERVER_REQUESTS),
    # -- hooked nowhere: only their thread ids, mapped at the edge
    Row(method="review/start", thread_keys=ID + ("reviewThreadId",) + ITEMS),
    Row(method="thread/section/move", thread_keys=ID + ("beforeThreadId",)),
    Row(method="applyPatchApproval", source=S, thread_keys=("conversationId",)),
    Row(method="execCommandApproval", source=S, thread_keys=("conversationId",)),
)
# fmt: on


def _rows(rows: Iterable[Row] | None) -> tuple[Row, ...]:
    return tuple(METHODS if rows is None else rows)


READ_RESPONSE = "tools.on_read_response"
"""What every read's answer goes through last with the engine's tools."""


COMPLETION_READS = ("turn/started", "item/completed", "thread/tokenUsage/updated", "turn/completed")
"""What the engine's completions read of their hidden threads (``sidecar.host.completion``)."""


SHAPES_ONLY = frozenset({"overflow.as_client_sees"})
"""Hooks that only shape what the client sees of a notification (an
overflow retry's ids renamed): one the client opted out of needs none."""


def notifications_read(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """Every notification some hook reads (the notification rows, but those
    that only shape what the client sees) or a completion collects: what a
    client's opt-out must not take from the sidecar when it speaks for an engine."""
    read = (r.method for r in _rows(rows) if r.source is Sender.NOTIFICATION and r.request not in SHAPES_ONLY)
    return tuple(dict.fromkeys([*read, *COMPLETION_READS]))


def reads(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """The methods whose answers are reads of a thread's turns (the ``read`` column)."""
    return tuple(dict.fromkeys(r.method for r in _rows(rows) if r.read))


def derived(rows: Iterable[Row] | None = None) -> tuple[Row, ...]:
    """Rows the columns imply: every read's answer loses the engine's items
    (``BACK``, after the archive spliced its turns in)."""
    return tuple(Row(method=m, response=READ_RESPONSE, part=TOOLS, phase=BACK) for m in reads(rows))


def thread_id_keys(rows: Iterable[Row] | None = None) -> tuple[str, ...]:
    """Every member the table says carries thread ids (the edge's key list), first seen first."""
    return tuple(dict.fromkeys(k for r in _rows(rows) for k in r.thread_keys))


def resolve(root: Any, path: str) -> Callable[..., Any]:
    """The handler ``path`` names on ``root`` (``"archived.on_thread_read"``)."""
    target = root
    for name in path.split("."):
        target = getattr(target, name)
    if not callable(target):
        raise TypeError(f"{path} is not a hook")
    return target


def installed(parts: Collection[Part], rows: Iterable[Row] | None = None) -> list[Row]:
    """The rows of ``parts``, in the order their hooks are installed."""
    every = _rows(rows)
    every = every + derived(every)
    chosen = [(r.phase, n, r) for n, r in enumerate(every) if r.part in parts and (r.request or r.response)]
    return [r for _, _, r in sorted(chosen, key=lambda t: (t[0], t[1]))]


def install(hooks: HookTable, root: Any, parts: Collection[Part], rows: Iterable[Row] | None = None) -> None:
    """Put the hooks of ``parts``' rows on ``hooks``, each handler resolved on ``root``."""
    for row in installed(parts, rows):
        if row.request is not None:
            hook = resolve(root, row.request)
            if row.source is Sender.CLIENT:
                hooks.on_client_request(row.method, hook)
            elif row.source is Sender.NOTIFICATION:
                hooks.on_server_notification(row.method, hook)
            else:
                hooks.on_server_request(row.method, hook)
        if row.response is not None:
            if row.source is not Sender.CLIENT:
                raise ValueError(f"{row.method}: only a client request has a response hook")
            hooks.on_response(row.method, resolve(root, row.response))
