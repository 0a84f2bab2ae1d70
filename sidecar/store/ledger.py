"""The ledger's own durable record: what each Codex thread holds.

One JSONL journal a thread, ``<state_dir>/ledger/<thread id>.jsonl`` (0600,
folder 0700). Every change is one small append, never the whole ledger: a
turn adds the fingerprints (and sizes) of what it put into the thread; a
rebuild resets it to the projected assembly (bounded by the engine's
budget); a client revert resets it to what the kept turns left. Before a
rebuild moves the thread a ``rebuilding`` marker goes first, so a kill
between the move and the turn that carries the projection is seen at the
next opening. Once the journal holds :data:`COMPACT_AFTER` entries it is
rewritten as one snapshot (write, fsync, rename), so reading it at opening
and its size on disk stay bounded by the ledger itself, not by the thread's
age. Its entries are :class:`LedgerEntry` records, decoded by a typed
decoder (``sidecar.store.records``): a line that does not decode (a torn
last line, a kill mid-write; a foreign one) is reported by file and line
and skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from .inspect import append_record
from .mirror import session_path
from .private import private_dir
from .records import decode_lines

if TYPE_CHECKING:
    from ..thread.holdings import Holdings

COMPACT_AFTER = 256
"""Journal entries after which the next write rewrites it as one snapshot."""

_encode = msgspec.json.Encoder()


def ledger_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """Beside the session mirrors; the same id rules (no path tricks)."""
    return Path(state_dir) / "ledger" / session_path(state_dir, thread_id).name


class LedgerSnapshot(msgspec.Struct, frozen=True):
    """The whole ledger, written when the journal is compacted."""

    held: list[tuple[str, int]] | None
    turns: list[str] | None = None
    rebuilds: int = 0
    force: bool = False
    epoch: str | None = None
    rebuilding: bool = False


class LedgerEntry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of the journal. Which members it has says what it is (the
    members a kind leaves out are :data:`msgspec.UNSET`, and not written):

    - a finalised turn: ``turn``, ``rebuilds``, ``force``, ``epoch``, then
      ``add`` (what it added) or ``reset`` and ``turns`` (after a rebuild:
      everything the thread holds);
    - a reset (a client revert followed): ``reset``, ``turns``, ``rebuilds``,
      ``force``, ``epoch`` and a marker (``clientRevert``): :class:`LedgerReset`;
    - a rebuild's marker: ``rebuilding``, ``rebuilds``, ``epoch``;
    - a snapshot: ``snapshot``.

    Fields are in the order a turn's entry is written, so the file is what it
    was when these were dicts. Members this version does not know are ignored."""

    turn: str | UnsetType = UNSET
    rebuilding: bool | UnsetType = UNSET
    rebuilds: int | UnsetType = UNSET
    force: bool | UnsetType = UNSET
    epoch: str | None | UnsetType = UNSET
    reset: list[tuple[str, int]] | None | UnsetType = UNSET
    turns: list[str] | None | UnsetType = UNSET
    add: list[tuple[str, int]] | UnsetType = UNSET
    snapshot: LedgerSnapshot | UnsetType = UNSET
    clientRevert: str | UnsetType = UNSET  # noqa: N815 (the member's name on disk)


class LedgerReset(msgspec.Struct, frozen=True, omit_defaults=True):
    """A reset as written: the whole ledger first, then its marker."""

    reset: list[tuple[str, int]] | None
    turns: list[str] | None
    rebuilds: int
    force: bool
    epoch: str | None
    clientRevert: str | UnsetType = UNSET  # noqa: N815


_decoder = msgspec.json.Decoder(LedgerEntry)


