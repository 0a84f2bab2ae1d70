"""Codex turns that the sidecar's rebuilds took out of a thread.

A rebuild reverts the Codex thread to its framing, so Codex forgets the
turns before it; the client did not ask for that, and ``thread/read`` and
``thread/resume`` must keep answering with every turn of its thread. Each
finalised turn is archived as Codex itself shows it in ``thread/read`` (the
``turn/completed`` turn with the items of its ``item/completed``
notifications, ``itemsView`` "full"), and before each revert the turns it
drops are marked. ``sidecar.history.reads`` puts the marked turns back where
Codex would have shown them when it answers for the thread.

One JSONL file a thread, ``<state_dir>/turns/<thread id>.jsonl`` (0600):
``{"turn": {...}}``, ``{"dropped": [turn ids]}``, ``{"restored": [turn
ids]}`` (marked dropped, but Codex kept them: a refused revert, or a kill
between the marks and the revert, found when Codex lists them again; read in
file order, so a later rebuild can drop them again) and, when the client
reverts turns itself, ``{"forgotten": [turn ids]}`` records. A client
revert leaves ``{"reverting": {...}}`` before it goes to Codex, then
``{"forgetting": {"beforeTurnId", "intoArchive", "inFlightTurnIds"}}`` when
Codex answers it (``{"revertRefused": id}`` when Codex refuses it) and
``{"forgot": id}`` once the archive and the transcript mirror follow it.
A ``dropped`` record may carry what the client saw of its thread when the
rebuild dropped those turns (Codex shows the rebuilt thread's own after
it): ``"unread"``, its first unread position (``readState.firstUnread``),
and ``"path"``, its rollout file; an ``{"unread": null}`` record says the
client marked its thread read since (see :meth:`TurnArchive.shown`). A
kill in between leaves the last step undone; the next opening of the thread
does it (asking Codex's newest turn when the answer was never read). Appends are
single writes on an ``O_APPEND`` file, so a kill leaves at most a torn last
line, which reading skips and the next append terminates. Archiving is best effort: a failed write costs
the client those turns in later reads, never the turn itself. Each line is
an :class:`ArchiveRecord`, read by a typed decoder (``sidecar.store.records``):
one that does not decode is reported by file and line and skipped. The
file only grows, so a thread's hidden turns are held as their ids and the
places of their records (:class:`HiddenTurns`), read back when an answer
splices them in.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Container, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import msgspec
from msgspec import UNSET, UnsetType

from ..store.inspect import append_record
from ..store.mirror import session_path
from ..store.records import decode_lines, skipped

log = logging.getLogger("codex_sidecar.history")

ARCHIVED_DIR = f"{os.sep}archived_sessions{os.sep}"
"""Where Codex keeps an archived thread's rollout (under its home)."""
UNKNOWN: Any = object()
"""Not known (as opposed to None, which says "read")."""


class Forgetting(msgspec.Struct, frozen=True, rename="camel"):
    """Codex reverted the client's thread before ``before_turn_id``: the archive and mirror must follow."""

    before_turn_id: str
    into_archive: bool = False
    in_flight_turn_ids: list[str] = msgspec.field(default_factory=list)


class Reverting(msgspec.Struct, frozen=True, rename="camel"):
    """The client's revert before ``before_turn_id`` is about to go to Codex."""

    before_turn_id: str
    in_flight_turn_ids: list[str] = msgspec.field(default_factory=list)


class ArchiveRecord(msgspec.Struct, frozen=True):
    """One line of the archive; which members it has says what it is (see
    the module docstring; the others are :data:`msgspec.UNSET`, and not
    written). Members this version does not know are ignored."""

    turn: dict[str, Any] | UnsetType = UNSET
    """A turn as ``thread/read`` shows it (Codex's shape, kept as it is)."""
    dropped: list[str] | UnsetType = UNSET
    unread: Any = UNSET
    """The client's first unread position (``readState.firstUnread``); null: read."""
    path: str | UnsetType = UNSET
    restored: list[str] | UnsetType = UNSET
    forgotten: list[str] | UnsetType = UNSET
    forgetting: Forgetting | UnsetType = UNSET
    reverting: Reverting | UnsetType = UNSET
    revertRefused: str | UnsetType = UNSET  # noqa: N815 (the member's name on disk)
    forgot: str | UnsetType = UNSET


_decoder = msgspec.json.Decoder(ArchiveRecord)


