"""A turn that overflowed Codex's context window: the rules, as data.

Codex 0.169.0 reports a model request whose input exceeds the context
window (the Responses API's ``context_length_exceeded``, as an HTTP 400 or a
``response.failed`` event) the same way: ``thread/status/changed``
``systemError``, then an ``error`` notification ``{error: {message,
codexErrorInfo: "contextWindowExceeded"}, willRetry: false, threadId,
turnId}``, then ``turn/completed`` with ``status: "failed"`` and the same
``error``. Codex retries nothing itself; it compacts natively on the
thread's next turn.

With an engine that owns compaction the sidecar retries such a turn once,
after the engine made room (:mod:`sidecar.lifecycle.overflow` carries it
out). Every decision is here, pure: whether to retry (:func:`verdict`,
then :func:`after_compaction`), and what the client sees of the retry
(:func:`client_sees`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

OVERFLOW_ERRORS = frozenset({"contextWindowExceeded"})
"""``codexErrorInfo`` values that say the turn's input did not fit the window."""

SILENT_ITEMS = frozenset({"userMessage"})
"""Item types a failed attempt may hold and still be retried: the client's
own input, which the retry sends again. Any other item (a tool call, a
command, a message) is output a retry would repeat."""

TURN_NOTIFICATIONS: tuple[str, ...] = (
    "error",
    "thread/goal/updated",
    "thread/prediction/updated",
    "thread/tokenUsage/updated",
    "turn/started",
    "hook/started",
    "turn/completed",
    "hook/completed",
    "turn/diff/updated",
    "turn/plan/updated",
    "item/started",
    "item/autoApprovalReview/started",
    "item/autoApprovalReview/completed",
    "autoApprovalReview/strictReviewRequired",
    "item/completed",
    "item/agentMessage/delta",
    "item/plan/delta",
    "item/commandExecution/outputDelta",
    "item/commandExecution/terminalInteraction",
    "item/fileChange/outputDelta",
    "item/fileChange/patchUpdated",
    "item/mcpToolCall/progress",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "thread/compacted",
    "model/rerouted",
    "model/verification",
    "modelProvider/authRecoveryStarted",
    "modelProvider/authRecoveryCompleted",
    "turn/moderationMetadata",
    "model/safetyBuffering/updated",
)
"""Codex's notifications that name a turn (a ``turnId``, ``sourceTurnId`` or
``turn`` member; codex 0.169.0's schema, checked by a test against the
installed codex): a retry's are shown to the client under the first
attempt's turn id."""

TURN_SERVER_REQUESTS: tuple[str, ...] = (
    "item/commandExecution/requestApproval",
    "item/fileChange/requestApproval",
    "item/tool/requestUserInput",
    "mcpServer/elicitation/request",
    "item/permissions/requestApproval",
    "item/tool/call",
)
"""Codex's requests to the client that name a turn (``turnId``)."""

TURN_CLIENT_REQUESTS: dict[str, str] = {"turn/interrupt": "turnId", "turn/steer": "expectedTurnId"}
"""The client's requests that name a running turn, and the member: while a
retry runs, the first attempt's id there means the retry."""


def overflowed(error: Any) -> bool:
    """Whether a ``TurnError`` (``error`` of an ``error`` notification or a
    failed turn) says the input exceeded the context window."""
    if not isinstance(error, dict):
        return False
    info = error.get("codexErrorInfo")
    return isinstance(info, str) and info in OVERFLOW_ERRORS


Reason = Literal[
    "retry",
    "engine-does-not-own-compaction",
    "not-a-held-turn",
    "already-retried",
    "turn-has-output",
    "compaction-failed",
    "nothing-compacted",
    "no-smaller-projection",
]


class Verdict(msgspec.Struct, frozen=True):
    retry: bool
    reason: Reason


def verdict(*, owns_compaction: bool, held: bool, attempt: int, item_types: Iterable[str]) -> Verdict:
    """Whether a turn that overflowed is retried: only with an engine that
    owns compaction, only a turn the sidecar held and projected (not one a
    ``turn/start`` joined, nor one started outside the client's
    ``turn/start``), only once (``attempt`` 0 is the client's own), and only
    when the failed attempt produced nothing but the client's input: a turn
    that ran tools or said something before it overflowed is not repeated."""
    if not owns_compaction:
        return Verdict(False, "engine-does-not-own-compaction")
    if not held:
        return Verdict(False, "not-a-held-turn")
    if attempt > 0:
        return Verdict(False, "already-retried")
    if any(t not in SILENT_ITEMS for t in item_types):
        return Verdict(False, "turn-has-output")
    return Verdict(True, "retry")


def after_compaction(*, ok: bool, compacted: bool) -> Verdict:
    """After the engine's ``compact``: retry only when it says it made room
    (a compaction that raised or timed out comes here as not ``ok``)."""
    if not ok:
        return Verdict(False, "compaction-failed")
    if not compacted:
        return Verdict(False, "nothing-compacted")
    return Verdict(True, "retry")


Seen = Literal["drop", "rename"]


def client_sees(method: str, item: Any, first_input_item: str | None) -> tuple[Seen, str | None]:
    """What the client sees of a retry's frame, and the retry's first
    ``userMessage`` item id once known. The client already has the first
    attempt's ``turn/started`` and its input item: the retry's are dropped;
    everything else shows under the first attempt's turn id (``rename``)."""
    if method == "turn/started":
        return "drop", first_input_item
    if method in ("item/started", "item/completed") and isinstance(item, dict):
        item_id = item.get("id")
        if first_input_item is None and item.get("type") == "userMessage" and isinstance(item_id, str):
            return "drop", item_id
        if item_id is not None and item_id == first_input_item:
            return "drop", first_input_item
    return "rename", first_input_item
