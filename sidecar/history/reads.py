"""Answering the client's reads with the turns rebuilds took out of Codex.

A rebuild reverts the Codex thread to its framing, so Codex's own answers to
``thread/read``, ``thread/resume``, ``thread/fork`` and ``thread/turns/list``
cover only the turns since the last rebuild. :class:`ArchivedTurns` keeps,
per thread, the turns the archive (``sidecar.history.archive``) marks dropped, and
puts them back where Codex would have shown them:

* ``thread/read`` (``includeTurns``), ``thread/resume`` and ``thread/fork``
  (unless ``excludeTurns``): in front of Codex's turns;
* ``thread/turns/list``: a newest-first listing continues into them once
  Codex has no more, an oldest-first one starts with them; pages of
  archived turns carry the sidecar's own cursors, answered here and never
  forwarded (see :func:`sidecar.history.archive.hidden_page`); the
  listings are answered by its part :class:`sidecar.history.listings.ArchivedListings`.

Codex keeps one read state a Codex thread, and a rebuild takes the turns
it knew about away (a revert drops them, a switch leaves them on the
retired thread): its ``readState.firstUnread`` then names the first turn
since the rebuild. The client's first unread turn may be an archived one:
the position the client last saw when the rebuild ran is kept in the
archive (``TurnArchive.unread``), and shown instead of Codex's turn in
``thread/readState/changed``, ``thread/read`` and ``thread/list`` while that
turn is archived and the client has not marked its thread read since.

Its hooks are rows of :data:`sidecar.methods.METHODS` (part ``HISTORY``,
installed whatever the engine; the reads are its ``read`` column).

A thread with nothing archived is never touched: Codex's answer passes byte
for byte. The lists are loaded in a worker thread when a session opens and
after each revert; a blocking read is the fallback for a thread this
process has not opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import trio

from ..relay import Decision, Message, PendingRequest, Proxy, Slot
from .archive import (
    ARCHIVED_DIR,
    CURSOR_PREFIX,
    UNKNOWN,
    HiddenTurns,
    TurnArchive,
    archive_path,
    backwards_cursor,
    cut_for_fork,
    hidden_page,
    item_entries,
    splice_turns,
    turn_ids,
    wrap_cursor,
)
from .listings import ArchivedListings, Visible

# What a client request's hooks keep on it for its answer's (PendingRequest.note):
WITH_TURNS = Slot[bool]("reads.with_turns")
"""A thread/read's ``includeTurns``."""


