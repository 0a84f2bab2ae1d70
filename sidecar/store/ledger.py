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
age. A torn last line (a kill mid-write) is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .inspect import append_record, decode_records
from .mirror import session_path
from .private import private_dir

if TYPE_CHECKING:
    from ..thread.holdings import Holdings

COMPACT_AFTER = 256
"""Journal entries after which the next write rewrites it as one snapshot."""

_encode = msgspec.json.Encoder()


def ledger_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """Beside the session mirrors; the same id rules (no path tricks)."""
    return Path(state_dir) / "ledger" / session_path(state_dir, thread_id).name


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

    def apply(self, entry: dict[str, Any]) -> None:
        if "snapshot" in entry or "reset" in entry:
            body = entry.get("snapshot", entry)
            held = body.get("held" if "snapshot" in entry else "reset")
            self.held = [f for f, _ in held] if isinstance(held, list) else None
            if isinstance(held, list):
                self.sizes = {f: int(n) for f, n in held}
            turns = body.get("turns")
            self.turns_since_rebuild = list(turns) if isinstance(turns, list) else None
        elif "add" in entry:
            pairs = entry["add"]
            if self.held is not None:
                self.held = self.held + [f for f, _ in pairs]
            for f, n in pairs:
                self.sizes.setdefault(f, int(n))
            turn = entry.get("turn")
            if self.turns_since_rebuild is not None and isinstance(turn, str):
                self.turns_since_rebuild = [*self.turns_since_rebuild, turn]
        self.rebuilding = bool(entry.get("rebuilding"))
        if self.rebuilding:
            # A rebuild is moving the thread: it may hold its framing only
            # (the turns it had may or may not be gone), until the turn that
            # carries the projection says more.
            self.held, self.force_rebuild = [], True
        for key, attr in (("rebuilds", "rebuilds"), ("force", "force_rebuild"), ("epoch", "projected_epoch")):
            if key in entry:
                setattr(self, attr, entry[key])
        if "snapshot" in entry:
            body = entry["snapshot"]
            self.rebuilds = int(body.get("rebuilds") or 0)
            self.force_rebuild = bool(body.get("force"))
            self.projected_epoch = body.get("epoch")
            self.rebuilding = bool(body.get("rebuilding"))


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
            if isinstance(entry, dict):
                state.apply(entry)
        return state

    def after_turn(self, turn: str | None) -> LedgerState | None:
        """The ledger as it stood right after ``turn`` was recorded; None
        when the journal no longer reaches back to it."""
        state = LedgerState()
        for entry in self._read():
            if isinstance(entry, dict):
                state.apply(entry)
                if turn is not None and entry.get("turn") == turn:
                    return state
        return None

    # ------------------------------------------------------------ writes

    def turn(self, turn: str, added: Sequence[tuple[str, int]], *, reset: bool, turns: list[str] | None, rebuilds: int, force: bool, epoch: str | None) -> None:
        """A finalised turn: what it added (or, after a rebuild, everything
        the thread now holds) and the counters as they stand."""
        entry: dict[str, Any] = {"turn": turn, "rebuilds": rebuilds, "force": force, "epoch": epoch}
        if reset:
            entry["reset"] = [[f, n] for f, n in added]
            entry["turns"] = turns
        else:
            entry["add"] = [[f, n] for f, n in added]
        self._append(entry)

    def rebuilding(self, rebuilds: int, epoch: str | None) -> None:
        self._append({"rebuilding": True, "rebuilds": rebuilds, "epoch": epoch})

    def reset(self, state: LedgerState | Holdings, **marker: Any) -> None:
        """The whole ledger as it now stands (a client revert followed)."""
        held = None if state.held is None else [[f, state.sizes.get(f, 0)] for f in state.held]
        self._append(
            {"reset": held, "turns": state.turns_since_rebuild, "rebuilds": state.rebuilds, "force": state.force_rebuild, "epoch": state.projected_epoch, **marker}
        )

    def _append(self, entry: dict[str, Any]) -> None:
        if self._entries is None:
            self._entries = len(self._read())
        if self._entries + 1 >= COMPACT_AFTER:
            state = LedgerState()
            for old in [*self._read(), entry]:
                if isinstance(old, dict):
                    state.apply(old)
            if self._snapshot(state):
                return
        append_record(self.path, entry)
        self._entries += 1

    def _snapshot(self, state: LedgerState) -> bool:
        held = None if state.held is None else [[f, state.sizes.get(f, 0)] for f in state.held]
        body = {
            "held": held,
            "turns": state.turns_since_rebuild,
            "rebuilds": state.rebuilds,
            "force": state.force_rebuild,
            "epoch": state.projected_epoch,
            "rebuilding": state.rebuilding,
        }
        tmp = self.path.with_suffix(".tmp")
        try:
            private_dir(self.path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, _encode.encode({"snapshot": body}) + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError:
            return False
        self._entries = 1
        return True

    def _read(self) -> list[Any]:
        try:
            return decode_records(self.path.read_bytes())
        except (FileNotFoundError, ValueError):
            return []
        except OSError:
            return []
