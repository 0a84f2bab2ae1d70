"""A synthetic OpenClaw session in a state dir, as the sidecar leaves one:
for ``codex-sidecar view``'s tests and its benchmark (``tools/bench_view.py``).

The files are written in the sidecar's own formats (bindings, inspection
records and their text, ledger, the transcript mirror): one session over several Codex
threads (a rotation at each), with rebuilds, switches, a fallback, a failed
``after_turn``, a client revert, a native compaction and a failed turn, and
a planted phrase in one turn's text. Deterministic: the same arguments
write the same bytes (the bindings' mtimes, which order the threads, too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PLANTED = "zebra-quartz-lantern"
"""A phrase found in exactly one turn's user message (turn 7) and nowhere else."""
SESSION = "agent-main-view-test"
EPOCH_MS = 1_796_000_000_000


def thread_id(k: int) -> str:
    return f"01a23461-0000-7000-8000-{k:012d}"


def turn_id(n: int) -> str:
    return f"01a23462-{n:04d}-7000-8000-000000000000"


def _line(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n"


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def user_text(n: int) -> str:
    extra = f" Remember the code word {PLANTED}." if n == 7 else ""
    return f"Turn {n}: tell me about place number {n} in Lisbon, with opening times and prices.{extra}"


def reply_text(n: int) -> str:
    return f"Place {n} opens at {8 + n % 4}:00 and costs {5 + n % 7} euros; trams {n % 30} and {(n + 7) % 30} stop nearby."


def write_session(state_dir: str | os.PathLike[str], turns: int = 40, threads: int = 3, *, old_records: int = 0) -> tuple[str, list[str]]:
    """Write the session; ``old_records`` first turns get records as older
    sidecars wrote them (no budget, no text sent). Returns the session id
    and its thread ids, oldest first."""
    root = Path(state_dir)
    for sub in ("bindings", "inspect", "inspect-text", "ledger", "sessions"):
        (root / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    ids = [thread_id(k) for k in range(1, threads + 1)]
    per = max(1, -(-turns // threads))
    mirror = [_line({"type": "session", "version": 4, "id": SESSION, "timestamp": _iso(EPOCH_MS), "cwd": "/work"})]
    inspect: dict[str, list[str]] = {t: [] for t in ids}
    texts: dict[str, list[str]] = {t: [] for t in ids}
    ledger: dict[str, list[str]] = {t: [] for t in ids}
    held: dict[str, int] = {t: 0 for t in ids}
    parent = None
    for n in range(1, turns + 1):
        thread = ids[min((n - 1) // per, threads - 1)]
        tid = turn_id(n)
        at = EPOCH_MS + n * 60_000
        if n == 30:
            mirror.append(_line({"type": "custom", "id": f"rv{n}", "parentId": parent, "timestamp": _iso(at - 1000), "customType": "codex-sidecar.client-revert", "data": {"beforeTurnId": tid}}))
        if n == 40:
            mirror.append(_line({"type": "custom", "id": f"nc{n}", "parentId": parent, "timestamp": _iso(at - 1000), "customType": "codex-native-compaction", "data": {"threadId": thread}}))
        key = f"codex-app-server:{thread}:{tid}"
        messages: list[dict[str, Any]] = [{"role": "user", "content": user_text(n), "timestamp": at}]
        if n % 10 == 5:
            messages.append({"role": "assistant", "content": [{"type": "toolCall", "id": f"call_{n}", "name": "bash", "arguments": {"command": f"echo step {n}"}}], "timestamp": at + 10})
            messages.append({"role": "toolResult", "toolCallId": f"call_{n}", "toolName": "bash", "content": [{"type": "text", "text": f"step {n}\n"}], "isError": False, "timestamp": at + 20})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": reply_text(n)}], "timestamp": at + 30})
        for k, m in enumerate(messages):
            entry_id = f"m{n}x{k}"
            mirror.append(_line({"type": "message", "id": entry_id, "parentId": parent, "timestamp": _iso(m["timestamp"]), "message": m, "idempotencyKey": f"{key}:item{k}:{m['role']}"}))
            parent = entry_id
        finalized_ok = n != 17
        mirror.append(_line({"type": "custom", "id": f"f{n}", "parentId": parent, "timestamp": _iso(at + 40), "customType": "openclaw-codex-sidecar/turn-finalized", "data": {"turnId": tid, "status": "completed", "ok": finalized_ok}, "idempotencyKey": f"{key}:finalized"}))
        parent = f"f{n}"
        rebuilt = n % 25 == 0 or n % 60 == 0
        switched = n % 60 == 0
        fallback = "assemble-deadline" if n == 13 else None
        before = held[thread]
        fingerprints = [[f"{n:08x}{k:08x}", len(json.dumps(m))] for k, m in enumerate(messages)]
        if rebuilt or not ledger[thread]:
            if rebuilt:
                ledger[thread].append(_line({"rebuilding": True, "rebuilds": n // 25, "epoch": None}))
            before = 0
            ledger[thread].append(_line({"turn": tid, "rebuilds": n // 25, "force": False, "epoch": None, "reset": fingerprints, "turns": [tid]}))
            held[thread] = len(fingerprints)
        else:
            ledger[thread].append(_line({"turn": tid, "rebuilds": n // 25, "force": False, "epoch": None, "add": fingerprints}))
            held[thread] = before + len(fingerprints)
        assembled = min(2 * n, 60 if n < 25 else 2 * (n % 25) + 4)
        context = "" if not rebuilt else "OpenClaw assembled context for this turn:\n" + "\n".join(f"[user] {user_text(k)}" for k in range(max(1, n - 3), n))
        record: dict[str, Any] = {
            "turnId": tid,
            "status": "failed" if n == 21 else "completed",
            "mode": "delta",
            "epoch": None,
            "projectedEpoch": None,
            "projected": rebuilt,
            "fallback": fallback,
            "historyMessages": 3 * (n - 1),
            "assembled": {"count": assembled, "estimatedTokens": 40 * assembled, "messages": [["user" if k % 2 == 0 else "assistant", 80 + k] for k in range(min(assembled, 64))]},
            "injected": {"channels": ["turn/start.additionalContext[openclaw_context]"] if rebuilt else [], "contextChars": len(context), "rendered": 3 if rebuilt else 0, "dropped": 0},
            "turnInputChars": {"original": len(user_text(n)), "sent": len(user_text(n)) + len(context)},
            "codexInputTokens": 5000 + 120 * n,
            "cachedInputTokens": 0 if rebuilt else int((5000 + 120 * n) * 0.8),
            "rebuilt": rebuilt,
            "staleHeld": 0,
            "holdMs": round(1.5 + (n % 7) * 0.3 + (40.0 if rebuilt else 0.0), 2),
            "revertMs": 35.0 if rebuilt else None,
            **({"switched": True} if switched else {}),
            "rebuilds": n // 25,
            "heldMessages": held[thread],
            "forceRebuild": False,
        }
        if n > old_records:
            record["budget"] = 4000
            if rebuilt:
                texts[thread].append(_line({"turnId": tid, "sent": {"input": user_text(n), "additionalContext": context}}))
        inspect[thread].append(_line(record))
    (root / "sessions" / f"{SESSION}.jsonl").write_text("".join(mirror))
    for k, t in enumerate(ids):
        (root / "inspect" / f"{t}.jsonl").write_text("".join(inspect[t]))
        (root / "inspect-text" / f"{t}.jsonl").write_text("".join(texts[t]))
        (root / "ledger" / f"{t}.jsonl").write_text("".join(ledger[t]))
        binding = root / "bindings" / f"{t}.json"
        binding.write_text(_line({"thread": t, "session": SESSION, "via": "relay"}))
        os.utime(binding, ns=(EPOCH_MS * 1_000_000 + k, EPOCH_MS * 1_000_000 + k))
    return SESSION, ids
