"""The parts that take turns out of the Codex thread, handed over as one value.

A thread's turns leave the Codex thread while staying the client's: by a
rebuild in place (``InPlace``: a revert) or onto a spare thread (``Spares``:
a switch), both driven by the ``Rebuilder``; the turns rebuilds took are
kept in the archive and read back from it (``ArchivedTurns``). The jobs that
open, start a turn on, follow a client's revert of or release a thread must
know about them (is a rebuild revert under way, which spare backs the
thread, which turns are archived), so they travel together. (Codex's own
compaction under way is a count on the thread's state,
``ThreadSession.native_compactions``.)

The other half of what the jobs share, the relay, the thread table, the
settings and the state dir, is
:class:`sidecar.session.context.LifecycleContext`.
"""

from __future__ import annotations

import msgspec

from ..history.reads import ArchivedTurns
from ..rebuild import InPlace, Rebuilder
from ..rebuild.fresh import Spares


class HistoryMoves(msgspec.Struct, frozen=True):
    archived: ArchivedTurns
    """The turns rebuilds took out of Codex, spliced back into the client's reads."""
    rebuilder: Rebuilder
    """Runs a rebuild with the strategies below."""
    spares: Spares
    """Spare threads a fresh rebuild switches onto, and the switches made."""
    inplace: InPlace
    """Rebuilds by reverting the Codex thread (and the revert notifications kept from the client)."""