class _TurnHead(msgspec.Struct):
    id: Any = None


class _RecordHead(msgspec.Struct):
    """A record as :meth:`TurnArchive.hidden` scans it: the turn's id, not its items."""

    turn: _TurnHead | UnsetType = UNSET
    dropped: list[str] | UnsetType = UNSET
    restored: list[str] | UnsetType = UNSET
    forgotten: list[str] | UnsetType = UNSET


_head_decoder = msgspec.json.Decoder(_RecordHead)


class HiddenTurns(Sequence[dict[str, Any]]):
    """Archived turns (oldest first) held as their ids and where their
    records sit in the archive file, which only ever grows: a turn is read
    and decoded when asked for, so a thread's hidden turns cost the sidecar
    their ids in memory however many turns and items they hold. A record
    that no longer reads (the file gone) is left out and logged."""

    def __init__(self, path: Path, spans: Sequence[tuple[str, int, int]] = ()) -> None:
        self.path = path
        self._spans = list(spans)  # (turn id, offset, length) of each turn's record

    @property
    def ids(self) -> list[str]:
        return [span[0] for span in self._spans]

    def __len__(self) -> int:
        return len(self._spans)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> HiddenTurns: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | HiddenTurns:
        if isinstance(index, slice):
            return HiddenTurns(self.path, self._spans[index])
        turns = self._read([self._spans[index]])
        if not turns:
            raise IndexError(f"archived turn {index} no longer reads")
        return turns[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._read(self._spans))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HiddenTurns):
            return self.path == other.path and self._spans == other._spans
        return isinstance(other, list) and list(self) == other

    __hash__ = None  # type: ignore[assignment]

    def without(self, ids: Container[Any]) -> HiddenTurns:
        return HiddenTurns(self.path, [span for span in self._spans if span[0] not in ids])

    def _read(self, spans: Sequence[tuple[str, int, int]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not spans:
            return out
        try:
            with open(self.path, "rb") as f:
                for _, offset, length in spans:
                    f.seek(offset)
                    try:
                        turn = _decoder.decode(f.read(length)).turn
                    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                        skipped(self.path, 0, exc)
                        continue
                    if isinstance(turn, dict):
                        out.append(turn)
        except OSError as exc:
            log.warning("archived turns unreadable", extra={"fields": {"path": str(self.path), "errno": exc.errno}})
        return out


def _marks(record: ArchiveRecord | _RecordHead, dropped: set[str], forgotten: set[str]) -> None:
    """A record's marks, in file order: a later revert may drop again what was restored."""
    if not isinstance(record.dropped, UnsetType):
        dropped.update(record.dropped)
    if not isinstance(record.forgotten, UnsetType):
        forgotten.update(record.forgotten)
    if not isinstance(record.restored, UnsetType):
        dropped.difference_update(record.restored)


def turn_ids(hidden: Sequence[dict[str, Any]]) -> list[Any]:
    """The ids of ``hidden`` (archived turns), without reading them back."""
    return hidden.ids if isinstance(hidden, HiddenTurns) else [t.get("id") for t in hidden]


def archive_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """Beside the session mirrors; the same id rules (no path tricks)."""
    return Path(state_dir) / "turns" / session_path(state_dir, thread_id).name


def archived_turn(turn: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn as ``thread/read`` shows it: ``turn/completed`` carries a
    summary of the items, the ``item/completed`` notifications the full ones."""
    if not items:
        return dict(turn)
    return {**turn, "items": items, "itemsView": "full"}


class TurnArchive:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append_turn(self, turn: dict[str, Any]) -> None:
        self._append(ArchiveRecord(turn=turn))

    def mark_dropped(self, turn_ids: list[str] | None, unread: Any = UNKNOWN, path: str | None = None) -> list[str]:
        """Mark the turns a revert to the framing is about to drop; ``None``:
        every archived turn Codex should still hold (the sidecar restarted
        and lost its list). ``unread`` and ``path``: the client's first
        unread position and its thread's rollout file then, when known.
        Returns the turns marked."""
        if turn_ids is None:
            turns, dropped, forgotten = self._read()
            turn_ids = [tid for tid in turns if tid not in dropped and tid not in forgotten]
        if turn_ids:
            self._append(ArchiveRecord(dropped=list(turn_ids), unread=UNSET if unread is UNKNOWN else unread, path=UNSET if path is None else path))
        return list(turn_ids or [])

    def mark_read(self) -> None:
        """The client marked its thread read: no archived turn is unread."""
        self._append(ArchiveRecord(unread=None))

    def shown(self) -> dict[str, Any]:
        """What the client saw of its thread before the rebuilds: ``unread``,
        the first unread position the last one left behind (None: read, or
        never recorded), and ``path``, the first rollout file recorded (the
        thread's own, before any rebuild moved it; None: never recorded)."""
        records = self._records_with(b'"dropped"')
        out: dict[str, Any] = {"unread": None, "path": None}
        for record in records or ():
            if not isinstance(record.unread, UnsetType):
                out["unread"] = record.unread
            if out["path"] is None and isinstance(record.path, str):
                out["path"] = record.path
        return out

    def mark_restored(self, turn_ids: list[str]) -> None:
        """Turns marked dropped that Codex still holds (a refused revert, or a
        kill between the marks and the revert): they are Codex's to list."""
        if turn_ids:
            self._append(ArchiveRecord(restored=list(turn_ids)))

    def forget_from(self, turn_id: str) -> list[str]:
        """The client reverted its thread before ``turn_id``: that turn and
        the later ones Codex held are gone for the client too. Returns them."""
        turns, dropped, forgotten = self._read()
        order = list(turns)
        if turn_id not in turns:
            return []
        # Dropped turns included: a revert to an archived turn forgets it too.
        gone = [t for t in order[order.index(turn_id) :] if t not in forgotten]
        if gone:
            self._append(ArchiveRecord(forgotten=gone))
        return gone

    def begin_forget(self, turn_id: str, into_archive: bool, in_flight: list[str] | None = None) -> None:
        """Codex reverted the client's thread before ``turn_id``: persist
        that the sidecar must follow it, before waiting to do so.
        ``in_flight``: the thread's turns running or finalising at that
        moment, the only ones that may still be archived after this record."""
        self._append(ArchiveRecord(forgetting=Forgetting(turn_id, into_archive, list(in_flight or []))))

    def begin_revert(self, turn_id: str, in_flight: list[str] | None = None) -> None:
        """The client's revert before ``turn_id`` is about to go to Codex. A
        kill after Codex carried it out but before its answer was read
        leaves this record with no outcome; the next opening asks Codex."""
        self._append(ArchiveRecord(reverting=Reverting(turn_id, list(in_flight or []))))

    def revert_refused(self, turn_id: str) -> None:
        """Codex refused the client's revert (or, after a kill, never did it)."""
        self._append(ArchiveRecord(revertRefused=turn_id))

    def pending_revert(self) -> tuple[str, list[str]] | None:
        """A client revert sent to Codex whose outcome no record tells:
        ``(beforeTurnId, the turns in flight then)``; None when its
        ``forgetting`` or ``revertRefused`` record came, or when a turn other
        than those in flight was archived after it (the thread went on)."""
        records = self._records_with(b'"reverting"')
        if records is None:
            return None
        pending: tuple[str, list[str]] | None = None
        for record in records:
            sent, turn, outcome = record.reverting, record.turn, record.forgetting
            if not isinstance(sent, UnsetType):
                pending = (sent.before_turn_id, list(sent.in_flight_turn_ids))
            elif pending is None:
                continue
            elif record.revertRefused == pending[0] or (not isinstance(outcome, UnsetType) and outcome.before_turn_id == pending[0]):
                pending = None
            elif not isinstance(turn, UnsetType) and turn.get("id") not in pending[1]:
                pending = None
        return pending

    def turn_order(self) -> list[str]:
        """The archived turns' ids, oldest first."""
        return list(self._read()[0])

    def end_forget(self, turn_id: str) -> None:
        """The archive and the mirror follow the client's revert."""
        self._append(ArchiveRecord(forgot=turn_id))

    def pending_forget(self) -> tuple[str, bool] | None:
        """The client revert a kill left unfollowed: ``(beforeTurnId,
        intoArchive)`` of the last ``forgetting`` with no ``forgot`` after it.
        None too when a turn other than those in flight at the revert was
        archived after it: the thread went on (the mirror could not follow at
        the time), and following now would cut the turns Codex ran since."""
        records = self._records_with(b'"forgetting"')
        if records is None:
            return None
        pending: tuple[str, bool] | None = None
        in_flight: list[str] = []
        for record in records:
            intent, turn = record.forgetting, record.turn
            if not isinstance(intent, UnsetType):
                pending = (intent.before_turn_id, intent.into_archive)
                in_flight = intent.in_flight_turn_ids
            elif pending is None:
                continue
            elif record.forgot == pending[0]:
                pending = None
            elif not isinstance(turn, UnsetType) and turn.get("id") not in in_flight:
                pending = None  # the thread went on: too late to follow
        return pending

    def copy_from(self, parent: TurnArchive, *, before: str | None = None, last: str | None = None) -> None:
        """A fork's archive: the parent's, cut like the fork itself (the turns
        before ``before``, or up to and including ``last``)."""
        turns, dropped, forgotten = parent._read()
        kept = list(turns)
        if before in turns:
            kept = kept[: kept.index(before)]
        elif last in turns:
            kept = kept[: kept.index(last) + 1]
        records = [ArchiveRecord(turn=turns[tid]) for tid in kept]
        marked = [tid for tid in kept if tid in dropped]
        if marked:
            records.append(ArchiveRecord(dropped=marked))
        marked = [tid for tid in kept if tid in forgotten]
        if marked:
            records.append(ArchiveRecord(forgotten=marked))
        for record in records:
            self._append(record)

    def hidden(self) -> HiddenTurns:
        """The archived turns marked dropped, oldest first (read back from
        the file when asked for: see :class:`HiddenTurns`)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError:
            return HiddenTurns(self.path)
        if b'"dropped"' not in data:
            return HiddenTurns(self.path)  # no rebuild yet: skip parsing every turn (the caller may be the event loop)
        spans: dict[str, tuple[int, int]] = {}
        dropped: set[str] = set()
        forgotten: set[str] = set()
        offset = 0
        for number, raw in enumerate(data.split(b"\n"), 1):
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            try:
                record = _head_decoder.decode(raw)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                skipped(self.path, number, exc)
                continue
            if not isinstance(record.turn, UnsetType) and isinstance(record.turn.id, str):
                spans.setdefault(record.turn.id, (start, len(raw)))  # a replayed turn keeps its first copy
            _marks(record, dropped, forgotten)
        return HiddenTurns(self.path, [(tid, *span) for tid, span in spans.items() if tid in dropped and tid not in forgotten])

    def _records_with(self, marker: bytes) -> list[ArchiveRecord] | None:
        """The file's records, or None when it is missing or never mentions
        ``marker`` (the common case, not worth decoding every turn for)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        return decode_lines(data, _decoder, self.path) if marker in data else None

    def _append(self, record: ArchiveRecord) -> None:
        append_record(self.path, record)  # best effort, see the module docstring

    def _read(self) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}, set(), set()
        return self._parse(data, self.path)

    @staticmethod
    def _parse(data: bytes, path: Path) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
        turns: dict[str, dict[str, Any]] = {}
        dropped: set[str] = set()
        forgotten: set[str] = set()
        for record in decode_lines(data, _decoder, path):
            turn = record.turn
            if not isinstance(turn, UnsetType) and isinstance(turn.get("id"), str):
                turns.setdefault(turn["id"], turn)  # a replayed turn keeps its first copy
            _marks(record, dropped, forgotten)
        return turns, dropped, forgotten


def cut_for_fork(hidden: Sequence[dict[str, Any]], before: Any, last: Any) -> Sequence[dict[str, Any]]:
    """The hidden turns a fork keeps (``thread/fork`` with ``beforeTurnId``
    or ``lastTurnId``)."""
    ids = turn_ids(hidden)
    if before in ids:
        return hidden[: ids.index(before)]
    if last in ids:
        return hidden[: ids.index(last) + 1]
    return hidden


def splice_turns(hidden: Sequence[dict[str, Any]], turns: list[Any]) -> list[Any] | None:
    """``turns`` (Codex's) with the hidden turns it no longer has in front;
    None when there is nothing to add."""
    present = {t.get("id") for t in turns if isinstance(t, dict)}
    if all(tid in present for tid in turn_ids(hidden)):
        return None
    missing = list(hidden.without(present)) if isinstance(hidden, HiddenTurns) else [t for t in hidden if t.get("id") not in present]
    return [*missing, *turns] if missing else None


# ---------------------------------------------------------------------------
# thread/turns/list: paging through the archived turns
#
# Codex pages a thread's turns with opaque cursors. Its own pages cover only
# the turns it still holds (those since the last rebuild); the archived ones
# are older. Pages of those are the sidecar's to make, with its own cursors:
# a desc listing continues into them once Codex says it has no more, an asc
# listing starts with them and then hands over to Codex from its start.

CURSOR_PREFIX = "codex-sidecar:"
"""Sidecar cursors: ``codex-sidecar:<turns|items>:<asc|desc|codex>:<position>``."""
_ASC, _DESC, _CODEX = "asc", "desc", "codex"
SPACES = ("turns", "items")


def encode_cursor(kind: str, position: int, space: str = "turns") -> str:
    return f"{CURSOR_PREFIX}{space}:{kind}:{position}"


def decode_cursor(cursor: Any, space: str = "turns") -> tuple[str, int] | None:
    """``(kind, position)`` of a sidecar cursor of ``space`` (what is being
    listed: turns or items); None for anything else (Codex's own cursors,
    which pass through)."""
    prefix = f"{CURSOR_PREFIX}{space}:"
    if not isinstance(cursor, str) or not cursor.startswith(prefix):
        return None
    kind, _, position = cursor[len(prefix) :].partition(":")
    if kind not in (_ASC, _DESC, _CODEX) or not position.isdigit():
        return None
    return kind, int(position)


# Codex's own cursors name the Codex thread and a position in its rollout
# (``requestedThreadId``, an ordinal, ``includeAnchor``; no direction: the
# request's ``sortDirection`` decides): a rebuild invalidates them. Codex
# refuses one issued before a switch to a fresh backing thread, and after a
# revert it pages a rollout segment that changed. So, in modes that may
# rebuild, the sidecar hands the client Codex's cursors wrapped with an
# anchor: the unit the page continues from, and whether it is included.
# While the anchor is still Codex's, the wrapped cursor goes back to Codex
# unchanged; once a rebuild archived it, the sidecar pages on from the
# anchor in its archive, in the direction the request asks for.

WRAP = "wrap"


def wrap_cursor(codex_cursor: str, anchor: str, inclusive: bool, space: str = "turns") -> str:
    """A Codex cursor with the unit it continues from, ``anchor``, itself
    included or not."""
    body = json.dumps([codex_cursor, anchor, inclusive], separators=(",", ":"), ensure_ascii=False)
    return f"{CURSOR_PREFIX}{space}:{WRAP}:" + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def unwrap_cursor(cursor: Any, space: str = "turns") -> tuple[str, str, bool] | None:
    """``(codex cursor, anchor, inclusive)`` of a wrapped cursor of
    ``space``; None for anything else (or a damaged one: it goes to Codex as
    it is, which refuses it as it would any cursor it did not issue)."""
    prefix = f"{CURSOR_PREFIX}{space}:{WRAP}:"
    if not isinstance(cursor, str) or not cursor.startswith(prefix):
        return None
    try:
        raw = cursor[len(prefix) :]
        value = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, TypeError):
        return None
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], str) and isinstance(value[1], str) and isinstance(value[2], bool):
        return value[0], value[1], value[2]
    return None


