"""``codex-sidecar engines lossless status``: the lossless engine's figures
per session, read from its store under the state directory.

The figures are :func:`engines.lossless.status`'s; this module finds the
store (never creating one) and renders one block per session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engines.lossless import DB_NAME, LOSSLESS_ENGINE_ID, StoreError, status

from . import bindings
from .mirror import session_path


class StoreMissing(Exception):
    """There is no lossless store to read."""


def store_dir(state_dir: str | os.PathLike[str]) -> Path:
    """Where the sidecar binds the engine: ``<state_dir>/engines/lossless``."""
    return Path(state_dir) / "engines" / LOSSLESS_ENGINE_ID


def _usable(state_dir: str | os.PathLike[str], name: str) -> bool:
    try:
        session_path(state_dir, name)
    except ValueError:
        return False
    return True


def lossless_rows(state_dir: str | os.PathLike[str], thread: str | None = None) -> list[dict[str, Any]]:
    """Every session's figures (or ``thread``'s), oldest id first."""
    folder = store_dir(state_dir)
    if not (folder / DB_NAME).is_file():
        raise StoreMissing(f"no lossless store under {folder} (has the sidecar run with engine = \"lossless\"?)")
    try:
        if thread is not None:
            bound = bindings.load(state_dir, thread) if _usable(state_dir, thread) else None
            rows = [status(folder, bound.session if bound is not None else thread)]  # a thread: its session
            return [r for r in rows if isinstance(r, dict) and (r.get("messages") or r.get("compactionSteps") or r.get("lastAssembly"))]
        found = status(folder)
    except StoreError as exc:
        raise StoreMissing(str(exc)) from None
    return list(found) if isinstance(found, list) else [found]


def render_lossless(rows: list[dict[str, Any]]) -> list[str]:
    """A few lines a session, for a terminal."""
    lines: list[str] = []
    for row in rows:
        depths = row.get("summariesByDepth") or {}
        by_depth = ", ".join(
            f"d{depth}: {d.get('total', 0)} ({d.get('active', 0)} uncondensed, {d.get('fallback', 0)} extractive)"
            for depth, d in sorted(depths.items(), key=lambda kv: int(kv[0]))
        ) or "none"
        last = row.get("lastCompaction") or {}
        assembly = row.get("lastAssembly") or {}
        lines.append(f"session {row.get('sessionId')}")
        lines.append(f"  messages      {row.get('messages', 0)} stored, {row.get('messageTokens', 0)} tokens")
        lines.append(f"  summaries     {by_depth}")
        lines.append(f"  extractive    {row.get('fallbackPending', 0)} pending a model rewrite")
        lines.append(
            f"  frame         {len(row.get('frameSummaries') or [])} summaries, {row.get('frameTokens', 0)} tokens; "
            f"raw messages after seq {row.get('frameSeq', 0)}; {row.get('compactionSteps', 0)} compaction steps"
        )
        if last:
            lines.append(
                f"  last step     {last.get('reason', '-')}: {last.get('leafSummaries', 0)} leaf, "
                f"{last.get('condensedSummaries', 0)} condensed, {last.get('fallbackSummaries', 0)} extractive; "
                f"tokens {last.get('tokensBefore', '-')} -> {last.get('tokensAfter', '-')}"
            )
        else:
            lines.append("  last step     none yet")
        if assembly:
            overflow = " (overflow)" if assembly.get("overflow") else ""
            lines.append(
                f"  last assembly {assembly.get('frameSummaries', 0)} summaries + {assembly.get('rawMessages', 0)} raw messages, "
                f"{assembly.get('tokens', 0)} of {assembly.get('budget', '-')} tokens{overflow}"
            )
        else:
            lines.append("  last assembly none yet")
    return lines
