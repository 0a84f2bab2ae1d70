"""``codex-sidecar engines lossless status``: the lossless engine's figures
per session, read from its store: the PostgreSQL database
``[engines.lossless] database_url`` names, else the SQLite file under the
state directory.

The figures are :meth:`engines.lossless.Store.status`'s; this module finds
the store (never creating a SQLite file; see :func:`open_store`, which
``engines lossless doctor``, ``backup`` and ``prune`` use too) and renders
one block per session, and ``prune``'s report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engines.lossless import DB_NAME, LOSSLESS_ENGINE_ID, Store, StoreError

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


def open_store(state_dir: str | os.PathLike[str], database_url: str | None = None) -> Store:
    """The store the sidecar's config names: the PostgreSQL database at
    ``database_url`` when set (its tables are created there if missing, as
    the engine would), else the SQLite file under ``state_dir``, which must
    exist. Raises :class:`StoreMissing` with the reason."""
    folder = store_dir(state_dir)
    if not database_url and not (folder / DB_NAME).is_file():
        raise StoreMissing(f"no lossless store under {folder} (has the sidecar run with engine = \"lossless\"?)")
    try:
        return Store.open_configured(database_url, folder, DB_NAME)
    except StoreError as exc:
        raise StoreMissing(str(exc)) from None


def lossless_rows(state_dir: str | os.PathLike[str], thread: str | None = None, database_url: str | None = None) -> list[dict[str, Any]]:
    """Every session's figures (or ``thread``'s), oldest id first, from the
    store :func:`open_store` finds. ``thread`` may be a Codex thread id (its
    bound session is read, as the sidecar binds it under ``state_dir``) or a
    session id."""
    store = open_store(state_dir, database_url)
    try:
        if thread is not None:
            bound = bindings.load(state_dir, thread) if _usable(state_dir, thread) else None
            row = store.status(bound.session if bound is not None else thread)  # a thread: its session
            return [row] if row.get("messages") or row.get("compactionSteps") or row.get("lastAssembly") or row.get("skipped") else []
        return [store.status(s) for s in store.session_ids()]
    except StoreError as exc:
        raise StoreMissing(str(exc)) from None
    finally:
        store.close()


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
        lines += _calls_and_skips(row)
    return lines


def _calls_and_skips(row: dict[str, Any]) -> list[str]:
    """The engine's own model calls (``summary_model``, the hourly cap) and
    the messages it left out (heartbeats, ignored sessions)."""
    lines: list[str] = []
    calls = row.get("modelCalls") or {}
    if calls:
        models = ", ".join(f"{n} on {m}" for m, n in sorted((calls.get("byModel") or {}).items())) or "none"
        lines.append(
            f"  model calls   {calls.get('calls', 0)} ({models}); {calls.get('lastHour', 0)} in the last hour "
            f"({calls.get('allSessionsLastHour', 0)} for all sessions); {calls.get('capped', 0)} refused by the hourly cap "
            f"({calls.get('cappedLastHour', 0)} in the last hour)"
        )
    skipped = row.get("skipped") or {}
    if skipped:
        lines.append("  skipped       " + ", ".join(f"{n} messages ({reason})" for reason, n in sorted(skipped.items())))
    return lines


def render_prune(report: dict[str, Any]) -> list[str]:
    """``engines lossless prune``'s report, for a terminal."""
    dry = report.get("dryRun")
    verb = "would drop" if dry else "dropped"
    days = report.get("retentionDays") or 0
    limit = report.get("sessionMaxMessages") or 0
    lines = [
        f"store      {report.get('backend')} {report.get('where')}",
        f"rules      retention {f'{days:g} days' if days else 'off'}; per-session raw text {f'newest {limit} messages' if limit else 'unlimited'}; orphans",
    ]
    sessions = report.get("expiredSessions") or []
    kept = set(report.get("droppedSessions") or []) if not dry else {s["sessionId"] for s in sessions}
    for s in sessions:
        if s["sessionId"] in kept:
            lines.append(
                f"session    {verb} {s['sessionId']} ({s['why']}; last activity {s.get('lastActivity') or 'unknown'}; "
                f"{s['messages']} messages, {s['summaries']} summaries)"
            )
    for session_id, n in sorted((report.get("prunedMessages") or {}).items()):
        lines.append(f"raw text   {verb} for {n} message(s) of {session_id} (its summaries keep what they said)")
    for what, n in sorted((report.get("orphans") or {}).items()):
        lines.append(f"orphans    {verb} {n} {what}")
    size = f"{report.get('sizeBytes', 0) / 2**20:.2f} MiB"
    if not dry and "sizeAfter" in report:
        size += f" -> {report['sizeAfter'] / 2**20:.2f} MiB in use"
    lines.append(f"size       {size}")
    nothing = not (kept or report.get("prunedMessages") or report.get("orphans"))
    lines.append("nothing to prune" if nothing else ("dry run: nothing changed" if dry else "done"))
    return lines
