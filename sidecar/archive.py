"""Codex turns that the sidecar's rebuilds took out of a thread.

A rebuild reverts the Codex thread to its framing, so Codex forgets the
turns before it; the client did not ask for that, and ``thread/read`` and
``thread/resume`` must keep answering with every turn of its thread. Each
finalised turn is archived as Codex itself shows it in ``thread/read`` (the
``turn/completed`` turn with the items of its ``item/completed``
notifications, ``itemsView`` "full"), and before each revert the turns it
drops are marked. The lifecycle splices the marked turns back in front of
Codex's own when it answers for the thread.

One JSONL file a thread, ``<state_dir>/turns/<thread id>.jsonl`` (0600):
``{"turn": {...}}``, ``{"dropped": [turn ids]}`` and, when the client
reverts turns itself, ``{"forgotten": [turn ids]}`` records. Appends are
single writes on an ``O_APPEND`` file, so a kill leaves at most a torn last
line, which reading skips. Archiving is best effort: a failed write costs
the client those turns in later reads, never the turn itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .inspect import append_record, decode_records
from .mirror import session_path


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
        self._append({"turn": turn})

    def mark_dropped(self, turn_ids: list[str] | None) -> None:
        """Mark the turns a revert to the framing is about to drop; ``None``:
        every archived turn Codex should still hold (the sidecar restarted
        and lost its list)."""
        if turn_ids is None:
            turns, dropped, forgotten = self._read()
            turn_ids = [tid for tid in turns if tid not in dropped and tid not in forgotten]
        if turn_ids:
            self._append({"dropped": list(turn_ids)})

    def forget_from(self, turn_id: str) -> list[str]:
        """The client reverted its thread before ``turn_id``: that turn and
        the later ones Codex held are gone for the client too. Returns them."""
        turns, dropped, forgotten = self._read()
        order = list(turns)
        if turn_id not in turns:
            return []
        gone = [t for t in order[order.index(turn_id) :] if t not in dropped and t not in forgotten]
        if gone:
            self._append({"forgotten": gone})
        return gone

    def hidden(self) -> list[dict[str, Any]]:
        """The archived turns marked dropped, oldest first."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError:
            return []
        if b'"dropped"' not in data:
            return []  # no rebuild yet: skip parsing every turn (the caller may be the event loop)
        turns, dropped, forgotten = self._parse(data)
        return [turn for tid, turn in turns.items() if tid in dropped and tid not in forgotten]

    def _append(self, record: dict[str, Any]) -> None:
        append_record(self.path, record)  # best effort, see the module docstring

    def _read(self) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
        try:
            data = self.path.read_bytes()
        except OSError:
            return {}, set(), set()
        return self._parse(data)

    @staticmethod
    def _parse(data: bytes) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
        turns: dict[str, dict[str, Any]] = {}
        dropped: set[str] = set()
        forgotten: set[str] = set()
        for record in decode_records(data):
            if not isinstance(record, dict):
                continue
            turn = record.get("turn")
            if isinstance(turn, dict) and isinstance(turn.get("id"), str):
                turns.setdefault(turn["id"], turn)  # a replayed turn keeps its first copy
            for key, into in (("dropped", dropped), ("forgotten", forgotten)):
                ids = record.get(key)
                if isinstance(ids, list):
                    into.update(i for i in ids if isinstance(i, str))
        return turns, dropped, forgotten


def splice_turns(hidden: list[dict[str, Any]], turns: list[Any]) -> list[Any] | None:
    """``turns`` (Codex's) with the hidden turns it no longer has in front;
    None when there is nothing to add."""
    present = {t.get("id") for t in turns if isinstance(t, dict)}
    missing = [t for t in hidden if t.get("id") not in present]
    return [*missing, *turns] if missing else None
