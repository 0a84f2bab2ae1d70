"""The plan for one turn: what to project so the model sees the assembly.

Pure: one function of the ledger (what the Codex thread holds), the engine's
assembly, the projection mode and the settings. No I/O, no clock; the
lifecycle carries the plan out (:mod:`sidecar.lifecycle.turns`) and a
rebuild strategy (:mod:`sidecar.rebuild`) moves the thread when it says so.

delta: when the assembly extends what the thread holds, project only the new
tail; when it drops or replaces held content beyond the stale slack, rebuild
(the thread back to its framing, the whole assembly projected). epoch:
rebuild when the engine's epoch changes, project nothing within one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..projection import CHARS_PER_TOKEN


@dataclass(frozen=True)
class Ledger:
    """What the Codex thread holds, as the sidecar knows it."""

    held: Sequence[str]
    """Fingerprints of the messages the thread holds, in order."""
    sizes: Mapping[str, int]
    """Characters of each known fingerprint."""
    force_rebuild: bool = False
    projected_epoch: str | None = None
    has_turns: bool = True
    """The ledger knows of turns the Codex thread holds since its last rebuild."""


@dataclass(frozen=True)
class Slack:
    stale_slack: float = 0.10
    stale_floor_chars: int = 4000
    token_budget: int | None = None


@dataclass(frozen=True)
class Plan:
    action: Literal["tail", "rebuild", "nothing"]
    """tail: project ``assembly[tail_from:]`` (maybe nothing) on top of what
    the thread holds; rebuild: move the thread back to its framing and
    project the whole assembly; nothing: the thread and the assembly are both
    empty, project nothing."""
    held_after: tuple[str, ...]
    """The ledger once this turn's projection is in."""
    tail_from: int = 0
    stale: int = 0
    """Held messages the assembly no longer has that stay in the thread."""
    drops_content: bool = False
    """The engine dropped held content (kept within the slack): it rebuilds."""
    epoch_pending: str | None = None


def plan_turn(
    ledger: Ledger,
    assembly: Sequence[str],
    *,
    mode: Literal["delta", "epoch"],
    epoch: str | None,
    estimated_tokens: int | None,
    history_empty: bool,
    slack: Slack,
) -> Plan:
    """The plan for a turn whose assembly has fingerprints ``assembly``."""
    held = list(ledger.held)
    if mode == "epoch":
        if not (ledger.force_rebuild or epoch != ledger.projected_epoch):
            return Plan("tail", tuple(held), tail_from=len(assembly))
    else:
        wanted = set(assembly)
        kept = [f for f in held if f in wanted]
        stale = [f for f in held if f not in wanted]
        rebuild = (
            ledger.force_rebuild
            or list(assembly[: len(kept)]) != kept
            or not within_slack(ledger.sizes, stale, held, assembly, estimated_tokens, slack)
        )
        if not rebuild:
            # The thread holds the assembly's head (plus a little the engine
            # dropped): send only the tail it lacks.
            return Plan(
                "tail",
                tuple(held + list(assembly[len(kept) :])),
                tail_from=len(kept),
                stale=len(stale),
                drops_content=bool(stale),
            )
    if history_empty and not ledger.has_turns and not assembly:
        # The assembly is empty and so is the thread: it holds this epoch
        # already (else the next turn would revert for nothing).
        return Plan("nothing", (), epoch_pending=epoch if mode == "epoch" else None)
    return Plan("rebuild", tuple(assembly), epoch_pending=epoch if mode == "epoch" else None)


def assembled_tokens(sizes: Mapping[str, int], assembly: Sequence[str], estimated_tokens: int | None) -> int:
    """The assembly's size in tokens: the engine's own estimate, or its
    characters over :data:`CHARS_PER_TOKEN` when the estimate is no use."""
    if isinstance(estimated_tokens, int) and not isinstance(estimated_tokens, bool) and estimated_tokens > 0:
        return estimated_tokens
    return -(-sum(sizes.get(f, 0) for f in assembly) // CHARS_PER_TOKEN)


def within_slack(
    sizes: Mapping[str, int],
    stale: Sequence[str],
    held: Sequence[str],
    assembly: Sequence[str],
    estimated_tokens: int | None,
    slack: Slack,
) -> bool:
    """Whether content the engine dropped (``stale``) may stay in the thread
    instead of a rebuild: it is a small share of what the thread holds (or
    under the floor), and the assembly plus it still fits the token budget
    the engine assembled for (the slack never makes the model see more than
    the engine was allowed)."""
    if not stale:
        return True
    if slack.stale_slack == 0:
        return False  # exact: rebuild on any drop (the floor does not apply)
    if any(f not in sizes for f in stale):
        return False  # sizes unknown (e.g. after a restart): rebuild to be exact
    stale_chars = sum(sizes[f] for f in stale)
    budget = slack.token_budget
    if budget is not None and budget > 0 and assembled_tokens(sizes, assembly, estimated_tokens) + -(-stale_chars // CHARS_PER_TOKEN) > budget:
        return False
    held_chars = sum(sizes.get(f, 0) for f in held)
    return stale_chars <= max(slack.stale_slack * held_chars, slack.stale_floor_chars)
