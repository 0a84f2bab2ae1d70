"""The sidecar's own thread starts in flight, and the client's list answers
that wait for them, sans I/O.

The sidecar starts threads of its own on the client's Codex (a spare for
``rebuild = "fresh"``, a completion thread for ``host.complete``), and
:class:`~sidecar.history.backing.BackingThreads` hides one from the moment
the sidecar reads Codex's answer to its ``thread/start``. Codex knows the
thread a little earlier: a ``thread/loaded/list`` (or ``thread/list``) it
answers in between names a thread the sidecar does not know yet is its own.
So a client's answer to one of :data:`LIST_METHODS` read while any of the
sidecar's own :data:`OPENING_METHODS` is unanswered waits for those starts
(those unanswered when the answer is read, a start sent before the list
request included; never one sent after the answer: Codex wrote it first),
and goes on once they are answered, filtered with what they made known.

Nothing is hidden because it is unknown: a client's own ``thread/start`` in
flight names a thread the client will be told of, and it stays in the list.

A start not answered within the wait (seconds, the engine deadline in
``serve``) is given up: the answers waiting for it go on as they are
(logged), and later answers no longer wait for it. :attr:`OwnStarts.held`
and :attr:`OwnStarts.overdue_count` count the answers held and those that
went on so (``sidecar/status``: ``backingThreads``).

The relay holds the answers (:class:`sidecar.relay.Edge`): this module only
decides which wait and when each goes, and never looks into one.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

log = logging.getLogger("codex_sidecar.backing")

LIST_METHODS = ("thread/list", "thread/loaded/list")
"""Answers that list threads: the edge leaves hidden ones out of them."""
OPENING_METHODS = frozenset({"thread/start", "thread/fork", "thread/resume"})
"""The sidecar's own requests that give Codex a loaded thread the client must not see."""

A = TypeVar("A")


class Waiting(Generic[A]):
    """One held answer and the sidecar's starts it still waits for."""

    __slots__ = ("answer", "method", "starts")

    def __init__(self, answer: A, method: str, starts: set[str]) -> None:
        self.answer = answer
        self.method = method
        self.starts = starts


class OwnStarts(Generic[A]):
    """The sidecar's opening requests unanswered, by call id, and the
    client's list answers held for them, oldest first."""

    __slots__ = ("wait", "starts", "waiting", "held", "overdue_count")

    def __init__(self, wait: float) -> None:
        self.wait = wait
        """Seconds an answer waits at most."""
        self.starts: set[str] = set()
        self.waiting: list[Waiting[A]] = []
        self.held = 0
        """Answers held so far."""
        self.overdue_count = 0
        """Answers that went on before the starts they waited for were answered."""

    def requested(self, call_id: str, method: str) -> None:
        """The sidecar sent a request of its own."""
        if method in OPENING_METHODS:
            self.starts.add(call_id)

    def hold(self, method: str, answer: A) -> float | None:
        """Codex answered a client's request of ``method``: the seconds it
        waits at most, or None when it goes on at once."""
        if not self.starts or method not in LIST_METHODS:
            return None
        self.waiting.append(Waiting(answer, method, set(self.starts)))
        self.held += 1
        return self.wait

    def answered(self, call_id: str) -> list[A]:
        """Codex answered the sidecar's request ``call_id`` (a result or an
        error, its result read): the answers that wait for nothing more, in
        the order they came."""
        if call_id not in self.starts:
            return []
        self.starts.discard(call_id)
        return self._settle({call_id})

    def overdue(self, answer: A) -> list[A]:
        """``answer``'s wait is over: it goes on as it is, with every answer
        that waited only for the starts it waited for (given up on)."""
        for one in self.waiting:
            if one.answer is answer:
                lost = set(one.starts)
                self.starts -= lost
                out = self._settle(lost)
                self.overdue_count += len(out)
                log.warning(
                    "a thread list answered before the sidecar's own thread start; forwarded as it is",
                    extra={"fields": {"method": one.method, "unanswered": len(lost), "answers": len(out), "waitSeconds": self.wait}},
                )
                return out
        return []

    def release_all(self) -> list[A]:
        """Every start is over (Codex exited): every held answer, in order."""
        out = [one.answer for one in self.waiting]
        self.starts.clear()
        self.waiting.clear()
        return out

    def _settle(self, done: set[str]) -> list[A]:
        out: list[A] = []
        kept: list[Waiting[A]] = []
        for one in self.waiting:
            one.starts -= done
            if one.starts:
                kept.append(one)
            else:
                out.append(one.answer)
        self.waiting = kept
        return out
