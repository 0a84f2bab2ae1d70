"""The listings of a thread's turns and items with the archived ones in them.

``thread/turns/list`` (newest first by default) and ``thread/items/list``
(oldest first by default) page the same way: Codex's own pages cover what it
still holds, the archived units (turns, or item entries) are older, and pages
of those are the sidecar's, with its own cursors (see
:func:`sidecar.history.archive.hidden_page`). :class:`ArchivedListings` is
the part of :class:`sidecar.history.reads.ArchivedTurns` that answers them;
the state it reads (the archived turns, the listings on their way) is that
class's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from protocol import encode_response

from ..relay import HANDLED, Decision, Message, PendingRequest, Proxy, Slot
from .archive import (
    CURSOR_PREFIX,
    TurnsInView,
    anchored_position,
    backwards_cursor,
    codex_cursor_from_start,
    decode_cursor,
    encode_cursor,
    entry_times,
    find_turn,
    hidden_page,
    item_entries,
    unwrap_cursor,
    wrap_cursor,
)

# What a listing's request hooks keep on it for its answer's (PendingRequest.note):
SPLICE = Slot[tuple[str, str, str, Any, dict[str, Any]]]("reads.splice")
"""A listing to splice: (space, thread id, direction, limit, params)."""
WRAP = Slot[str]("reads.wrap")
"""The space (turns, items) of a listing whose cursors to wrap."""


class Visible(Protocol):
    """What the client may see of a thread's turns (``sidecar.host``'s
    ``EngineTools``: without the engine's tool call items)."""

    def visible_page(self, thread_id: str, page: Any) -> Any: ...
    def visible_turns(self, thread_id: str, turns: Any) -> Any: ...


