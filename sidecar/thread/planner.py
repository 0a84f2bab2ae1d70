"""The plan for one turn, and the message identity it is made of.

Pure: no I/O, no clock. The lifecycle carries the plan out
(:mod:`sidecar.lifecycle.turns`) and a rebuild strategy
(:mod:`sidecar.rebuild`) moves the thread when it says so.

**Identity** is what the model sees of a message, nothing else: its role; its
text; its images (type and data); a tool call's id, name and arguments; a
tool result's call id, tool name, content and error flag; a summary's text.
Never timestamps, usage, model or provider metadata, signatures, thinking
(the projection never renders it) or object identity: an engine that keeps
the conversation in its own store and builds new message objects with the
same content (its own timestamps, no usage) holds the same ledger, so the
sidecar projects only what is new instead of rebuilding. A message's size
feeds the stale slack.

**The plan** is one function of the ledger (what the Codex thread holds, as
fingerprints), the engine's assembly, the projection mode and the settings.
delta: when the assembly extends what the thread holds, project only the new
tail; when it drops (or moves later) held content beyond the stale slack, or
puts new content before content the thread ends with, rebuild (the thread
back to its framing, the whole assembly projected); see :func:`match_held`. epoch:
rebuild when the engine's epoch changes, project nothing within one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from engines import AgentMessage, AssistantMessage, CompactionSummaryMessage, ImageBlock, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage

from ..projection import CHARS_PER_TOKEN

# -- identity -------------------------------------------------------------------
_encode = msgspec.json.Encoder(order="sorted").encode


def fingerprint(message: AgentMessage) -> str:
    """A message's identity for the ledger: a hash of its model-visible content."""
    return hashlib.sha256(_encode(visible_content(message))).hexdigest()[:16]


def visible_content(message: AgentMessage) -> list[Any]:
    """The parts of a message the model sees, as plain data in a fixed shape."""
    if isinstance(message, UserMessage):
        content = message.content
        return ["user", content if isinstance(content, str) else [_block(b) for b in content]]
    if isinstance(message, AssistantMessage):
        return ["assistant", [_block(b) for b in message.content if not _invisible(b)]]
    if isinstance(message, ToolResultMessage):
        return ["toolResult", message.tool_call_id, message.tool_name, [_block(b) for b in message.content], bool(message.is_error)]
    if isinstance(message, CompactionSummaryMessage):
        return ["compactionSummary", message.summary]
    raise TypeError(f"not an AgentMessage: {type(message).__name__}")


def _invisible(block: Any) -> bool:
    return not isinstance(block, (TextBlock, ImageBlock, ToolCallBlock))


def _block(block: Any) -> list[Any]:
    if isinstance(block, TextBlock):
        return ["text", block.text]
    if isinstance(block, ImageBlock):
        return ["image", block.mime_type, block.data]
    if isinstance(block, ToolCallBlock):
        return ["toolCall", block.id, block.name, block.arguments]
    return [type(block).__name__]


def message_chars(message: AgentMessage) -> int:
    """Size of a message's text, for inspection (never the text itself)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            for attr in ("text", "thinking"):
                value = getattr(block, attr, None)
                if isinstance(value, str):
                    total += len(value)
        return total
    summary = getattr(message, "summary", None)
    return len(summary) if isinstance(summary, str) else 0


def fingerprints(sizes: dict[str, int], messages: list[AgentMessage], cache: FingerprintCache | None = None) -> list[str]:
    """The messages' fingerprints, noting each one's size in ``sizes``."""
    out = []
    if cache is not None:
        cache.expect(len(messages))
    for m in messages:
        f = cache.get(m) if cache is not None else fingerprint(m)
        if f not in sizes:
            sizes[f] = message_chars(m)
        out.append(f)
    return out


class FingerprintCache:
    """Fingerprints of message objects seen before, so a turn hashes only
    the messages it has not met: the mirror hands the same objects every
    turn, and an engine that assembles from them hands them back. Keyed by
    object but holding the object, so a key is never reused; an entry no
    call has asked for in a while is let go (the cache stays about the size
    of what one turn assembles). The fingerprint itself is still the
    content's."""

    def __init__(self) -> None:
        self._by_object: dict[int, tuple[AgentMessage, str]] = {}
        self._previous: dict[int, tuple[AgentMessage, str]] = {}
        self._limit = 1024

    def get(self, message: AgentMessage) -> str:
        key = id(message)
        hit = self._by_object.get(key) or self._previous.get(key)
        if hit is not None and hit[0] is message:
            self._by_object[key] = hit
            return hit[1]
        f = fingerprint(message)
        self._by_object[key] = (message, f)
        if len(self._by_object) > self._limit:
            # Two generations: what was used since the last swap survives it.
            self._previous, self._by_object = self._by_object, {}
        return f

    def expect(self, count: int) -> None:
        """A call is about to ask for ``count`` messages: room for twice that."""
        self._limit = max(1024, 2 * count)


