"""``lossless``: the built-in engine that keeps every message, summarises in a
hierarchy and gives the model recall tools.

Modules, one concept each: :mod:`.config` (the ``[engines.lossless]`` table),
:mod:`.messages` (message identity, text, tool pairs), :mod:`.store` (every
store operation) over :mod:`.backends` (SQLite, the default, or PostgreSQL)
with :mod:`.schema` (the tables and migrations),
:mod:`.summarize` (model and extractive summaries), :mod:`.compaction`
(compaction steps), :mod:`.assemble` (the assembly within the budget),
:mod:`.outofline` (large messages kept out of line),
:mod:`.tools` (``lcm_grep``, ``lcm_describe``, ``lcm_expand``) with
:mod:`.search` (``lcm_grep``'s queries: relevance, regex, time, agent scope),
:mod:`.importer` (Codex rollouts and OpenClaw transcripts into the store),
:mod:`.redact` (credentials out of what is stored, with :mod:`engines.scrub`),
:mod:`.retention` (expired sessions, per-session limits, orphans: ``prune``),
:mod:`.expand_query` (``lcm_expand_query``),
:mod:`.calls_budget` (the engine's own model calls: ``summary_model``, the
hourly cap, their log), :mod:`.skipping` (heartbeat turns and ignored
sessions left out of the store) and :mod:`.engine` (the engine object). ``docs/engines/lossless.md`` describes
the behaviour.
"""

from __future__ import annotations

import os
from typing import Any

from .config import LosslessConfig, parse_config
from .engine import LOSSLESS_ENGINE_ID, LosslessEngine, LosslessNotReady
from .store import DB_NAME, SCHEMA_VERSION, Store, StoreError
from .tools import TOOL_NAMES, TOOL_SPECS

__all__ = [
    "DB_NAME",
    "LOSSLESS_ENGINE_ID",
    "SCHEMA_VERSION",
    "TOOL_NAMES",
    "TOOL_SPECS",
    "LosslessConfig",
    "LosslessEngine",
    "LosslessNotReady",
    "Store",
    "StoreError",
    "parse_config",
    "status",
]


def status(state_dir: str | os.PathLike[str], session_id: str | None = None) -> dict[str, Any] | list[dict[str, Any]]:
    """The operator view of a store in ``state_dir``: one session's figures,
    or every session's when ``session_id`` is None."""
    store = Store.open(state_dir, DB_NAME)
    try:
        if session_id is not None:
            return store.status(session_id)
        return [store.status(s) for s in store.session_ids()]
    finally:
        store.close()