class ArchivedListings:
    """Listings of turns and items, archived ones spliced in (a part of
    :class:`~sidecar.history.reads.ArchivedTurns`, which sets the state)."""

    proxy: Proxy
    wrap_cursors: bool
    visible: Visible | None
    codex_version: Callable[[], str | None]

    def hidden_for(self, thread_id: str) -> Sequence[dict[str, Any]]:
        raise NotImplementedError

    def on_turns_list(self, msg: Message) -> Decision:
        return self._on_list(msg, "turns", "desc")

    def on_items_list(self, msg: Message) -> Decision:
        return self._on_list(msg, "items", "asc")

    def on_list_response(self, msg: Message, pending: PendingRequest) -> Decision:
        plan = pending.noted(SPLICE)
        wrap = pending.noted(WRAP)
        result = msg.result()
        if not isinstance(result, dict):
            return None
        spliced = self._splice_page(*plan, result) if plan is not None else None
        page = spliced if spliced is not None else result
        wrapped = self._wrap_page(wrap, page) if wrap is not None else None
        page = wrapped if wrapped is not None else page
        return None if page is result else msg.set_result(page)

    def _wrap_page(self, space: str, page: dict[str, Any]) -> dict[str, Any] | None:
        """The page with Codex's cursors wrapped (see :func:`sidecar.history.archive.wrap_cursor`):
        ``nextCursor`` continues after the page's last unit, ``backwardsCursor``
        from (and including) its first, as Codex's own do. The sidecar's own
        cursors are left as they are; None when nothing changes."""
        data = page.get("data")
        if not isinstance(data, list) or not data or not isinstance(data[0], dict) or not isinstance(data[-1], dict):
            return None
        out = dict(page)
        for key, unit, inclusive in (("nextCursor", data[-1], False), ("backwardsCursor", data[0], True)):
            value, anchor = page.get(key), _unit_key(space, unit)
            if isinstance(value, str) and not value.startswith(CURSOR_PREFIX) and isinstance(anchor, str):
                out[key] = wrap_cursor(value, anchor, inclusive, space)
        return out if out != page else None

    def _splice_page(
        self, space: str, thread_id: str, direction: str, limit: Any, params: dict[str, Any], page: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Codex's first page of a listing (``data``, ``nextCursor``) with the
        archived units where they belong; None when nothing changes."""
        data = page.get("data")
        if not isinstance(data, list):
            return None
        units = self._units(space, thread_id, params)
        if not units:
            return None
        if direction == "asc":
            # A unit marked dropped whose revert failed is Codex's: listed once.
            keys = set(_keys(space, units))
            own = [u for u in data if not (isinstance(u, dict) and _unit_key(space, u) in keys)]
            # Backwards from the first (archived) unit: it alone, newest first.
            return {**page, "data": [*units, *own], "backwardsCursor": backwards_cursor(len(units), "asc", 0, units, space)}
        if page.get("nextCursor") is not None:
            return None  # Codex has more of its own first
        listed = {_unit_key(space, u) for u in data if isinstance(u, dict)}
        units = _without(space, units, listed)  # Codex's own, listed once
        if not units:
            return None
        room = limit - len(data) if isinstance(limit, int) and limit > 0 else len(units)
        if room <= 0:
            return {**page, "nextCursor": encode_cursor("desc", len(units), space)}
        rows, after = hidden_page(units, "desc", len(units), room, space=space)
        return {**page, "data": [*data, *rows], "nextCursor": after}


    def _units(self, space: str, thread_id: str, params: dict[str, Any]) -> Sequence[dict[str, Any]]:
        """The archived turns (in the items view asked for) or item entries,
        oldest first. Turns are read back as a page takes them (their ids
        and count are known: :class:`TurnsInView`); item entries are every
        archived turn's, read back here (a turn's count of items is not known
        until it is read)."""
        hidden = self.hidden_for(thread_id)
        if space == "turns":
            return TurnsInView(hidden, params.get("itemsView"))
        times = entry_times(self.codex_version())
        return [entry for t in hidden for entry in item_entries(t, times)]

    def _on_list(self, msg: Message, space: str, default: str) -> Decision:
        params = msg.params()
        if not isinstance(params, dict) or not isinstance(params.get("threadId"), str):
            return None
        thread_id, cursor, limit = params["threadId"], params.get("cursor"), params.get("limit")
        direction: str = params["sortDirection"] if params.get("sortDirection") in ("asc", "desc") else default
        original = params
        wrapped = unwrap_cursor(cursor, space)
        if wrapped is not None:
            # A Codex cursor the sidecar wrapped: if a rebuild has archived
            # the unit it continues from, the page is the sidecar's, in the
            # direction asked for (Codex's cursors carry none).
            codex_cursor, anchor, inclusive = wrapped
            one_turn = space == "items" and params.get("turnId") is not None
            units: Sequence[dict[str, Any]]
            if one_turn:
                turn = find_turn(self.hidden_for(thread_id), params["turnId"])
                units = item_entries(turn, entry_times(self.codex_version())) if turn is not None else []
            else:
                units = self._units(space, thread_id, params)
            keys = _keys(space, units)
            if anchor in keys:
                position = anchored_position(keys.index(anchor), direction, inclusive)
                if direction == "asc" and position >= len(units) and not one_turn:
                    # Past the last archived unit: Codex's own, from their start.
                    if self.wrap_cursors:
                        msg.note(WRAP, space)
                    return msg.set_params({**params, "cursor": None})
                page, after = hidden_page(units, direction, position, limit, space=space, handover=not one_turn)
                self._answer(msg, page, after, backwards_cursor(len(units), direction, position, page, space))
                return HANDLED
            params, cursor = {**params, "cursor": codex_cursor}, codex_cursor
        if self.wrap_cursors:
            msg.note(WRAP, space)
        decision = self._route_list(msg, space, params, thread_id, cursor, limit, direction)
        if decision is None and params is not original and msg.params() is original:
            msg.set_params(params)
        return decision

    def _route_list(
        self, msg: Message, space: str, params: dict[str, Any], thread_id: str, cursor: Any, limit: Any, direction: str
    ) -> Decision:
        if space == "items" and params.get("turnId") is not None:
            return self._archived_turn_items(msg, thread_id, params, direction)
        if space == "items" and isinstance(cursor, dict) and cursor.get("type") == "item":
            # An item anchor the client took from a page of archived items:
            # Codex no longer knows the item, so the page is the sidecar's.
            entries = self._units(space, thread_id, params)
            ids = [e["item"].get("id") for e in entries]
            if cursor.get("itemId") in ids:
                at = ids.index(cursor.get("itemId"))
                position = at + 1 if direction == "asc" else at
                page, after = hidden_page(entries, direction, position, limit, space=space)
                self._answer(msg, page, after, backwards_cursor(len(entries), direction, position, page, space))
                return HANDLED
        if codex_cursor_from_start(cursor, space):
            # The archived units are listed: Codex's own from their start.
            return msg.set_params({**params, "cursor": None})
        ours = decode_cursor(cursor, space)
        units = self._units(space, thread_id, params)
        if ours is not None or (direction == "asc" and cursor is None and units and isinstance(limit, int) and 0 < limit <= len(units)):
            kind, position = ours if ours is not None else ("asc", 0)
            page, after = hidden_page(units, kind, position, limit, space=space)
            self._answer(msg, page, after, backwards_cursor(len(units), kind, position, page, space))
            return HANDLED
        if not units or (direction == "asc" and cursor is not None):
            return None  # within Codex's own
        msg.note(SPLICE, (space, thread_id, direction, limit, params))
        if direction == "asc" and isinstance(limit, int) and limit > 0:
            # The archived units come first: Codex fills the rest of the page.
            return msg.set_params({**params, "limit": limit - len(units)})
        return None

    def _archived_turn_items(self, msg: Message, thread_id: str, params: dict[str, Any], direction: str) -> Decision:
        """thread/items/list of one turn: an archived turn is the sidecar's to
        page (Codex no longer knows it); any other goes to Codex."""
        turn = find_turn(self.hidden_for(thread_id), params["turnId"])
        if turn is None:
            return None
        entries = item_entries(turn, entry_times(self.codex_version()))
        cursor = params.get("cursor")
        ours = decode_cursor(cursor, "items")
        if ours is not None:
            kind, position = ours
        elif isinstance(cursor, dict) and cursor.get("type") == "item":
            # An exclusive anchor: asc lists the items after it, desc the ones before.
            ids = [e["item"].get("id") for e in entries]
            at = ids.index(cursor.get("itemId")) if cursor.get("itemId") in ids else len(ids)
            kind, position = direction, at + 1 if direction == "asc" else at
        else:
            kind, position = direction, 0 if direction == "asc" else len(entries)
        page, after = hidden_page(entries, kind, position, params.get("limit"), space="items", handover=False)
        self._answer(msg, page, after, backwards_cursor(len(entries), kind, position, page, "items"))
        return HANDLED

    def _answer(self, msg: Message, page: list[dict[str, Any]], after: str | None, back: str | None) -> None:
        result: dict[str, Any] = {"data": page, "nextCursor": after, "backwardsCursor": back}
        params = msg.params()
        if self.visible is not None and isinstance(params, dict) and isinstance(params.get("threadId"), str):
            result = self.visible.visible_page(params["threadId"], result)
        self.proxy.router.answer_client_request(msg.id, encode_response(msg.id, result))


def _keys(space: str, units: Sequence[dict[str, Any]]) -> list[Any]:
    """The units' keys, in order (turns' ids without reading them back)."""
    return units.ids if isinstance(units, TurnsInView) else [_unit_key(space, u) for u in units]


def _without(space: str, units: Sequence[dict[str, Any]], keys: set[Any]) -> Sequence[dict[str, Any]]:
    """The units whose keys are not in ``keys`` (turns not read back)."""
    return units.without(keys) if isinstance(units, TurnsInView) else [u for u in units if _unit_key(space, u) not in keys]


def _unit_key(space: str, unit: dict[str, Any]) -> Any:
    if space == "turns":
        return unit.get("id")
    item = unit.get("item")
    return item.get("id") if isinstance(item, dict) else None
