"""``transcript-budget``: the built-in small real engine.

It keeps no store of its own: the sidecar's transcript mirror is the history,
and ``assemble`` receives it as ``params.messages``.  ``assemble`` returns the
newest messages that fit a token budget, counted with :mod:`engines.tokens`
(the real o200k tokenizer when ``bpe-openai`` is installed):

* the budget is ``params.token_budget`` and/or the configured
  ``token_budget``; when both are set the smaller one applies (a configured
  budget is an operator's ceiling, the per-call one the model's room); when
  neither is set every message is returned;
* the tokens of the ``system_prompt_addition`` (if configured) are charged
  against the same budget, because the model sees them too;
* the oldest messages are dropped first, so the result is always a suffix of
  the input, in order, with the same message objects;
* an assistant message that makes a tool call and the ``toolResult`` messages
  answering it are kept or dropped together (a cut never falls between
  them), because a model shown a result without its call, or a call without
  its result, is confused and some providers reject it;
* the newest message (with any tool call it answers) is always kept, even
  when it alone exceeds the budget: an empty context would lose the thread;
  ``estimated_tokens`` then honestly reports more than the budget.

``estimated_tokens`` is the sum of :func:`engines.tokens.estimate_message_tokens`
over the kept messages plus the addition's tokens.

Each session's message estimates are remembered from its last ``assemble``
by message object (:class:`_Estimates`): the sidecar hands every turn the same
message objects its mirror decoded once plus the turn's new ones, so a turn
counts only the new messages, not a transcript that grows every turn (which
had made a 600-turn thread's ``assemble`` ~10x slower late than early).

Config (``[engines.transcript-budget]`` in the sidecar config):

``token_budget``
    positive int, optional.
``system_prompt_addition``
    str, optional; blank means none.

Unknown keys are refused, so a misspelt key fails at load instead of being
silently ignored.

``ingest``, ``ingest_batch`` and ``after_turn`` store nothing (``after_turn``
is implemented, as a no-op, so the sidecar does not fall back to per-message
ingestion); ``compact`` declines (``ok=True, compacted=False``) since the
engine does not own compaction; ``bootstrap``, ``maintain`` and ``dispose``
are the base class's "not implemented" stand-ins.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .api import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    AssistantMessage,
    CompactParams,
    CompactResult,
    EngineInfo,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    ToolCallBlock,
    ToolResultMessage,
)
from .engine import BaseContextEngine
from .legacy import _builtin_version
from .tokens import count_tokens, estimate_message_tokens, preload

__all__ = ["TRANSCRIPT_BUDGET_ENGINE_ID", "TranscriptBudgetEngine", "select_within_budget"]

TRANSCRIPT_BUDGET_ENGINE_ID = "transcript-budget"

_CONFIG_KEYS = frozenset({"token_budget", "system_prompt_addition"})


def _valid_cuts(messages: Sequence[Any]) -> list[bool]:
    """``cuts[c]`` is True when keeping ``messages[c:]`` splits no tool pair.

    A pair is an assistant message at ``i`` with a tool call and a later
    ``toolResult`` at ``j`` answering it (matched to the most recent earlier
    call with that id); every cut in ``i+1 .. j`` would separate them.
    Results whose call is not in the list constrain nothing.
    """
    n = len(messages)
    cuts = [True] * (n + 1)
    last_call_at: dict[str, int] = {}
    # blocked[c] counts pairs straddling c; use a difference array.
    diff = [0] * (n + 2)
    for j, message in enumerate(messages):
        if isinstance(message, ToolResultMessage):
            i = last_call_at.get(message.tool_call_id)
            if i is not None and i < j:
                diff[i + 1] += 1
                diff[j + 1] -= 1
        elif isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCallBlock):
                    last_call_at[block.id] = j
    running = 0
    for c in range(n + 1):
        running += diff[c]
        cuts[c] = running == 0
    return cuts


class _Estimates:
    """:func:`estimate_message_tokens` of messages seen in a session's last
    ``assemble``, by object (the object is held, so its id is not reused);
    what a call did not see is dropped at its end. The messages are the
    mirror's, never modified: the mirror itself hands out the same objects
    turn after turn on that understanding."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[Any, int]] = {}
        self._now: dict[int, tuple[Any, int]] = {}

    def __call__(self, message: Any) -> int:
        key = id(message)
        seen = self._now.get(key) or self._last.get(key)
        if seen is None or seen[0] is not message:
            seen = (message, estimate_message_tokens(message))
        self._now[key] = seen
        return seen[1]

    def settle(self) -> None:
        """The end of a call: keep what it saw, for the next."""
        self._last, self._now = self._now, {}


