"""The parts that take turns out of the Codex thread, handed over as one value.

A thread's turns leave the Codex thread in three ways while staying the
client's: a rebuild in place (``InPlace``: a revert), a rebuild onto a spare
thread (``Spares``: a switch), both driven by the ``Rebuilder``, and Codex's
own compaction (``Compaction``); the turns rebuilds took are kept in the
archive and read back from it (``ArchivedTurns``). The jobs that open a
thread, start a turn or follow a client's revert must know about all of them
(is a rebuild revert or a native compaction under way, which spare backs the
thread, which turns are archived), so they travel together.

The other half of what the jobs share, the relay, the thread table, the
settings and the state dir, is
:class:`sidecar.session.context.LifecycleContext`.
"""

from __future__ import annotations

import msgspec

from ..history.reads import ArchivedTurns
from ..rebuild import InPlace, Rebuilder
from ..rebuild.fresh import Spares
from .compaction import Compaction


class HistoryMoves(msgspec.Struct, frozen=True):
    archived: ArchivedTurns
    """The turns rebuilds took out of Codex, spliced back into the client's reads."""
    rebuilder: Rebuilder
    """Runs a rebuild with the strategies below."""
    spares: Spares
    """Spare threads a fresh rebuild switches onto, and the switches made."""
    inplace: InPlace
    """Rebuilds by reverting the Codex thread (and the revert notifications kept from the client)."""
    compaction: Compaction
    """Codex's native compaction of a thread (the ones under way)."""
