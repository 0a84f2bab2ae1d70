"""What the Codex thread holds (the ledger's view of it) and how each event
changes it: the only writers of ``held``, ``sizes``, ``turns_since_rebuild``,
``rebuilds``, ``force_rebuild``, ``projected_epoch`` and ``live_turns``.
Pure: the callers write the ledger's journal (:func:`holdings` gives them
the record to write)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .planner import fingerprint

if TYPE_CHECKING:
    from .files import Recorded
    from .state import ThreadSession, TurnState


class Holdings(msgspec.Struct, frozen=True):
    """What the Codex thread holds, as the ledger's journal records it."""

    held: list[str] | None
    sizes: dict[str, int]
    turns_since_rebuild: list[str] | None
    rebuilds: int
    force_rebuild: bool
    projected_epoch: str | None


def holdings(session: ThreadSession) -> Holdings:
    """The thread's holdings as one record (what a ledger reset writes)."""
    return Holdings(
        held=session.held,
        sizes=session.sizes,
        turns_since_rebuild=session.turns_since_rebuild,
        rebuilds=session.rebuilds,
        force_rebuild=session.force_rebuild,
        projected_epoch=session.projected_epoch,
    )


def restored(session: ThreadSession, state: Recorded, last_inspect: dict[str, Any] | None) -> None:
    """The session opened: what the ledger's journal last recorded. No
    journal (a thread of an older state dir) keeps its ledger in the
    inspection log (``last_inspect``), with another fingerprint; a thread it
    says was ever rebuilt is rebuilt once more to be exact."""
    rebuilds, force = state.rebuilds, state.force_rebuild
    if _empty(state) and last_inspect:
        rebuilds = int(last_inspect.get("rebuilds") or 0)
        force = bool(rebuilds or last_inspect.get("forceRebuild") or last_inspect.get("rebuilding"))
    session.held, session.sizes = state.held, dict(state.sizes)
    session.turns_since_rebuild = state.turns_since_rebuild
    session.rebuilds, session.force_rebuild, session.projected_epoch = rebuilds, force, state.projected_epoch
    if state.rebuilding:
        # Killed between a rebuild and the turn that carried the projection:
        # the thread may hold only its framing.
        session.held, session.force_rebuild = [], True


def _empty(state: Recorded) -> bool:
    return (
        state.held is None
        and not state.sizes
        and state.turns_since_rebuild is None
        and not state.rebuilds
        and not state.force_rebuild
        and state.projected_epoch is None
        and not state.rebuilding
    )


def unknown(session: ThreadSession) -> None:
    """What the thread holds is not known (back from a switch Codex never
    accepted): the next turn rebuilds."""
    session.held, session.force_rebuild, session.turns_since_rebuild = None, True, None


def framing_only(session: ThreadSession) -> None:
    """The thread holds its framing only (a fork of Codex's framing)."""
    session.held, session.turns_since_rebuild, session.live_turns = [], [], []


def holds_nothing(session: ThreadSession) -> bool:
    """A new Codex thread of a session with history holds none of it.
    False: nothing changed (what it holds is known already)."""
    if session.held is not None:
        return False
    session.held, session.turns_since_rebuild = [], []
    return True


def caught_up(session: ThreadSession, added: Sequence[str], per_turn: Sequence[list[str]]) -> None:
    """Turns Codex holds natively that the mirror lacked (``per_turn``: the
    fingerprints of each), as finalisation would have recorded them."""
    if session.held is not None:
        for fps in per_turn:
            if fps and session.held[-len(fps) :] != fps:  # not recorded already (a write that failed)
                session.held = session.held + fps
    if session.turns_since_rebuild is not None:
        session.turns_since_rebuild = [*session.turns_since_rebuild, *added]
    if session.live_turns is not None:
        session.live_turns.extend(added)


def codex_compacted(session: ThreadSession) -> None:
    """Codex rewrote its history (native compaction): the ledger no longer holds."""
    session.force_rebuild = True


def untracked_projection(session: ThreadSession) -> None:
    """A per-turn projection sits in the history untracked."""
    session.force_rebuild = True


def turn_finalised(session: ThreadSession, state: TurnState, turn_id: str, added: list[str]) -> None:
    """A client turn was mirrored: the thread holds what the turn's
    projection put in (``held_plan``) and the turn's own messages (``added``)."""
    base = state.held_plan
    if base is None:
        base = session.held if session.held is not None else [fingerprint(m) for m in state.history]
    session.held = base + added
    if state.rebuilt:
        session.turns_since_rebuild = [turn_id]
    elif session.turns_since_rebuild is not None:
        session.turns_since_rebuild = [*session.turns_since_rebuild, turn_id]
    # else: unknown (a fork, a thread from before this state dir) stays
    # unknown: a rebuild asks Codex for the thread's first turn.


