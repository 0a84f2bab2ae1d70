"""Every thread's learned facts in this process, journaled by session.

:class:`LearnedFacts` is the thin shell around the pure machines
(:class:`~sidecar.session.state.LearnedMachine`): it reads a session's
journal (:mod:`sidecar.store.learned`) the first time one of its threads is
used in this process (a few hundred bytes, on the event loop), feeds events
to the thread's machine and writes the entries it returns. The lifecycle
keeps each thread's machine on its session (``ThreadSession.learned``), so a
turn that learns nothing new does not come here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..session.state import Journal, Learned, LearnedEvent, LearnedMachine, Restored, SessionChanged, replay, restore
from ..store.learned import append_entry, learned_path, read_journal

log = logging.getLogger("codex_sidecar.lifecycle")


class LearnedFacts:
    """Every thread's learned facts in this process, journaled by session."""

    def __init__(self, state_dir: str | os.PathLike[str] | None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._machines: dict[str, tuple[LearnedMachine, Path | None]] = {}

    def _entry(self, thread_id: str, session_key: str) -> tuple[LearnedMachine, Path | None]:
        known = self._machines.get(thread_id)
        path = learned_path(self.state_dir, session_key) if self.state_dir is not None else None
        if known is None:
            machine = LearnedMachine(thread_id)
            if path is not None:
                # A fresh thread's first process journals under the thread's
                # own key until OpenClaw's session is known: read that too.
                own = learned_path(self.state_dir, thread_id) if self.state_dir is not None else None
                entries = read_journal(own) if own is not None and own != path else []
                session = read_journal(path)
                machine.handle(Restored(restore(entries, session, thread_id)))
                if entries:
                    self._share_window(machine, path, replay(session, thread_id))
            known = self._machines[thread_id] = (machine, path)
        elif known[1] != path:  # the session got known: its journal from now on, and what it holds
            if path is not None:
                disk = replay(read_journal(path), thread_id)
                known[0].handle(SessionChanged(disk))
                self._share_window(known[0], path, disk)
            known = self._machines[thread_id] = (known[0], path)
        return known

    @staticmethod
    def _share_window(machine: LearnedMachine, path: Path, session: Learned) -> None:
        for action in machine.joined(session):
            if not append_entry(path, action.entry):
                log.warning("learned fact not journaled (kept in memory)", extra={"fields": {"threadId": machine.thread_id}})

    def machine(self, thread_id: str, session_key: str) -> LearnedMachine:
        return self._entry(thread_id, session_key)[0]

    def get(self, thread_id: str, session_key: str) -> Learned:
        return self._entry(thread_id, session_key)[0].state

    def learn(self, thread_id: str, session_key: str, event: LearnedEvent) -> Learned:
        """Feed ``event`` to the thread's machine and journal what it asks
        for (best effort: a failed write is logged, the fact stays known in
        this process)."""
        machine = self._entry(thread_id, session_key)[0]
        self.journal(thread_id, session_key, machine.handle(event))
        return machine.state

    def journal(self, thread_id: str, session_key: str, actions: list[Journal]) -> None:
        """Append the entries the thread's machine asked for to its session's journal."""
        path = self._entry(thread_id, session_key)[1]
        for action in actions:
            if path is not None and not append_entry(path, action.entry):
                log.warning("learned fact not journaled (kept in memory)", extra={"fields": {"threadId": thread_id}})

    def forget(self, thread_id: str) -> None:
        """The thread's session was released: read it from disk when it comes back."""
        self._machines.pop(thread_id, None)
