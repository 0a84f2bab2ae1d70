"""Full-text search over the lossless store's messages and summaries
(SQLite FTS5 or PostgreSQL's text search, through the backend)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .rows import StoreCore


class FullText(StoreCore):
    """The store's ``grep``."""

    def grep(self, session_id: str, match: str, limit: int, exclude_tools: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Full-text hits over the session's messages and summaries, newest
        first (by the latest message each covers); ``match`` is an FTS5 query
        of quoted words joined by AND or OR (what PostgreSQL understands too).
        Messages of the ``exclude_tools`` tools (calls and results) are left out.
        The search is :func:`.search.search`'s, with its bounds."""
        from .search import GrepQuery, search  # search reads the Store this class is part of

        query = GrepQuery(match=match, session_id=session_id, sort="newest", limit=limit)
        hits = search(self, query, exclude_tools)  # type: ignore[arg-type]
        return [
            {"id": h.id, "kind": h.kind, "role": h.role, "turn": h.turns[1], "turns": list(h.turns), "seq": h.seq, "time": h.time, "snippet": h.snippet}
            for h in hits
        ]
