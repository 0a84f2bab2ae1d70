"""Codex's experimental API: what a connection may use only once its
``initialize`` declared ``capabilities.experimentalApi``.

The table (:mod:`protocol.experimental_table`) is generated from codex's own
schema (``python -m tools.experimental_api``); this module answers, for one
client request, whether codex would refuse it on a stable connection and
with which words. Codex's rule, as the real app-server applies it (0.169.0):
a method of the experimental API is refused whatever its params; a request
of a stable method is refused when one of its experimental members is
present with a value other than ``null`` or ``false`` (an empty list or
object counts), the first such member in the table's order, named as a
dotted path after the method (``thread/items/list.deferOutput.commandExecution``).
"""

from __future__ import annotations

from typing import Any

from .experimental_table import CODEX_VERSION, FIELDS, METHODS, SERVER_REQUESTS
from .jsonrpc import INVALID_REQUEST

__all__ = ["CODEX_VERSION", "FIELDS", "METHODS", "NOTIFICATIONS", "SERVER_REQUESTS", "gated", "refusal", "refusal_error"]

NOTIFICATIONS: frozenset[str] = frozenset({"thread/readState/changed"})
"""Notifications codex sends only to experimental connections. Its schema
does not say so (both bundles list them): this is what the wire shows, for
codex 0.169.0, and the conformance suite checks it against codex alone
(``tests/conformance``: a stable and an experimental client, same scenarios)."""

_SPLIT: dict[str, tuple[tuple[str, ...], ...]] = {m: tuple(tuple(p.split(".")) for p in paths) for m, paths in FIELDS.items()}


def gated(method: str) -> bool:
    """Whether a request of ``method`` may need its params looked at (or is refused outright)."""
    return method in METHODS or method in _SPLIT


def _used(value: Any, steps: tuple[str, ...]) -> bool:
    if not steps:
        return value is not None and value is not False
    step, rest = steps[0], steps[1:]
    if step.endswith("[]") or step.endswith("{}"):
        value = value.get(step[:-2]) if isinstance(value, dict) else None
        entries = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
        return any(_used(entry, rest) for entry in entries)
    if not isinstance(value, dict) or step not in value:
        return False
    return _used(value[step], rest)


def refusal(method: str, params: Any) -> str | None:
    """What codex names when it refuses this request on a stable connection
    (``"turn/start.additionalContext"``, ``"collaborationMode/list"``), or None."""
    if method in METHODS:
        return method
    for steps in _SPLIT.get(method, ()):
        if _used(params, steps):
            return f"{method}.{'.'.join(steps)}"
    return None


def refusal_error(what: str) -> tuple[int, str]:
    """Codex's own error for it: code and message."""
    return INVALID_REQUEST, f"{what} requires experimentalApi capability"