_SESSIONS_REMEMBERED = 16
"""Sessions whose estimates an engine keeps (the most recently assembled)."""


def select_within_budget(
    messages: Sequence[Any], budget: int | None, *, reserved_tokens: int = 0, estimate: Callable[[Any], int] = estimate_message_tokens
) -> tuple[list[Any], int]:
    """The newest suffix of ``messages`` within ``budget`` and its token estimate.

    Follows the rules in the module documentation; ``reserved_tokens`` are
    charged against the budget first (and not included in the returned
    estimate).  Only the messages that are kept, plus the one that did not
    fit, are tokenized; ``estimate`` counts one message.
    """
    n = len(messages)
    if n == 0:
        return [], 0
    if budget is None:
        return list(messages), sum(estimate(m) for m in messages)
    cuts = _valid_cuts(messages)
    available = budget - reserved_tokens
    # The cut that keeps only the newest message and what it answers.
    floor = max(c for c in range(n) if cuts[c])
    best = floor
    total = 0
    best_total: int | None = None
    for c in range(n - 1, -1, -1):  # add messages newest to oldest
        total += estimate(messages[c])
        if c <= floor and cuts[c]:
            if c == floor or total <= available:
                best, best_total = c, total
            if total > available:
                break
        elif c < floor and total > available:
            break  # every older cut holds at least these tokens
    if best_total is None:  # pragma: no cover - the loop always reaches floor
        best_total = sum(estimate(m) for m in messages[best:])
    return list(messages[best:]), best_total


class TranscriptBudgetEngine(BaseContextEngine):
    """Newest-first transcript under a token budget; see the module documentation."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        unknown = sorted(set(self.config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"unknown {TRANSCRIPT_BUDGET_ENGINE_ID} config key(s) {', '.join(map(repr, unknown))}; "
                f"expected {', '.join(sorted(_CONFIG_KEYS))}"
            )
        budget = self.config.get("token_budget")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"token_budget must be a positive integer, got {budget!r}")
        addition = self.config.get("system_prompt_addition")
        if addition is not None and not isinstance(addition, str):
            raise ValueError(f"system_prompt_addition must be a string, got {type(addition).__name__}")
        preload()  # the tokenizer, ready before the first assemble (which would hold the first turn for it)
        self.token_budget: int | None = budget
        self._estimates: OrderedDict[str, _Estimates] = OrderedDict()
        self.system_prompt_addition: str | None = addition if addition and addition.strip() else None
        self.info = EngineInfo(
            id=TRANSCRIPT_BUDGET_ENGINE_ID,
            name="Transcript budget",
            version=_builtin_version(),
            owns_compaction=False,
        )

    def effective_budget(self, params_budget: int | None) -> int | None:
        """The budget ``assemble`` applies: the smaller of those that are set."""
        budgets = [b for b in (params_budget, self.token_budget) if b is not None]
        return min(budgets) if budgets else None

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        addition = self.system_prompt_addition
        addition_tokens = count_tokens(addition) if addition else 0
        estimates = self._estimates.pop(params.session_id, None) or _Estimates()
        self._estimates[params.session_id] = estimates  # the newest last
        while len(self._estimates) > _SESSIONS_REMEMBERED:
            self._estimates.popitem(last=False)
        try:
            kept, tokens = select_within_budget(
                params.messages, self.effective_budget(params.token_budget), reserved_tokens=addition_tokens, estimate=estimates
            )
        finally:
            estimates.settle()
        return AssembleResult(
            messages=kept,
            estimated_tokens=tokens + addition_tokens,
            system_prompt_addition=addition,
        )

    async def ingest(self, params: IngestParams) -> IngestResult:
        """Nothing is stored: the transcript mirror is the history."""
        return IngestResult(ingested=False)

    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        """Nothing is stored: the transcript mirror is the history."""
        return IngestBatchResult(ingested_count=0)

    async def after_turn(self, params: AfterTurnParams) -> None:
        """Nothing to do: the next ``assemble`` reads the mirrored transcript."""
        return None

    async def compact(self, params: CompactParams) -> CompactResult:
        """Decline: this engine does not own compaction (Codex's native one applies)."""
        return CompactResult(
            ok=True,
            compacted=False,
            reason=f"{TRANSCRIPT_BUDGET_ENGINE_ID} does not own compaction; it trims to the token budget on every assemble",
        )
