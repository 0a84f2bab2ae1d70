"""What of a session's snapshot the lossless engine stores, and what it
remembers between turns so that a turn costs the same at 5,000 turns as at
100: the identities the store holds for each session (read once per
session and process, then kept up to date by this process), how much of the
snapshot is settled, whether the session holds messages, and the budget
last noted.

A steady turn is one store transaction (:meth:`.MessageRows.ingest`: on
PostgreSQL two round trips), whatever the session's age."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engines.api import AgentMessage
from engines.tokens import estimate_message_tokens

from . import skipping
from .config import LosslessConfig
from .store import Store


class Intake:
    """Per-process memory of the sessions the engine stores (see the module documentation)."""

    def __init__(self, cfg: LosslessConfig) -> None:
        self.cfg = cfg
        self._known: dict[str, set[str]] = {}
        #: Sessions this process knows to hold stored messages (read or written here).
        self._has_rows: set[str] = set()
        #: Per session: the budget this process noted last (not written again unchanged).
        self._noted_budget: dict[str, int] = {}
        #: Per session: (snapshot epoch, the ``_known`` set then, how many leading messages are settled).
        self._settled: dict[str, tuple[int, set[str], int]] = {}

    def forget(self, session_id: str) -> None:
        """Nothing remembered of the session: it was dropped from the store
        (retention), or it is not among the sessions the engine keeps in
        memory (the next snapshot reads the store again)."""
        self._known.pop(session_id, None)
        self._has_rows.discard(session_id)
        self._settled.pop(session_id, None)
        self._noted_budget.pop(session_id, None)

    def take(
        self,
        store: Store,
        session_id: str,
        session_key: str | None,
        messages: Sequence[AgentMessage],
        idents: Sequence[str],
        keep: tuple[int, str] | None = None,
        epoch: int = 0,
        budget: int | None = None,
    ) -> int:
        """Store the messages not stored yet; those from ``keep`` on (a
        heartbeat turn's) and every message of an ignored session are noted
        as skipped instead (:mod:`.skipping`). The messages an earlier
        snapshot of the same ``epoch`` (:meth:`.SnapshotIdentities.epoch`)
        already settled are not looked at again: a turn's cost does not grow
        with the session. ``budget``: noted with the messages (or alone when
        it changed and there are none). Returns how many were stored."""
        known = self._known.get(session_id)
        if known is None:
            known = self._load_known(store, session_id)
        settled = self._settled.get(session_id)
        start = settled[2] if settled is not None and epoch and settled[0] == epoch and settled[1] is known else 0
        start = min(start, len(messages))
        if skipping.ignored_session(self.cfg, session_key):
            keep_n, reason = 0, skipping.PATTERN
        else:
            keep_n, reason = (len(messages), skipping.HEARTBEAT) if keep is None else keep
        skipped = [i for i in idents[max(keep_n, start) :] if i not in known]
        if skipped:
            skipping.mark_skipped(store, session_id, skipped, reason)
            known.update(skipped)
        todo = [(m, i) for m, i in zip(messages[start:keep_n], idents[start:keep_n], strict=True) if i not in known]
        stored: list[str] | None = []
        if todo:
            stored = self._store(store, session_id, session_key, todo, budget, expect_stored=session_id in self._has_rows)
            if stored is None:
                # Pruned as expired meanwhile (engines lossless prune): stored anew from the whole snapshot.
                known = self._load_known(store, session_id)
                todo = [(m, i) for m, i in zip(messages[:keep_n], idents[:keep_n], strict=True) if i not in known]
                stored = self._store(store, session_id, session_key, todo, budget) if todo else []
            known.update(i for _, i in todo)  # stored now, by this call or an earlier writer
        elif budget is not None and budget != self._noted_budget.get(session_id):
            store.note(session_id, budget=budget)
        if budget is not None:
            self._noted_budget[session_id] = budget
        self._settled[session_id] = (epoch, known, len(messages))
        return len(stored or ())

    def _load_known(self, store: Store, session_id: str) -> set[str]:
        """The identities the store holds for the session, stored or skipped."""
        stored = store.known_idents(session_id)
        if stored:
            self._has_rows.add(session_id)
        else:
            self._has_rows.discard(session_id)
        known = self._known[session_id] = stored | skipping.skipped_idents(store, session_id)
        return known

    def _store(
        self,
        store: Store,
        session_id: str,
        session_key: str | None,
        todo: Sequence[tuple[AgentMessage, str]],
        budget: int | None,
        *,
        expect_stored: bool = False,
    ) -> list[str] | None:
        """One :meth:`.MessageRows.ingest` of ``todo`` (redacted first when
        ``redact_secrets``); None when ``expect_stored`` and the session
        holds no message any more."""
        batch: list[AgentMessage] = [m for m, _ in todo]
        count: Callable[[AgentMessage], int] = estimate_message_tokens
        if self.cfg.redact_secrets:
            from .redact import redact_batch  # the scanner loads on first use (~0.15 s)

            batch, count = redact_batch(batch, estimate_message_tokens)
        stored = store.ingest(session_id, session_key, batch, [i for _, i in todo], count, budget=budget, expect_stored=expect_stored)
        if stored:
            self._has_rows.add(session_id)
        return stored
