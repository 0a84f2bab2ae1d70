"""Full-text search over the lossless store's messages and summaries
(SQLite FTS5 or PostgreSQL's text search, through the backend)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .rows import StoreCore


class FullText(StoreCore):
    """The store's ``grep``."""

    def grep(self, session_id: str, match: str, limit: int, exclude_tools: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Full-text hits over the session's messages and summaries, newest
        first (by the latest message each covers); ``match`` is an FTS5 query
        of quoted words joined by AND or OR (what PostgreSQL understands too).
        Messages of the ``exclude_tools`` tools (calls and results) are left out."""
        with self._lock:
            hits: list[dict[str, Any]] = []
            for row in self._conn.grep("messages", session_id, match, limit + 64):
                mid, role, turn, seq, ts, tool_name, body, snippet = row
                if tool_name in exclude_tools or (role == "assistant" and _calls_only(body, exclude_tools)):
                    continue
                hits.append({"id": mid, "kind": "message", "role": role, "turn": turn, "turns": [turn, turn], "seq": seq, "time": ts, "snippet": snippet})
            for row in self._conn.grep("summaries", session_id, match, limit):
                sid, depth, turn_lo, turn_hi, seq_hi, ts, snippet = row
                hits.append(
                    {"id": sid, "kind": "summary", "role": f"summary d{depth}", "turn": turn_hi, "turns": [turn_lo, turn_hi], "seq": seq_hi, "time": ts, "snippet": snippet}
                )
            hits.sort(key=lambda h: (-h["seq"], h["kind"] != "message", h["id"]))
            return hits[:limit]


def _calls_only(body: bytes, tools: Sequence[str]) -> bool:
    """Whether an assistant message only calls tools in ``tools`` (a recall
    tool's call is not a fact worth finding again)."""
    if not tools:
        return False
    try:
        data = json.loads(body)
    except ValueError:
        return False
    blocks = data.get("content") if isinstance(data, dict) else None
    if not isinstance(blocks, list) or not blocks:
        return False
    return all(isinstance(b, dict) and b.get("type") == "toolCall" and b.get("name") in tools for b in blocks)
