"""The thread's open files as the thread sees them, and the one record it
keeps of one of them.

The lifecycle opens a thread's files (its mirror, its ledger's journal, its
inspection log: ``sidecar.store``) and gives them to the thread's records
(:mod:`.state`) to carry. The thread names them by what its owners ask of
them, as Protocols: the store's classes satisfy them structurally, so the
thread imports nothing of ``sidecar.store`` (the store imports the thread's
records it writes: :class:`Injection`, the ledger's
:class:`sidecar.thread.holdings.Holdings`, the journal's ``LearnedEntry``).
mypy checks every call the jobs make on a thread's files against these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from engines import AgentMessage

if TYPE_CHECKING:
    from ..translate import Translated
    from .holdings import Holdings


class Injection(msgspec.Struct, frozen=True):
    """Items the client injected into the thread outside ``turn/start``
    (``sidecar.store.injected`` journals them)."""

    after_turn: str | None
    """The client turn these came after (None: before any turn)."""
    items: list[Any]


class Mirror(Protocol):
    """The session's mirror (``sidecar.store.mirror.TranscriptMirror``):
    blocking file I/O, called through a worker thread."""

    def messages(self) -> list[AgentMessage]: ...

    def cached_messages(self) -> list[AgentMessage] | None: ...

    @property
    def path(self) -> Path: ...

    def entries(self) -> list[dict[str, Any]]: ...

    def has_key(self, key: str) -> bool: ...

    @property
    def entry_count(self) -> int: ...

    def refresh(self) -> None: ...

    def append_records(self, records: Iterable[Translated]) -> int: ...

    def append_custom(self, custom_type: str, data: Any, key: str, *, timestamp: int | None = None) -> bool: ...

    def append_compaction(
        self,
        *,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        key: str,
        tokens_after: int | None = None,
        details: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> bool: ...

    def rewind(
        self, turn_prefix: str, key: str, custom_type: str, data: Any, *, timestamp: int | None = None, turn_id: str | None = None
    ) -> bool: ...

    def close(self) -> None: ...


class Recorded(Protocol):
    """What the ledger's journal says the Codex thread holds
    (``sidecar.store.ledger.LedgerState``), as read at an opening or after
    a turn."""

    @property
    def held(self) -> list[str] | None: ...

    @property
    def sizes(self) -> dict[str, int]: ...

    @property
    def turns_since_rebuild(self) -> list[str] | None: ...

    @property
    def rebuilds(self) -> int: ...

    @property
    def force_rebuild(self) -> bool: ...

    @property
    def projected_epoch(self) -> str | None: ...

    @property
    def rebuilding(self) -> bool: ...


class LedgerFile(Protocol):
    """The thread's ledger journal (``sidecar.store.ledger.Ledger``):
    blocking, best effort."""

    def load(self) -> Recorded: ...

    def after_turn(self, turn: str | None) -> Recorded | None: ...

    def turn(
        self, turn: str, added: Sequence[tuple[str, int]], *, reset: bool, turns: list[str] | None, rebuilds: int, force: bool, epoch: str | None
    ) -> None: ...

    def rebuilding(self, rebuilds: int, epoch: str | None) -> None: ...

    def reset(self, state: Holdings, **marker: Any) -> None: ...


class InspectFile(Protocol):
    """The thread's inspection log (``sidecar.store.inspect.InspectLog``):
    blocking, best effort."""

    def append(self, record: dict[str, Any]) -> None: ...

    def append_text(self, record: dict[str, Any]) -> None: ...

    def last(self) -> dict[str, Any] | None: ...

    def records(self) -> list[dict[str, Any]]: ...
