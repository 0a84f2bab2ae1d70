"""What the client sees, made comparable between two runs: a pure function.

Two runs of the same scenario differ, sidecar or not, in generated ids
(threads, turns, items, the fake model's response and call ids), clocks,
durations, pids and temp roots. :func:`normalise` turns a list of decoded
frames into a canonical form: ids become ``<id0>``, ``<id1>``... numbered by
first appearance (so "the same id twice" is still checked), time-like fields
``<time>``, each run's root ``<root>``, the fake model's port and the
digests of config files that name it masked; notifications whose timing is Codex's
own business (rate limits, warnings) are dropped. What is left must be equal
frame for frame, in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FAKE_IDS = re.compile(r"\b(?:msg|fc|call|resp|rs)_fake_\d+\b")
TIME_KEY = re.compile(r"(At|AtMs|Ms|_ms|_at|timestamp|Timestamp)$")
ROLLOUT_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}[-:]\d{2}[-:]\d{2}(?:\.\d+)?Z?")
WALL = re.compile(r"Wall time: [0-9.]+ seconds")
CHUNK = re.compile(r"Chunk ID: \w+")
PORT = re.compile(r"(127\.0\.0\.1|localhost):\d+")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PID_KEYS = frozenset({"processId", "pid"})
CURSOR_KEYS = frozenset({"nextCursor", "backwardsCursor", "turnsBackwardsCursor", "itemsBackwardsCursor"})
"""Opaque to the client (the sidecar wraps them once it keeps an archive):
compared by what paging with them returns, not by their bytes."""

UNORDERED = frozenset(
    {
        "account/rateLimits/updated",
        "remoteControl/status/changed",
        "warning",
        "configWarning",
        "mcpServer/startupStatus/updated",
        # A command's output streams in as many deltas as the pipe reads
        # give (none at all for a short echo, sometimes); item/completed
        # carries the whole output.
        "item/commandExecution/outputDelta",
    }
)
"""Notifications whose timing and number are Codex's own business."""


def canonical(frames: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Notifications and server requests in the order they came, then the
    responses by request id. Codex writes a response and the notifications
    of the work it starts from different tasks: seen with 0.169.0, a
    ``turn/start``'s answer came before or after the turn's first
    notifications from one run to the next, with no sidecar in between."""
    stream = [f for f in frames if "method" in f]
    replies = sorted((f for f in frames if "method" not in f), key=lambda f: (str(type(f.get("id"))), str(f.get("id"))))
    return stream + replies


def normalise(frames: Iterable[Mapping[str, Any]], roots: Sequence[str] = (), *, mask: frozenset[str] = frozenset()) -> list[Any]:
    """The frames as a client-visible canonical form (see the module doc).

    ``roots`` are path prefixes replaced by ``<root>`` (longest first);
    ``mask`` names further keys whose values are replaced by ``<masked>``
    (e.g. token counts, where a mode changes what the model reads)."""
    ids: dict[str, str] = {}
    ordered_roots = sorted((r for r in roots if r), key=len, reverse=True)

    def ident(m: re.Match[str]) -> str:
        return ids.setdefault(m.group(0), f"<id{len(ids)}>")

    def text(s: str) -> str:
        for root in ordered_roots:
            s = s.replace(root, "<root>")
        s = UUIDISH.sub(ident, s)
        s = FAKE_IDS.sub(ident, s)
        s = WALL.sub("Wall time: <t> seconds", s)
        s = ROLLOUT_TIME.sub("<time>", s)
        s = PORT.sub(r"\1:<port>", s)  # the fake model's port
        s = DIGEST.sub("sha256:<digest>", s)  # of config files naming that port
        return CHUNK.sub("Chunk ID: <chunk>", s)

    def value(v: Any, key: str | None = None) -> Any:
        if key is not None:
            if key in mask:
                return "<masked>"
            if TIME_KEY.search(key) and isinstance(v, (int, float, str)):
                return "<time>"
            if key in PID_KEYS and v is not None:
                return "<pid>"
            if key in CURSOR_KEYS and v is not None:
                return "<cursor>"
        if isinstance(v, Mapping):
            # Sorted: Codex serialises some maps in hash order. Keys may be
            # ids too (readStates by thread id).
            return {text(k): value(v[k], k) for k in sorted(v)}
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, str):
            return text(v)
        return v

    return [value(dict(f)) for f in frames if f.get("method") not in UNORDERED]


def thread_of(frame: Mapping[str, Any]) -> str | None:
    """The thread a frame is about (``params.threadId`` or
    ``params/result.thread.id``), None for anything else."""
    for part in ("params", "result"):
        body = frame.get(part)
        if not isinstance(body, Mapping):
            continue
        if isinstance(body.get("threadId"), str):
            return body["threadId"]
        thread = body.get("thread")
        if isinstance(thread, Mapping) and isinstance(thread.get("id"), str):
            return thread["id"]
    return None


def per_thread(frames: Sequence[Mapping[str, Any]], roots: Sequence[str] = (), *, mask: frozenset[str] = frozenset()) -> list[list[Any]]:
    """For frames of threads running at once (they interleave as the model
    answers): each thread's frames normalised on their own, threads in the
    order they first appear, then the frames that name no thread; each
    group in :func:`canonical` order.
    Within a thread the order is Codex's and must hold."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    loose: list[Mapping[str, Any]] = []
    for f in frames:
        thread = thread_of(f)
        if thread is None:
            loose.append(f)
        else:
            groups.setdefault(thread, []).append(f)
    return [normalise(canonical(g), roots, mask=mask) for g in groups.values()] + [normalise(canonical(loose), roots, mask=mask)]


def differences(a: Any, b: Any, limit: int = 8, path: str = "") -> list[str]:
    """Where two normalised views differ (``path: a | b``), for a failure
    message that names the field, not only the frame."""
    out: list[str] = []

    def walk(x: Any, y: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for k in sorted(set(x) | set(y), key=str):
                if x.get(k, "<missing>") != y.get(k, "<missing>"):
                    walk(x.get(k, "<missing>"), y.get(k, "<missing>"), f"{p}/{k}")
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                out.append(f"{p}: {len(x)} items | {len(y)} items")
            for i, (u, v) in enumerate(zip(x, y, strict=False)):
                if u != v:
                    walk(u, v, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p}: {str(x)[:200]} | {str(y)[:200]}")

    walk(a, b, path)
    return out
