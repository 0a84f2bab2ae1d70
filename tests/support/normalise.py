"""Two runs of one session, made comparable: the sidecar's and a direct one.

Generated ids, timestamps, durations and temp paths differ between any two
runs, sidecar or not, so both sides are normalised the same way first: ids
become placeholders numbered by first appearance (so "the same id twice" is
still checked), timestamps and durations become markers, and each run's
temp root becomes ``<root>``.
"""

from __future__ import annotations

import json
import re

from tests.conformance.normalise import canonical

UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME_KEY = re.compile(r"(At|AtMs|Ms|_ms|_at|timestamp)$")
# Wall-clock readings embedded in strings: rollout file names, metadata JSON.
ROLLOUT_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}")
EMBEDDED_MS = re.compile(r'(_at_unix_ms\\?":)\d+')
# Codex's own wall-clock readings inside tool output, e.g. "Wall time: 0.0012 seconds".
WALL = re.compile(r"Wall time: [0-9.]+ seconds")
CHUNK = re.compile(r"Chunk ID: \w+")


class Normaliser:
    def __init__(self, root: str) -> None:
        self.root = root
        self.ids: dict[str, str] = {}

    def _id(self, m: re.Match) -> str:
        return self.ids.setdefault(m.group(0), f"<id{len(self.ids)}>")

    def text(self, s: str) -> str:
        s = s.replace(self.root, "<root>")
        s = UUIDISH.sub(self._id, s)
        s = WALL.sub("Wall time: <t> seconds", s)
        s = ROLLOUT_TIME.sub("<time>", s)
        s = EMBEDDED_MS.sub(r"\1<time>", s)
        return CHUNK.sub("Chunk ID: <chunk>", s)

    def value(self, v, key: str | None = None):
        if key is not None and TIME_KEY.search(key) and isinstance(v, (int, float, str)):
            return "<time>"
        if key in ("processId", "pid") and v is not None:
            return "<pid>"
        if isinstance(v, dict):
            # Sorted: Codex serialises some maps (client_metadata) in hash order,
            # and ids are numbered by first appearance.
            return {k: self.value(v[k], k) for k in sorted(v)}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, str):
            return self.text(v)
        return v


# Notifications whose timing relative to the turn is Codex's own business.
UNORDERED = {"account/rateLimits/updated", "remoteControl/status/changed", "warning", "configWarning", "mcpServer/startupStatus/updated"}


def client_view(clients, root: str) -> list:
    """What each client received, normalised: notifications in the order
    they came, then the responses by id (``canonical``: Codex writes a
    response and the notifications of the work it starts from different
    tasks, so a ``turn/start``'s answer comes before or after the turn's
    first notifications from one run to the next, sidecar or not)."""
    norm = Normaliser(root)
    out = []
    for c in clients:
        frames = [json.loads(line) for line in c.received]
        for msg in canonical(f for f in frames if f.get("method") not in UNORDERED):
            out.append(norm.value(msg))
    return out


def model_view(requests, root: str) -> list:
    norm = Normaliser(root)
    return [norm.value(r) for r in requests]