class ArchivedTurns(ArchivedListings):
    def __init__(self, proxy: Proxy, state_dir: str | os.PathLike[str], *, wrap_cursors: bool = False, visible: Visible | None = None) -> None:
        """``wrap_cursors``: Codex's listing cursors handed out wrapped with their
        anchor, to survive rebuilds. ``visible``: what the client may see (None: all)."""
        self.proxy = proxy
        self.state_dir = state_dir
        self._cache: dict[str, Sequence[dict[str, Any]]] = {}
        self._generation: dict[str, int] = {}
        self.reverting: set[str] = set()
        """Threads whose rebuild revert is under way (set by the lifecycle)."""
        self.wrap_cursors = wrap_cursors
        self.shown_unread: dict[str, Any] = {}
        """thread id -> the ``readState.firstUnread`` the client last saw
        (what a rebuild records, :meth:`unread_to_record`)."""
        self.shown_path: dict[str, str] = {}
        """thread id -> the rollout ``path`` the client last saw."""
        self._recorded: dict[str, dict[str, Any]] = {}
        """thread id -> what the archive recorded the client saw (cache, see ``TurnArchive.shown``)."""
        self.visible = visible
        self.codex_version: Callable[[], str | None] = lambda: proxy.router.observed.codex_version  # entries answered are shaped as its own

    def visible_turns(self, thread_id: str, turns: list[Any]) -> list[Any]:
        """Codex's turns of a thread as the client (and the mirror) may take them."""
        return turns if self.visible is None else self.visible.visible_turns(thread_id, turns)

    def on_thread_read(self, msg: Message) -> Decision:
        params = msg.params()
        if isinstance(params, dict) and params.get("includeTurns"):
            msg.note(WITH_TURNS, True)
        return None

    def seed_fork(self, fork_id: str, parent_id: str, params: dict[str, Any]) -> None:
        """Codex copied the parent's turns since its last rebuild; the fork
        also inherits the archived ones before them (the lifecycle copies the
        archive file when it opens the fork's session)."""
        self._cache[fork_id] = cut_for_fork(self.hidden_for(parent_id), params.get("beforeTurnId"), params.get("lastTurnId"))

    def on_thread_read_response(self, msg: Message, pending: PendingRequest) -> Decision:
        include = pending.noted(WITH_TURNS) is True
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(thread, dict) or not isinstance(thread.get("id"), str):
            return None
        if include:
            return self.splice_thread(msg, result, thread)
        shown = self.as_client(thread["id"], result)
        return None if shown is result else msg.set_result(shown)

    # ------------------------------------------------------------ read state

    def client_unread(self, thread_id: str, first: Any) -> Any:
        """The client's ``firstUnread`` for Codex's ``first``: the position
        the last rebuild recorded when Codex names a turn and the recorded
        one is an archived turn (earlier than any Codex holds); Codex's
        otherwise. Codex's null (read) means the client marked the thread
        read: the recorded position is cleared, in the archive too."""
        shown = first
        if first is None:
            if self._recorded_of(thread_id)["unread"] is not None:
                self._recorded[thread_id] = {**self._recorded[thread_id], "unread": None}
                try:
                    archive = TurnArchive(archive_path(self.state_dir, thread_id))
                except ValueError:
                    archive = None
                if archive is not None:
                    self.proxy.spawn(trio.to_thread.run_sync, archive.mark_read)
        elif isinstance(first, dict) and first.get("type") == "turn":
            recorded = self._recorded_of(thread_id)["unread"]
            if isinstance(recorded, dict) and recorded.get("type") == "turn" and recorded != first:
                if recorded.get("turnId") in turn_ids(self.hidden_for(thread_id)):
                    shown = recorded
        self.shown_unread[thread_id] = shown
        return shown

    def unread_to_record(self, thread_id: str) -> Any:
        """What a rebuild of the thread records as its unread position:
        what the client last saw (:data:`UNKNOWN` when nothing showed it in
        this process)."""
        return self.shown_unread.get(thread_id, UNKNOWN)

    def client_path(self, thread_id: str, path: str) -> str:
        """The client's rollout ``path`` for Codex's: once a rebuild moved the
        thread (a revert starts a rollout segment of its own, a switch
        another thread), the one recorded before the first rebuild (in
        ``archived_sessions`` when Codex shows an archived one)."""
        recorded = self._recorded_of(thread_id)["path"] if path != self.shown_path.get(thread_id) else None
        shown = path
        if isinstance(recorded, str) and recorded != path and self.hidden_for(thread_id):
            shown = recorded
            if ARCHIVED_DIR in path and ARCHIVED_DIR not in recorded:
                shown = os.path.join(os.path.dirname(path), os.path.basename(recorded))
        self.shown_path[thread_id] = shown
        return shown

    def note_opened(self, msg: Message, pending: PendingRequest) -> Decision:
        """A ``thread/start`` answer: the path a later rebuild records."""
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if isinstance(thread, dict) and isinstance(thread.get("id"), str) and isinstance(thread.get("path"), str):
            self.shown_path[thread["id"]] = thread["path"]
        return None

    def as_client(self, thread_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """A one-thread answer's ``readState`` (at its top, or in its
        ``thread``) and ``thread.path`` as the client's; ``result`` itself
        when nothing changes."""
        out = result
        thread = out.get("thread")
        if isinstance(thread, dict) and isinstance(thread.get("path"), str):
            path = self.client_path(thread_id, thread["path"])
            if path != thread["path"]:
                out = {**out, "thread": {**thread, "path": path}}
        state = result.get("readState")
        if isinstance(state, dict) and "firstUnread" in state:
            shown = self.client_unread(thread_id, state["firstUnread"])
            if shown != state["firstUnread"]:
                out = {**out, "readState": {**state, "firstUnread": shown}}
        thread = out.get("thread")
        state = thread.get("readState") if isinstance(thread, dict) else None
        if isinstance(thread, dict) and isinstance(state, dict) and "firstUnread" in state:
            shown = self.client_unread(thread_id, state["firstUnread"])
            if shown != state["firstUnread"]:
                out = {**out, "thread": {**thread, "readState": {**state, "firstUnread": shown}}}
        return out

    def _state_as_client(self, thread_id: str, state: Any) -> Any:
        if not isinstance(state, dict) or "firstUnread" not in state:
            return state
        shown = self.client_unread(thread_id, state["firstUnread"])
        return state if shown == state["firstUnread"] else {**state, "firstUnread": shown}

    def on_read_state(self, msg: Message) -> Decision:
        """``thread/readState/changed``, as the client's."""
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        shown = self.as_client(params["threadId"], params)
        return None if shown is params else msg.set_params(shown)

    def _recorded_of(self, thread_id: str) -> dict[str, Any]:
        if thread_id not in self._recorded:
            try:
                path = archive_path(self.state_dir, thread_id)
            except ValueError:
                return {"unread": None, "path": None}
            self._recorded[thread_id] = TurnArchive(path).shown()  # cached (see hidden_for)
        return self._recorded[thread_id]

    def splice_thread(self, msg: Message, result: dict[str, Any], thread: dict[str, Any]) -> Decision:
        """The response with the turns the sidecar's rebuilds took out of the
        Codex thread back in front of Codex's own, and the thread's path and
        read state as the client's (:meth:`as_client`)."""
        shown = self.as_client(thread["id"], result)
        thread = shown["thread"] if isinstance(shown.get("thread"), dict) else thread
        turns = thread.get("turns")
        if isinstance(turns, list):
            self._reconcile(thread["id"], turns)
            spliced = splice_turns(self.hidden_for(thread["id"]), turns)
            if spliced is not None:
                shown = {**shown, "thread": {**thread, "turns": spliced}}
        return None if shown is result else msg.set_result(shown)

    def hidden_for(self, thread_id: str) -> Sequence[dict[str, Any]]:
        hidden = self._cache.get(thread_id)
        if hidden is None:
            try:
                path = archive_path(self.state_dir, thread_id)
            except ValueError:
                return []
            # Loaded in a worker thread when a session opens and after each
            # revert; this blocking read is the fallback for a thread this
            # process has not opened (a thread that no rebuild touched is
            # answered from a substring check).
            hidden = self._cache[thread_id] = TurnArchive(path).hidden()
        return hidden

    def _reconcile(self, thread_id: str, turns: list[Any]) -> None:
        """Turns marked dropped that Codex still lists were not reverted (a
        kill between the marks and the revert): give them back to Codex, in
        the cache now and in the archive in the background. Not while a
        revert of the thread is under way (the marks are about to come true)."""
        if thread_id in self.reverting:
            return
        hidden = self.hidden_for(thread_id)
        present = {t.get("id") for t in turns if isinstance(t, dict)}
        restored = [tid for tid in turn_ids(hidden) if tid in present]
        if not restored:
            return
        self._cache[thread_id] = hidden.without(present) if isinstance(hidden, HiddenTurns) else [t for t in hidden if t.get("id") not in present]
        try:
            archive = TurnArchive(archive_path(self.state_dir, thread_id))
        except ValueError:
            return
        self.proxy.spawn(trio.to_thread.run_sync, archive.mark_restored, restored)

    def forget(self, thread_id: str) -> None:
        """The archive changed: drop the cached list, and any load under way."""
        self._cache.pop(thread_id, None)
        self._recorded.pop(thread_id, None)
        self._generation[thread_id] = self._generation.get(thread_id, 0) + 1

    async def load(self, thread_id: str) -> None:
        """Load the thread's list in a worker thread, unless it is loaded."""
        if thread_id in self._cache:
            return
        try:
            archive = TurnArchive(archive_path(self.state_dir, thread_id))
        except ValueError:
            return
        generation = self._generation.get(thread_id, 0)
        hidden = await trio.to_thread.run_sync(archive.hidden)
        shown = await trio.to_thread.run_sync(archive.shown) if hidden else {"unread": None, "path": None}
        if self._generation.get(thread_id, 0) == generation:  # no revert since the read began
            self._cache.setdefault(thread_id, hidden)  # a read that loaded it meanwhile has the same
            self._recorded.setdefault(thread_id, shown)

    def on_thread_list_response(self, msg: Message, pending: PendingRequest) -> Decision:
        """``thread/list`` names a thread once. Codex lists a reverted
        thread once per rollout segment (each revert starts one), with the
        same id and each segment's own first prompt as ``preview``: the
        entries of one id become one, the newest segment's (listed first),
        with the preview, creation time and path of the original rollout (the one
        whose file name ends in the id), as if no rebuild had happened."""
        result = msg.result()
        data = result.get("data") if isinstance(result, dict) else None
        if not isinstance(result, dict) or not isinstance(data, list):
            return None
        given = result
        states = result.get("readStates")
        if isinstance(states, dict):
            shown = {k: self._state_as_client(k, v) for k, v in states.items()}
            if any(shown[k] is not states[k] for k in states):
                result = {**result, "readStates": shown}
        seen: dict[str, list[dict[str, Any]]] = {}
        for entry in data:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                seen.setdefault(entry["id"], []).append(entry)
        if all(len(group) == 1 for group in seen.values()):
            return None if result is given else msg.set_result(result)
        merged: list[Any] = []
        done: set[str] = set()
        for entry in data:
            thread_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(thread_id, str) or len(seen[thread_id]) == 1:
                merged.append(entry)
                continue
            if thread_id in done:
                continue
            done.add(thread_id)
            group = seen[thread_id]
            original = next((e for e in group if str(e.get("path") or "").endswith(f"{thread_id}.jsonl")), group[-1])
            merged.append({**entry, "preview": original.get("preview"), "createdAt": original.get("createdAt"), "path": original.get("path")})
        return msg.set_result({**result, "data": merged})

    def on_resume(self, msg: Message, params: dict[str, Any]) -> Decision:
        """An oldest-first ``initialTurnsPage`` starts with the archived turns:
        Codex fills the rest of the page (as for ``thread/turns/list``)."""
        asked = params.get("initialTurnsPage")
        thread_id = params.get("threadId")
        if not isinstance(asked, dict) or asked.get("sortDirection") != "asc" or not isinstance(thread_id, str):
            return None
        limit, archived = asked.get("limit"), len(self.hidden_for(thread_id))
        if not archived or not isinstance(limit, int) or limit <= archived:
            return None
        return msg.set_params({**params, "initialTurnsPage": {**asked, "limit": limit - archived}})

    def splice_resume(self, msg: Message, result: dict[str, Any], thread: dict[str, Any], params: dict[str, Any]) -> Decision:
        """A ``thread/resume`` answer: the thread's turns (unless
        ``excludeTurns``) and the ``initialTurnsPage`` asked for, each with
        the archived turns where Codex would have shown them, and the
        thread's path and read state as the client's (:meth:`as_client`)."""
        out = dict(self.as_client(thread["id"], result))
        thread = out["thread"]
        if not params.get("excludeTurns") and isinstance(thread.get("turns"), list):
            self._reconcile(thread["id"], thread["turns"])
            spliced = splice_turns(self.hidden_for(thread["id"]), thread["turns"])
            if spliced is not None:
                out["thread"] = {**thread, "turns": spliced}
        asked = params.get("initialTurnsPage")
        if isinstance(asked, dict) and isinstance(result.get("initialTurnsPage"), dict):
            direction: str = asked["sortDirection"] if asked.get("sortDirection") in ("asc", "desc") else "desc"
            page = result["initialTurnsPage"]
            if direction == "asc" and isinstance(asked.get("limit"), int) and 0 < asked["limit"] <= len(self._units("turns", thread["id"], asked)):
                # The archived turns alone fill more than the page: the page is
                # theirs, and the listing goes on with the sidecar's cursor.
                units = self._units("turns", thread["id"], asked)
                rows, after = hidden_page(units, "asc", 0, asked["limit"])
                out["initialTurnsPage"] = {**page, "data": rows, "nextCursor": after, "backwardsCursor": backwards_cursor(len(units), "asc", 0, rows)}
            else:
                spliced_page = self._splice_page("turns", thread["id"], direction, asked.get("limit"), asked, page)
                if spliced_page is not None:
                    out["initialTurnsPage"] = spliced_page
            if self.wrap_cursors:
                wrapped = self._wrap_page("turns", out["initialTurnsPage"])
                if wrapped is not None:
                    out["initialTurnsPage"] = wrapped
        return None if out == result else msg.set_result(out)

    def wrap_revert_cursors(
        self, thread_id: str, before: str, live_turns: list[str] | None, last_items: dict[str, str | None], result: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A ``thread/revert`` answer with its ``turnsBackwardsCursor`` and
        ``itemsBackwardsCursor`` wrapped (None: unchanged). Codex's cursors
        point at the newest turn and item the thread keeps, inclusive, and
        stop working once a rebuild moves that turn out of Codex, as its
        listing cursors do. Called before the sidecar follows the revert (the archive
        still lists the turns it drops). When every turn Codex held went
        (a revert to its first turn, or one the sidecar redirected there
        because the client named an archived turn), Codex answers no cursor
        although the client keeps archived turns: the cursor is then the
        sidecar's alone. ``live_turns``: the thread's turns Codex holds, in
        order (None: not known in this process, nothing is wrapped);
        ``last_items``: turn id -> id of its last item (None: it has none)."""
        if not self.wrap_cursors or live_turns is None:
            return None
        hidden = self.hidden_for(thread_id)
        archived: dict[str, dict[str, Any]] = {t["id"]: t for t in hidden if isinstance(t.get("id"), str)}
        order: list[str] = [*archived, *(t for t in live_turns if t not in archived)]
        if before not in order:
            return None
        kept = order[: order.index(before)]
        if not kept:
            return None  # nothing left: Codex's answer (no cursor) is the client's
        out = dict(result)

        def wrapped(key: str, anchor: str, anchor_archived: bool, space: str) -> None:
            codex = result.get(key)
            if isinstance(codex, str) and not codex.startswith(CURSOR_PREFIX):
                out[key] = wrap_cursor(codex, anchor, True, space)
            elif codex is None and anchor_archived:
                out[key] = wrap_cursor("", anchor, True, space)  # never goes to Codex: its anchor stays archived

        wrapped("turnsBackwardsCursor", kept[-1], kept[-1] in archived, "turns")
        for turn_id in reversed(kept):
            if turn_id in archived:
                items = [e["item"]["id"] for e in item_entries(archived[turn_id]) if isinstance(e["item"].get("id"), str)]
                if items:
                    wrapped("itemsBackwardsCursor", items[-1], True, "items")
                    break
            elif turn_id not in last_items:
                break  # not known (finalised before this process): left as Codex wrote it
            elif (last := last_items[turn_id]) is not None:
                wrapped("itemsBackwardsCursor", last, False, "items")
                break
        return out if out != result else None