def read_entries(path: Path) -> list[LedgerEntry]:
    """The journal's entries, in order (none without the file); a line
    that does not decode is reported and skipped."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return decode_lines(data, _decoder, path)


class LedgerState(msgspec.Struct):
    held: list[str] | None = None
    """Fingerprints of what the Codex thread holds, in order; None: not known."""
    sizes: dict[str, int] = msgspec.field(default_factory=dict)
    turns_since_rebuild: list[str] | None = None
    rebuilds: int = 0
    force_rebuild: bool = False
    projected_epoch: str | None = None
    rebuilding: bool = False
    """The last entry is a rebuild's marker: the thread may hold only its framing."""

    def apply(self, entry: LedgerEntry) -> None:
        snapshot = entry.snapshot
        if not isinstance(snapshot, UnsetType) or not isinstance(entry.reset, UnsetType):
            held = snapshot.held if not isinstance(snapshot, UnsetType) else entry.reset
            turns = snapshot.turns if not isinstance(snapshot, UnsetType) else entry.turns
            self.held = [f for f, _ in held] if isinstance(held, list) else None
            if isinstance(held, list):
                self.sizes = {f: n for f, n in held}
            self.turns_since_rebuild = list(turns) if isinstance(turns, list) else None
        elif not isinstance(entry.add, UnsetType):
            pairs = entry.add
            if self.held is not None:
                self.held = self.held + [f for f, _ in pairs]
            for f, n in pairs:
                self.sizes.setdefault(f, n)
            if self.turns_since_rebuild is not None and isinstance(entry.turn, str):
                self.turns_since_rebuild = [*self.turns_since_rebuild, entry.turn]
        self.rebuilding = entry.rebuilding is True
        if self.rebuilding:
            # A rebuild is moving the thread: it may hold its framing only
            # (the turns it had may or may not be gone), until the turn that
            # carries the projection says more.
            self.held, self.force_rebuild = [], True
        if not isinstance(entry.rebuilds, UnsetType):
            self.rebuilds = entry.rebuilds
        if not isinstance(entry.force, UnsetType):
            self.force_rebuild = entry.force
        if not isinstance(entry.epoch, UnsetType):
            self.projected_epoch = entry.epoch
        if not isinstance(snapshot, UnsetType):
            self.rebuilds = snapshot.rebuilds
            self.force_rebuild = snapshot.force
            self.projected_epoch = snapshot.epoch
            self.rebuilding = snapshot.rebuilding


class Ledger:
    """A thread's ledger journal. Writes are blocking (call them from a
    worker thread) and best effort: an error is swallowed and the next
    opening rebuilds to be exact."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: int | None = None

    def load(self) -> LedgerState:
        state = LedgerState()
        entries = self._read()
        self._entries = len(entries)
        for entry in entries:
            state.apply(entry)
        return state

    def after_turn(self, turn: str | None) -> LedgerState | None:
        """The ledger as it stood right after ``turn`` was recorded; None
        when the journal no longer reaches back to it."""
        state = LedgerState()
        for entry in self._read():
            state.apply(entry)
            if turn is not None and entry.turn == turn:
                return state
        return None

    # ------------------------------------------------------------ writes

    def turn(self, turn: str, added: Sequence[tuple[str, int]], *, reset: bool, turns: list[str] | None, rebuilds: int, force: bool, epoch: str | None) -> None:
        """A finalised turn: what it added (or, after a rebuild, everything
        the thread now holds) and the counters as they stand."""
        pairs = [(f, n) for f, n in added]
        if reset:
            entry = LedgerEntry(turn=turn, rebuilds=rebuilds, force=force, epoch=epoch, reset=pairs, turns=turns)
        else:
            entry = LedgerEntry(turn=turn, rebuilds=rebuilds, force=force, epoch=epoch, add=pairs)
        self._append(entry)

    def rebuilding(self, rebuilds: int, epoch: str | None) -> None:
        self._append(LedgerEntry(rebuilding=True, rebuilds=rebuilds, epoch=epoch))

    def reset(self, state: LedgerState | Holdings, **marker: Any) -> None:
        """The whole ledger as it now stands; ``marker``: ``clientRevert``, the
        turn a client revert followed went before (the only marker)."""
        unknown = set(marker) - {"clientRevert"}
        if unknown:
            raise TypeError(f"unknown ledger reset marker: {sorted(unknown)}")
        clientRevert = marker.get("clientRevert", UNSET)  # noqa: N806
        held = None if state.held is None else [(f, state.sizes.get(f, 0)) for f in state.held]
        turns = state.turns_since_rebuild
        written = LedgerReset(held, turns, state.rebuilds, state.force_rebuild, state.projected_epoch, clientRevert)
        entry = LedgerEntry(reset=held, turns=turns, rebuilds=state.rebuilds, force=state.force_rebuild, epoch=state.projected_epoch, clientRevert=clientRevert)
        self._append(entry, written)

    def _append(self, entry: LedgerEntry, written: msgspec.Struct | None = None) -> None:
        """``entry`` applied and appended (as ``written`` when its members go in another order)."""
        if self._entries is None:
            self._entries = len(self._read())
        if self._entries + 1 >= COMPACT_AFTER:
            state = LedgerState()
            for old in [*self._read(), entry]:
                state.apply(old)
            if self._snapshot(state):
                return
        append_record(self.path, written if written is not None else entry)
        self._entries += 1

    def _snapshot(self, state: LedgerState) -> bool:
        held = None if state.held is None else [(f, state.sizes.get(f, 0)) for f in state.held]
        body = LedgerSnapshot(held, state.turns_since_rebuild, state.rebuilds, state.force_rebuild, state.projected_epoch, state.rebuilding)
        tmp = self.path.with_suffix(".tmp")
        try:
            private_dir(self.path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, _encode.encode(LedgerEntry(snapshot=body)) + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            return False
        self._entries = 1
        return True

    def _read(self) -> list[LedgerEntry]:
        return read_entries(self.path)
