"""The identities of a session's snapshots, computed once a message.

Every ``assemble`` and ``after_turn`` hands the engine the session's whole
transcript, and a message's identity (:func:`.messages.identities`) depends
on the messages before it (the occurrence count of equal contents). Hashing
the whole snapshot each call made a turn's cost grow with the session's age
(14 ms of a 20 ms turn at 4,000 messages). The next snapshot is almost
always the last one with messages added: when it starts with the very same
message objects (or equal ones, as when the transcript is decoded anew),
their identities and occurrence counts are the last ones, and only the new
messages are hashed. Any other snapshot (edited, shortened) is computed
whole, as before, and becomes the last one.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import overload

from engines.api import AgentMessage

from .messages import content_identity, message_id

__all__ = ["Idents", "SnapshotIdentities", "originals"]

#: Content hashes kept by message object before the cache starts over.
_MAX_CACHED = 200_000


class _Last:
    __slots__ = ("epoch", "idents", "messages", "seen")

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.messages: list[AgentMessage] = []  # held, so their id()s stay unique
        self.idents: list[str] = []
        self.seen: dict[str, int] = {}


def _extends(last: _Last, messages: Sequence[AgentMessage]) -> bool:
    """Whether ``messages`` begins with the messages of ``last`` (the same
    objects, or equal ones: a snapshot decoded anew; equal messages have
    equal identities); if so, ``last.messages`` now holds the new ones too.

    The whole snapshot is compared, as one comparison of two lists of the
    same length in C: the same object is equal without a look inside it,
    so this reads two arrays of pointers (~2 ns a message) and touches no
    message. ``all(map(operator.is_, ...))`` took a reference to every
    message (~40 ns each, 0.25 ms a call at 13,000 messages, three calls a
    turn: most of what a turn's cost grew by with the session), and so
    would slicing the snapshot."""
    n = len(last.messages)
    if n > len(messages):
        return False
    if not isinstance(messages, list):
        messages = list(messages)
    last.messages.extend(messages[n:])
    return last.messages == messages


class Idents(Sequence[str]):
    """The identities of one snapshot, read only: a view of the first ``n``
    of the session's cached list, not a copy. That list only ever grows (a
    snapshot that does not extend the last one gets a list of its own), so
    the view stays what it was when made; a copy took a reference to every
    identity of the session on each call (~0.1 ms at 13,000 messages)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[str], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            return self._items[start:stop] if step == 1 else self._items[: self._n][index]
        if not -self._n <= index < self._n:
            raise IndexError("identity index out of range")
        return self._items[index % self._n]

    def __iter__(self) -> Iterator[str]:
        return itertools.islice(self._items, self._n)

    def __reversed__(self) -> Iterator[str]:
        return itertools.islice(reversed(self._items), len(self._items) - self._n, None)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Idents | list | tuple):
            return len(other) == self._n and all(map(operator.eq, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Idents({list(self)!r})"


class SnapshotIdentities:
    """Identities of snapshots, per session, extended message by message."""

    def __init__(self) -> None:
        self._last: dict[str, _Last] = {}
        self._content: dict[int, tuple[AgentMessage, str]] = {}
        self._epochs = itertools.count(1)

    def _content_id(self, m: AgentMessage) -> str:
        hit = self._content.get(id(m))
        if hit is None or hit[0] is not m:
            if len(self._content) > _MAX_CACHED:
                self._content.clear()
            hit = self._content[id(m)] = (m, content_identity(m))
        return hit[1]

    def of(self, session_id: str, messages: Sequence[AgentMessage]) -> Idents:
        """The identities of ``messages`` (as :func:`.messages.identities`),
        extended from the last snapshot's when ``messages`` extends it."""
        last = self._last.get(session_id)
        if last is None or not _extends(last, messages):
            last = self._last[session_id] = _Last(next(self._epochs))
            last.messages.extend(messages)
        for m in last.messages[len(last.idents) :]:
            base = self._content_id(m)
            k = last.seen.get(base, 0)
            last.seen[base] = k + 1
            last.idents.append(base if k == 0 else hashlib.sha256(f"{base}#{k}".encode()).hexdigest())
        return Idents(last.idents, len(messages))

    def epoch(self, session_id: str) -> int:
        """A number that stays the same while the session's snapshots only
        grow (each one begins with the last one's messages): the
        messages of an earlier snapshot of the same epoch are at the same
        places now. 0 before any snapshot."""
        last = self._last.get(session_id)
        return 0 if last is None else last.epoch

    def forget(self, session_id: str) -> None:
        """Nothing kept of the session: its last snapshot, and the content
        hashes of its messages (held by object, they would keep every
        message of it alive)."""
        last = self._last.pop(session_id, None)
        if last is None:
            return
        for m in last.messages:
            hit = self._content.get(id(m))
            if hit is not None and hit[0] is m:
                del self._content[id(m)]


def originals(session_id: str, snapshot: tuple[Sequence[AgentMessage], Sequence[str]], wanted: set[str]) -> dict[str, AgentMessage]:
    """The client's own copies of the stored messages ``wanted`` (by id),
    newest first, from the snapshot and its identities: the store holds
    them redacted, the client whole."""
    found: dict[str, AgentMessage] = {}
    messages, idents = snapshot
    if not wanted or not messages:
        return found
    for message, ident in zip(reversed(messages), reversed(idents), strict=True):
        mid = message_id(session_id, ident)
        if mid in wanted:
            found[mid] = message
            if len(found) == len(wanted):
                break
    return found