def anchored_position(index: int, direction: str, inclusive: bool) -> int:
    """The :func:`hidden_page` position that pages ``direction`` from the
    unit at ``index`` (an asc page starts at its position, a desc page ends
    just before it)."""
    if direction == _ASC:
        return index if inclusive else index + 1
    return index + 1 if inclusive else index


def summary_items(items: list[Any]) -> list[Any]:
    """What Codex's "summary" items view keeps of a turn: its user messages
    and its last agent message (commands, tool calls, reasoning and
    compaction items are left out), in turn order. Inferred from Codex
    0.169.0's answers; the live test compares it with Codex's own."""
    agents = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get("type") == "agentMessage"]
    last_agent = agents[-1] if agents else None
    return [
        item
        for i, item in enumerate(items)
        if isinstance(item, dict) and (item.get("type") == "userMessage" or i == last_agent)
    ]


def in_view(turn: dict[str, Any], items_view: Any) -> dict[str, Any]:
    """An archived (full) turn as ``thread/turns/list`` shows it in ``items_view``
    (Codex's default: "summary")."""
    if items_view == "full":
        return turn
    if items_view == "notLoaded":
        return {**turn, "items": [], "itemsView": "notLoaded"}
    return {**turn, "items": summary_items(turn.get("items") or []), "itemsView": "summary"}


