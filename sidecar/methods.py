"""The Codex methods the sidecar intercepts: one table, as data.

Each :class:`Row` declares, for one method, what the sidecar does with it:
the hook that sees the request (or the notification, or the server's
request), the hook that sees the answer, the part it belongs to (installed
whatever the engine, or only with one), its phase (where the order of two
hooks on one method matters), the members of its params or its answer that
carry thread ids (what the child's edge maps), and whether it is a read the
archive splices turns into (the vocabulary: :mod:`sidecar.rows`).
:func:`install` puts a part's rows on the relay's
:class:`~sidecar.relay.Hooks`; nothing else registers a hook.

Adding an intercepted method is one row here and one handler on the job it
belongs to. A row holds its handler as the job class's method
(``ArchivedTurns.on_thread_read``), so mypy checks that it exists and takes
what a hook takes; :func:`install` binds it to the one job of that class
among those it is given. So this module sits above the jobs and none of
them imports it: the relay's own rows (``RELAY``) are the relay's
(:data:`sidecar.relay.router.RELAY_ROWS`, installed by the router and
listed first here), and what the floors below read of the table is handed
to them by ``serve``: the lifecycle its rows (``Lifecycle.install``), the
history's edge the thread-id keys, the relay the notifications the
lifecycle reads.

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

from collections.abc import Iterable
from typing import Any

from .rows import (
    COMPLETION_READS,
    ID,
    ITEMS,
    THREAD,
    HookTable,
    Part,
    Phase,
    RequestHandler,
    ResponseHandler,
    Row,
    Sender,
    bind,
    reads,
)
from .session.overflow import TURN_CLIENT_REQUESTS, TURN_NOTIFICATIONS, TURN_SERVER_REQUESTS

__all__ = ["COMPLETION_READS", "ID", "ITEMS", "METHODS", "THREAD", "HookTable", "Part", "Phase", "RequestHandler", "ResponseHandler", "Row", "Sender", "bind", "derived", "read_response"]

C, N, S = Sender.CLIENT, Sender.NOTIFICATION, Sender.SERVER_REQUEST
RELAY, HISTORY, BARE, ENGINE, TOOLS, COMPACTION = Part.RELAY, Part.HISTORY, Part.BARE, Part.ENGINE, Part.TOOLS, Part.COMPACTION
SEE, FRONT, MAIN, BACK = Phase.SEE, Phase.FRONT, Phase.MAIN, Phase.BACK

METHODS: tuple[Row, ...]
"""The table, the rows its columns imply last (:func:`derived`). Built on
first use: its hooks are the jobs' methods, and a pure relay need not
import the jobs."""


def __getattr__(name: str) -> Any:
    if name == "METHODS":
        base = _base()
        table = globals()["METHODS"] = base + derived(base)
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _base() -> tuple[Row, ...]:
    from .history.reads import ArchivedTurns
    from .host.engine_tools import EngineTools
    from .lifecycle.compaction import Compaction
    from .lifecycle.core import Lifecycle
    from .lifecycle.finalize import Finalizer
    from .lifecycle.injections import Injections
    from .lifecycle.overflow import Overflow
    from .lifecycle.release import Releases
    from .lifecycle.reverts import ClientReverts
    from .lifecycle.sessions import Openings
    from .lifecycle.turns import Turns
    from .rebuild.fresh import Spares
    from .rebuild.inplace import InPlace
    from .relay.router import RELAY_ROWS

    # fmt: off
    return (
        # -- the relay's (what the client negotiated; sidecar/status: Codex's version, the threads seen)
        *RELAY_ROWS,
        # -- the history: reads spliced, names, deletes and archives follow a switched thread
        Row(method="thread/read", request=ArchivedTurns.on_thread_read, response=ArchivedTurns.on_thread_read_response, thread_keys=ID + THREAD + ITEMS, read=True),
        Row(method="thread/resume", request=Openings.on_resume, thread_keys=ID + THREAD + ITEMS, read=True),
        Row(method="thread/resume", response=Lifecycle.splice_opened, part=BARE),
        Row(method="thread/fork", request=Openings.remember_params, response=Lifecycle.splice_opened, part=BARE),
        Row(method="thread/fork", thread_keys=ID + THREAD + ITEMS, read=True),  # (its hooks: BARE above, ENGINE below)
        Row(method="thread/turns/list", request=ArchivedTurns.on_turns_list, response=ArchivedTurns.on_list_response, thread_keys=ID + ITEMS, read=True),
        Row(method="thread/items/list", request=ArchivedTurns.on_items_list, response=ArchivedTurns.on_list_response, thread_keys=ID + ITEMS, read=True),
        Row(method="thread/list", response=ArchivedTurns.on_thread_list_response, thread_keys=("parentThreadId", "ancestorThreadId", "attachedToThreadId") + THREAD + ITEMS),
        Row(method="thread/readState/changed", source=N, request=ArchivedTurns.on_read_state, thread_keys=ID),
        Row(method="thread/name/set", request=Spares.on_name_set, thread_keys=ID),
        Row(method="thread/delete", request=Openings.remember_request, response=Spares.follow_to_retired, thread_keys=ID),
        Row(method="thread/archive", request=Openings.remember_request, response=Spares.follow_to_retired, thread_keys=ID),
        # -- the turn lifecycle (an engine)
        Row(method="initialize", response=Lifecycle.after_initialize, part=ENGINE),
        Row(method="thread/start", request=Lifecycle.note_client_tools, part=ENGINE, phase=SEE),
        Row(method="thread/start", request=Openings.remember_params, response=Openings.on_thread_response, part=ENGINE, thread_keys=THREAD + ITEMS),
        Row(method="thread/resume", response=Openings.on_thread_response, part=ENGINE),
        Row(method="thread/fork", request=Spares.on_client_start, part=ENGINE),  # the client's own start, before the job
        Row(method="thread/fork", request=ClientReverts.on_fork, response=Openings.on_thread_response, part=ENGINE),
        Row(method="thread/start", response=ArchivedTurns.note_opened, part=ENGINE),
        Row(method="thread/start", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/resume", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/fork", response=Lifecycle.note_client_thread, part=ENGINE),
        Row(method="thread/revert", request=Spares.on_client_start, part=ENGINE),
        Row(method="thread/revert", request=ClientReverts.on_revert, response=ClientReverts.on_revert_response, part=ENGINE, thread_keys=ID + THREAD + ITEMS),
        Row(method="turn/start", request=Turns.on_turn_start, response=Turns.on_turn_start_response, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/compact/start", request=Compaction.on_compact_start, response=Compaction.on_compact_response, part=ENGINE, thread_keys=ID),
        Row(method="thread/inject_items", request=Injections.on_inject, response=Injections.on_inject_response, part=ENGINE, thread_keys=ID),
        Row(method="item/completed", source=N, request=Finalizer.on_item_completed, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/tokenUsage/updated", source=N, request=Finalizer.on_token_usage, part=ENGINE, thread_keys=ID),
        Row(method="turn/completed", source=N, request=Finalizer.on_turn_completed, part=ENGINE, thread_keys=ID + ITEMS),
        Row(method="thread/closed", source=N, request=Releases.on_thread_closed, part=ENGINE, thread_keys=ID),
        # an archive or a delete unloads the thread too, saying only these (codex 0.169.0)
        Row(method="thread/archived", source=N, request=Releases.on_thread_closed, part=ENGINE, thread_keys=ID),
        Row(method="thread/deleted", source=N, request=Releases.on_thread_closed, part=ENGINE, thread_keys=ID),
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
        *(Row(method=m, source=N, request=Overflow.as_client_sees, part=COMPACTION, phase=BACK, shapes=True) for m in TURN_NOTIFICATIONS),
        *(Row(method=m, source=S, request=Overflow.as_client_sees, part=COMPACTION, phase=BACK, shapes=True) for m in TURN_SERVER_REQUESTS),
        # -- hooked nowhere: only their thread ids, mapped at the edge
        Row(method="review/start", thread_keys=ID + ("reviewThreadId",) + ITEMS),
        Row(method="thread/section/move", thread_keys=ID + ("beforeThreadId",)),
        Row(method="applyPatchApproval", source=S, thread_keys=("conversationId",)),
        Row(method="execCommandApproval", source=S, thread_keys=("conversationId",)),
    )
    # fmt: on


def read_response() -> ResponseHandler:
    """What every read's answer goes through last with the engine's tools."""
    from .host.engine_tools import EngineTools

    return EngineTools.on_read_response


def derived(rows: Iterable[Row]) -> tuple[Row, ...]:
    """Rows the columns imply: every read's answer loses the engine's items
    (``BACK``, after the archive spliced its turns in)."""
    last = read_response()
    return tuple(Row(method=m, response=last, part=TOOLS, phase=BACK) for m in reads(rows))
