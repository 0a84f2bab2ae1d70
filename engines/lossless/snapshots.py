"""The identities of a session's snapshots, computed once a message.

Every ``assemble`` and ``after_turn`` hands the engine the session's whole
transcript, and a message's identity (:func:`.messages.identities`) depends
on the messages before it (the occurrence count of equal contents). Hashing
the whole snapshot each call made a turn's cost grow with the session's age
(14 ms of a 20 ms turn at 4,000 messages). The next snapshot is almost
always the last one with messages added: when it starts with the very same
message objects, their identities and occurrence counts are the last ones,
and only the new messages are hashed. Any other snapshot (edited, shortened,
decoded anew) is computed whole, as before, and becomes the last one.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Sequence

from engines.api import AgentMessage

from .messages import content_identity, message_id

__all__ = ["SnapshotIdentities", "originals"]

#: Content hashes kept by message object before the cache starts over.
_MAX_CACHED = 200_000


class _Last:
    __slots__ = ("epoch", "idents", "messages", "seen")

    def __init__(self, epoch: int = 0) -> None:
        self.epoch = epoch
        self.messages: list[AgentMessage] = []  # held, so their id()s stay unique
        self.idents: list[str] = []
        self.seen: dict[str, int] = {}


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

    def of(self, session_id: str, messages: Sequence[AgentMessage]) -> list[str]:
        """The identities of ``messages`` (as :func:`.messages.identities`)."""
        last = self._last.get(session_id)
        n = 0 if last is None else len(last.messages)
        if last is None or n > len(messages) or not all(map(operator.is_, last.messages, messages)):
            last = self._last[session_id] = _Last(next(self._epochs))
            n = 0
        for m in messages[n:]:
            base = self._content_id(m)
            k = last.seen.get(base, 0)
            last.seen[base] = k + 1
            last.messages.append(m)
            last.idents.append(base if k == 0 else hashlib.sha256(f"{base}#{k}".encode()).hexdigest())
        return last.idents[: len(messages)] if len(messages) < len(last.idents) else list(last.idents)

    def epoch(self, session_id: str) -> int:
        """A number that stays the same while the session's snapshots only
        grow (each one begins with the last one's message objects): the
        messages of an earlier snapshot of the same epoch are at the same
        places now. 0 before any snapshot."""
        last = self._last.get(session_id)
        return 0 if last is None else last.epoch

    def forget(self, session_id: str) -> None:
        self._last.pop(session_id, None)


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