class TurnsInView(Sequence[dict[str, Any]]):
    """Archived turns as ``thread/turns/list`` shows them in ``items_view``
    (:func:`in_view`), read back and shaped only as far as asked: their
    count and ids cost nothing, a slice is another view, and a page of a
    long archive reads its own turns alone (one open of the file)."""

    def __init__(self, turns: Sequence[dict[str, Any]], items_view: Any) -> None:
        self.turns = turns
        self.items_view = items_view

    @property
    def ids(self) -> list[Any]:
        return turn_ids(self.turns)

    def __len__(self) -> int:
        return len(self.turns)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> TurnsInView: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | TurnsInView:
        if isinstance(index, slice):
            return TurnsInView(self.turns[index], self.items_view)
        return in_view(self.turns[index], self.items_view)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (in_view(turn, self.items_view) for turn in self.turns)

    def without(self, ids: Container[Any]) -> TurnsInView:
        turns = self.turns
        kept = turns.without(ids) if isinstance(turns, HiddenTurns) else [t for t in turns if t.get("id") not in ids]
        return TurnsInView(kept, self.items_view)


def find_turn(hidden: Sequence[dict[str, Any]], turn_id: Any) -> dict[str, Any] | None:
    """The archived turn ``turn_id`` (None: not archived, or it no longer
    reads), reading back that turn alone."""
    ids = turn_ids(hidden)
    if turn_id not in ids:
        return None
    try:
        return hidden[ids.index(turn_id)]
    except IndexError:
        return None


