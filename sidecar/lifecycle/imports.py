"""A thread's history brought into its session's files as it opens: a
fork's archive and mirror copied from its parent's, a resumed thread the
mirror lacks imported from Codex, and turns a kill left out caught up.

Part of opening a session (:class:`sidecar.lifecycle.sessions.Sessions`
calls it while the session is not ready yet, so no turn of the thread is
mirrored meanwhile)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ..history.archive import TurnArchive, archive_path
from ..history.reads import ArchivedTurns
from ..relay import RpcError
from ..session.context import LifecycleContext
from ..session.state import ThreadSession
from ..store import bindings
from ..store.mirror import TranscriptMirror, now_ms, session_path
from ..thread.events import ResetLedger
from ..thread.files import Mirror
from ..thread.planner import fingerprints
from ..thread.session_events import HistoryImported, TurnsCaughtUp
from ..thread.state import handle
from ..translate import key_turn_id, messages_of, translate_turn, turn_key_prefix

log = logging.getLogger("codex_sidecar.lifecycle")

CATCH_UP_TURNS = 4
"""Newest turns checked against the mirror when a thread is resumed without its turns."""


class HistoryImport:
    def __init__(self, ctx: LifecycleContext, archived: ArchivedTurns) -> None:
        self.proxy = ctx.proxy
        self.sessions = ctx.sessions
        self.state_dir = ctx.state_dir
        self.options = ctx.options
        self.archived = archived

    def _fork_mirror(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> TranscriptMirror:
        parent = self.sessions.get(parent_id)
        if parent is not None:
            parent_path = parent.path
        else:
            bound = bindings.load(self.state_dir, parent_id)
            parent_path = session_path(self.state_dir, bound.session if bound else parent_id)
        before, last = params.get("beforeTurnId"), params.get("lastTurnId")
        stop = None
        if isinstance(before, str):
            # By turn id: the parent may itself be a fork, whose inherited
            # turns keep their own parent's keys.
            stop = lambda key: key_turn_id(key) == before  # noqa: E731
        elif isinstance(last, str):
            stop = _after_turn(last)
        return TranscriptMirror.fork(parent_path, session.path, session.thread_id, cwd=session.cwd, stop_before=stop)

    def fork_archive_then_mirror(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> TranscriptMirror:
        self._fork_archive(parent_id, session, params)
        return self._fork_mirror(parent_id, session, params)

    def _fork_archive(self, parent_id: str, session: ThreadSession, params: dict[str, Any]) -> None:
        before, last = params.get("beforeTurnId"), params.get("lastTurnId")
        TurnArchive(archive_path(self.state_dir, session.thread_id)).copy_from(
            TurnArchive(archive_path(self.state_dir, parent_id)),
            before=before if isinstance(before, str) else None,
            last=last if isinstance(last, str) else None,
        )

    async def catch_up(self, session: ThreadSession, thread: dict[str, Any]) -> None:
        """A resumed thread whose mirror exists: mirror (and archive) the turns
        Codex holds that the mirror lacks. A kill between forwarding a
        turn/completed and writing the turn leaves one; so does a turn run
        on this thread without the sidecar. Appends are keyed by turn and
        item, so turns already mirrored add nothing."""
        if session.mirror is None:
            return
        turns = thread.get("turns")
        if not turns:
            # Resumed without its turns (excludeTurns): what a kill can leave
            # out is the last turn or two; ask Codex for its newest few.
            try:
                listed = await self.proxy.request(
                    "thread/turns/list",
                    {"threadId": session.thread_id, "sortDirection": "desc", "limit": CATCH_UP_TURNS, "itemsView": "full"},
                    timeout=self.options.engine_deadline,
                )
            except (RpcError, trio.TooSlowError) as exc:
                log.warning("could not list the thread's latest turns to check the mirror", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
                return
            turns = list(reversed(listed.get("data") or [])) if isinstance(listed, dict) else []
        turns = [t for t in turns if isinstance(t, dict) and isinstance(t.get("id"), str)]
        turns = self.archived.visible_turns(session.thread_id, turns)
        if not turns:
            return
        now = now_ms()
        per_turn = [
            (turn, translate_turn(turn.get("items") or [], thread_id=session.thread_id, turn_id=turn["id"], timestamp=now, turn_status=turn.get("status")))
            for turn in turns
        ]
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        added = await trio.to_thread.run_sync(_catch_up_turns, session.thread_id, archive, per_turn, session.mirror)
        if added:
            # Codex holds these turns natively, as finalisation would have recorded.
            records = {t["id"]: r for t, r in per_turn}
            fps = [fingerprints(session.sizes, messages_of(records[tid])) for tid in added] if session.held is not None else []
            for action in handle(session, TurnsCaughtUp(list(added), fps)):
                if isinstance(action, ResetLedger) and session.ledger is not None:
                    await trio.to_thread.run_sync(session.ledger.reset, action.holdings)
            log.warning(
                "mirrored turns the transcript lacked (killed before writing them, or run without the sidecar)",
                extra={"fields": {"threadId": session.thread_id, "turns": len(added)}},
            )

    async def import_history(self, session: ThreadSession, thread: dict[str, Any]) -> None:
        """A resumed thread with no mirror: import its turns from the app-server once."""
        turns = thread.get("turns")
        if not isinstance(turns, list) or not turns:
            try:
                result = await self.proxy.request(
                    "thread/read", {"threadId": session.thread_id, "includeTurns": True}, timeout=self.options.engine_deadline
                )
                turns = (result.get("thread") or {}).get("turns") if isinstance(result, dict) else None
            except (RpcError, trio.TooSlowError) as exc:
                log.warning("could not import thread history", extra={"fields": {"threadId": session.thread_id, "error": type(exc).__name__}})
                return
        if not isinstance(turns, list):
            return
        turns = self.archived.visible_turns(session.thread_id, turns)
        now = now_ms()
        records = []
        for turn in turns:
            if isinstance(turn, dict) and isinstance(turn.get("id"), str):
                records.extend(
                    translate_turn(turn.get("items") or [], thread_id=session.thread_id, turn_id=turn["id"], timestamp=now, turn_status=turn.get("status"))
                )
        assert session.mirror is not None
        # Archived too, so the reads keep showing them after a rebuild drops them.
        archive = TurnArchive(archive_path(self.state_dir, session.thread_id))
        known = [t for t in turns if isinstance(t, dict) and isinstance(t.get("id"), str)]
        added = await trio.to_thread.run_sync(_archive_many_then_append, archive, known, session.mirror, records)
        handle(session, HistoryImported(bool(messages_of(records))))
        log.info("imported thread history into the mirror", extra={"fields": {"threadId": session.thread_id, "entries": added}})


def _after_turn(last: str) -> Callable[[str], bool]:
    """A mirror copy's stop test for ``thread/fork`` with ``lastTurnId``:
    stop at the first entry after that turn's own (matched by turn id,
    under whichever thread's keys it was mirrored)."""
    seen = False

    def stop(key: str) -> bool:
        nonlocal seen
        if key_turn_id(key) == last:
            seen = True
            return False
        return seen

    return stop


def _catch_up_turns(thread_id: str, archive: TurnArchive, per_turn: list[tuple[dict[str, Any], list[Any]]], mirror: Mirror) -> list[str]:
    """Mirror and archive the turns of which the mirror has nothing at all (a
    turn with any entry, or its finalised marker, was mirrored: Codex's view
    of it may differ in detail, and must not add a second copy)."""
    added = []
    for turn, records in per_turn:
        finalized = f"{turn_key_prefix(thread_id, turn['id'])}finalized"
        if not records or mirror.has_key(finalized) or any(mirror.has_key(r.key) for r in records):
            continue
        mirror.append_records(records)
        archive.append_turn(turn)
        added.append(turn["id"])
    return added


def _archive_many_then_append(archive: TurnArchive, turns: list[dict[str, Any]], mirror: Mirror, records: list[Any]) -> int:
    for turn in turns:
        archive.append_turn(turn)
    return mirror.append_records(records)