def epoch_accepted(session: ThreadSession, epoch: str) -> None:
    session.projected_epoch = epoch


def rebuilt(session: ThreadSession) -> None:
    """The turn's rebuild went through (the planner's ``rebuild``)."""
    session.rebuilds += 1
    session.force_rebuild = False


def projection_lost(session: ThreadSession) -> None:
    """A rebuild went through but the projection did not land (Codex
    refused the turn, or its retry was abandoned): the thread holds nothing."""
    session.held, session.turns_since_rebuild = [], []
    session.projected_epoch = None


def at_framing(session: ThreadSession) -> None:
    """The rebuild found nothing but framing, or moved the thread (revert,
    switch): no turn since."""
    session.turns_since_rebuild = []


def moved(session: ThreadSession, revert_ms: float, *, switched: bool) -> None:
    """A rebuild moved the thread (reverted it, or ``switched`` it onto a
    fresh backing thread): Codex holds none of the archived turns."""
    session.live_turns = []
    session.turns_since_rebuild = []
    if session.current is not None:
        if switched:
            session.current.switched = True
        session.current.revert_ms = revert_ms


def first_turn_unknown(session: ThreadSession) -> None:
    """The ledger's first turn is not Codex's any more: ask Codex."""
    session.turns_since_rebuild = None


def revert_unsupported(session: ThreadSession) -> None:
    session.revert_unsupported = True


def retry_started(session: ThreadSession, first: TurnState, retry: TurnState) -> None:
    """A turn overflowed and is retried: the failed attempt is a turn the
    Codex thread holds (the rebuild takes it out too)."""
    if session.turns_since_rebuild is not None and first.turn_id is not None:
        session.turns_since_rebuild = [*session.turns_since_rebuild, first.turn_id]
    session.force_rebuild = True
    session.current = retry


def retry_abandoned(session: ThreadSession, first: TurnState, retry: TurnState | None) -> None:
    """The retry of an overflowed turn was given up: the first attempt ends
    as Codex ended it."""
    if retry is not None:
        if retry.rebuilt:  # the thread was rebuilt; nothing was projected into it
            projection_lost(session)
            first.held_plan = None
        elif session.turns_since_rebuild and session.turns_since_rebuild[-1] == first.turn_id:
            session.turns_since_rebuild = session.turns_since_rebuild[:-1]  # the finalizer notes it
    session.current = first


# --------------------------------------------------- a client's own revert


def turns_gone(session: ThreadSession, gone: Sequence[str]) -> None:
    """The client reverted these turns: Codex no longer holds them."""
    if session.live_turns is not None:
        session.live_turns = [t for t in session.live_turns if t not in gone]


def revert_followed(session: ThreadSession, before: str, *, into_archive: bool) -> bool:
    """The client reverted the thread before ``before`` (its turns from it
    on are gone: :func:`turns_gone`). Returns whether what Codex holds must
    be read from the ledger's journal as it stood after the last turn kept
    (:func:`ledger_found`)."""
    if not into_archive:
        since = session.turns_since_rebuild
        session.turns_since_rebuild = since[: since.index(before)] if since is not None and before in since else None
    if into_archive or session.turns_since_rebuild == []:
        # Codex is back at its framing (the rebuild's own turn was reverted,
        # or the revert went before Codex's first turn): it holds nothing,
        # no epoch either, and the next turn projects the whole assembly.
        session.held, session.turns_since_rebuild, session.projected_epoch = [], [], None
        if into_archive:
            session.live_turns = []
        return False
    if session.rebuilds or session.force_rebuild or session.projected_epoch is not None:
        # Codex holds a projection plus turns since, so the mirror's history
        # is not what it holds: the ledger after the last turn kept says.
        return True
    # Never rebuilt: Codex holds the mirror's turns, worked out afresh from
    # it (a later mismatch with the assembly rebuilds).
    session.held = None
    return False


def last_kept(session: ThreadSession) -> str | None:
    return session.turns_since_rebuild[-1] if session.turns_since_rebuild else None


def ledger_found(session: ThreadSession, found: tuple[list[str], Any, bool] | None) -> None:
    """What the ledger recorded after the last turn kept: (held,
    projectedEpoch, forceRebuild); None: not known, so the assembly is
    projected afresh (exact, at a revert's cost)."""
    if found is not None:
        session.held, session.projected_epoch, session.force_rebuild = found
    else:
        session.held, session.force_rebuild = None, True