def hidden_page(
    hidden: Sequence[dict[str, Any]], kind: str, position: int, limit: Any, *, space: str = "turns", handover: bool = True
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of archived turns (or items) from a sidecar cursor (``kind``
    asc or desc at ``position``) and the cursor after it. asc ends by handing
    over to Codex's own from their start (unless ``handover`` is false: the
    items of one archived turn); desc ends the listing. Only the page's own
    units are read (``hidden`` may be a :class:`TurnsInView`)."""
    size = limit if isinstance(limit, int) and limit > 0 else len(hidden)
    position = max(0, min(position, len(hidden)))
    if kind == _DESC:
        start = max(0, position - size)
        page = list(hidden[start:position])[::-1]
        return page, encode_cursor(_DESC, start, space) if start > 0 else None
    end = min(len(hidden), position + size)
    page = list(hidden[position:end])
    if end < len(hidden):
        return page, encode_cursor(_ASC, end, space)
    return page, encode_cursor(_CODEX, 0, space) if handover else None


def backwards_cursor(count: int, kind: str, position: int, page: Sequence[Any], space: str = "turns") -> str | None:
    """The ``backwardsCursor`` of a page :func:`hidden_page` made from
    ``count`` units: the other direction, starting with (including) the
    page's first unit, as Codex's own backwards cursors do."""
    if not page:
        return None
    position = max(0, min(position, count))
    if kind == _DESC:
        return encode_cursor(_ASC, position - 1, space)  # the page began with units[position - 1]
    return encode_cursor(_DESC, position + 1, space)  # the page began with units[position]


def codex_cursor_from_start(cursor: Any, space: str = "turns") -> bool:
    """The cursor an asc listing gets after the last archived turn (item)."""
    decoded = decode_cursor(cursor, space)
    return decoded is not None and decoded[0] == _CODEX


ENTRY_TIMES_SINCE = (0, 157, 0)
"""The first codex whose ``thread/items/list`` entries carry ``startedAtMs``
and ``completedAtMs`` (the schemas of 0.151.0 to 0.156.0 have neither)."""


def entry_times(codex_version: str | None) -> bool:
    """Whether this codex's ``thread/items/list`` entries carry their item's
    times (a version not known: they do, as the pinned codex's)."""
    parts = codex_version.split(".")[:3] if codex_version else []
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:2]):
        return True
    patch = "".join(c for c in parts[2] if c.isdigit()) or "0"
    return (int(parts[0]), int(parts[1]), int(patch)) >= ENTRY_TIMES_SINCE


def item_entries(turn: dict[str, Any], times: bool = True) -> list[dict[str, Any]]:
    """An archived turn's items as ``thread/items/list`` entries, with the
    times only where Codex's own entries have them (``times``)."""
    return [
        {"item": item, "turnId": turn.get("id"), "startedAtMs": item.get("startedAtMs"), "completedAtMs": item.get("completedAtMs")}
        if times
        else {"item": item, "turnId": turn.get("id")}
        for item in turn.get("items") or []
        if isinstance(item, dict)
    ]
