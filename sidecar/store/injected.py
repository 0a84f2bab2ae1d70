"""What the client put into a thread outside ``turn/start``.

``thread/inject_items`` appends raw model items (OpenClaw sends its
instruction policy this way when it resumes a thread) to the thread's
history. A rebuild takes them out of the Codex thread with everything else,
but they are the client's, not the engine's: this journal keeps them, one
JSONL file a thread (``<state_dir>/injected/<thread id>.jsonl``, 0600), so
the lifecycle can put them back. Each entry notes the client turn they came
after; a client revert that drops that turn drops them too, as Codex does.

Putting them back is not idempotent (``thread/inject_items`` appends), and
Codex cannot be asked what its thread holds before its first turn. So a
replay is journalled before it is sent (``{"replaying": N}``) and settled
after Codex's answer (``{"framing": N}``). A journal whose last replay is
unsettled (a SIGKILL in between) loads as *unsure*: the Codex thread holds
either the old framing or the new one, and only a rebuild onto a thread that
holds none of them (a fresh backing thread) may put them back again.

Each line is an :class:`InjectedEntry`, read by a typed decoder
(``sidecar.store.records``): one that does not decode (a torn last line, a
foreign one) is reported by file and line and skipped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ..thread.files import Injection
from .inspect import append_record
from .mirror import session_path
from .records import decode_lines


def injected_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    return Path(state_dir) / "injected" / session_path(state_dir, thread_id).name


class InjectedEntry(msgspec.Struct, frozen=True):
    """One line of the journal; which members it has says what it is (the
    others are :data:`msgspec.UNSET`, and not written): ``after`` and
    ``items`` (an injection, after that client turn; null: before any),
    ``replaying`` (a replay about to go), ``framing`` (a replay settled) or
    ``dropAfter`` (turns a client revert took). Members this version does
    not know are ignored."""

    after: str | None | UnsetType = UNSET
    items: list[Any] | UnsetType = UNSET
    replaying: int | UnsetType = UNSET
    framing: int | UnsetType = UNSET
    dropAfter: list[str] | UnsetType = UNSET  # noqa: N815 (the member's name on disk)


_decoder = msgspec.json.Decoder(InjectedEntry)


class InjectedItems:
    """A thread's journal of injected items. Blocking (a worker thread's
    job) and best effort, like the inspection log."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[list[Injection], int, bool]:
        """The injections in order, how many of the first sit before the
        Codex thread's first turn (put back by a rebuild), and whether a
        replay was left unsettled (that count is then not known)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return [], 0, False
        out: list[Injection] = []
        framing = 0
        replaying: int | None = None
        for entry in decode_lines(data, _decoder, self.path):
            if not isinstance(entry.items, UnsetType):
                out.append(Injection(entry.after if isinstance(entry.after, str) else None, entry.items))
            elif not isinstance(entry.dropAfter, UnsetType):
                gone = set(entry.dropAfter)
                out = [i for i in out if i.after_turn not in gone]
            elif not isinstance(entry.framing, UnsetType):
                framing = entry.framing
                replaying = None
            elif not isinstance(entry.replaying, UnsetType):
                replaying = entry.replaying
        unsure = replaying is not None and replaying != framing
        return out, min(framing, len(out)), unsure

    def append(self, injection: Injection) -> None:
        append_record(self.path, InjectedEntry(after=injection.after_turn, items=injection.items))

    def replaying(self, count: int) -> None:
        """About to put injections back so that the first ``count`` sit
        before the thread's first turn: settled by :meth:`framing`."""
        append_record(self.path, InjectedEntry(replaying=count))

    def framing(self, count: int) -> None:
        """The first ``count`` injections now sit before the thread's first turn."""
        append_record(self.path, InjectedEntry(framing=count))

    def drop_after(self, turns: list[str]) -> None:
        """A client revert took these turns: what came after them goes too."""
        append_record(self.path, InjectedEntry(dropAfter=turns))