# -- the plan -------------------------------------------------------------------


class ThreadHoldings(msgspec.Struct, frozen=True):
    """What the Codex thread holds, as the sidecar knows it (the plan's view
    of the thread's ledger, ``store/ledger.py``)."""

    held: Sequence[str]
    """Fingerprints of the messages the thread holds, in order."""
    sizes: Mapping[str, int]
    """Characters of each known fingerprint."""
    force_rebuild: bool = False
    projected_epoch: str | None = None
    has_turns: bool = True
    """The ledger knows of turns the Codex thread holds since its last rebuild."""


class Slack(msgspec.Struct, frozen=True):
    stale_slack: float = 0.10
    stale_floor_chars: int = 4000
    token_budget: int | None = None


class Plan(msgspec.Struct, frozen=True):
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
    holdings: ThreadHoldings,
    assembly: Sequence[str],
    *,
    mode: Literal["delta", "epoch"],
    epoch: str | None,
    estimated_tokens: int | None,
    history_empty: bool,
    slack: Slack,
) -> Plan:
    """The plan for a turn whose assembly has fingerprints ``assembly``."""
    held = list(holdings.held)
    if mode == "epoch":
        if not (holdings.force_rebuild or epoch != holdings.projected_epoch):
            return Plan("tail", tuple(held), tail_from=len(assembly))
    else:
        match = match_held(held, assembly)
        rebuild = (
            holdings.force_rebuild
            or match.replaced
            or not within_slack(holdings.sizes, match.stale, held, assembly, estimated_tokens, slack)
        )
        if not rebuild:
            # The thread holds the assembly's head (plus a little the engine
            # dropped or moved): send only the tail it lacks.
            return Plan(
                "tail",
                tuple(held + list(assembly[match.kept :])),
                tail_from=match.kept,
                stale=len(match.stale),
                drops_content=bool(match.stale),
            )
    if history_empty and not holdings.has_turns and not assembly:
        # The assembly is empty and so is the thread: it holds this epoch
        # already (else the next turn would revert for nothing).
        return Plan("nothing", (), epoch_pending=epoch if mode == "epoch" else None)
    return Plan("rebuild", tuple(assembly), epoch_pending=epoch if mode == "epoch" else None)


class HeldMatch(msgspec.Struct, frozen=True):
    """How the assembly lines up with what the thread holds."""

    kept: int
    """The assembly's head the thread holds in place: ``assembly[:kept]``."""
    stale: list[str]
    """Held messages not kept in place (they stay in the thread as slack)."""
    replaced: bool
    """The assembly put something before content the thread ends with."""


def match_held(held: Sequence[str], assembly: Sequence[str]) -> HeldMatch:
    """Match the held messages, in order, against the assembly's head.

    The held messages the assembly's head takes up, in order, are kept in
    place (greedy, in one pass: the longest head there is, so the fewest
    stale); every other held message is stale. A stale message the
    assembly has again *after content the thread holds after it* has moved
    later (a retrieval engine handing back last turn's snippet at the end
    again): the thread cannot move it, so its held copy stays as slack and
    the assembly's copy goes in the tail, exactly as a different message
    would. But the held messages after the last one kept in place are the
    thread's end; if the assembly has one of them again, it put something
    before it that the thread does not hold there (a summary in front of
    the messages it keeps raw, an insertion): that replaces held content,
    and the turn rebuilds whatever the slack (a tail would hold those
    messages twice, the second time after what replaced them)."""
    kept = 0
    last_kept = -1
    stale = []
    for i, f in enumerate(held):
        if kept < len(assembly) and assembly[kept] == f:
            kept += 1
            last_kept = i
        else:
            stale.append(f)
    end = set(held[last_kept + 1 :])
    replaced = any(f in end for f in assembly[kept:])
    return HeldMatch(kept, stale, replaced)


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
