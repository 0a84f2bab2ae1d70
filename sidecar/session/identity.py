"""A message's identity for the ledger, and its size for the stale slack."""

from __future__ import annotations

import hashlib

from engines import AgentMessage, encode_openclaw


def fingerprint(message: AgentMessage) -> str:
    """A message's identity for the ledger: its canonical OpenClaw encoding."""
    return hashlib.sha256(encode_openclaw(message)).hexdigest()[:16]


def message_chars(message: AgentMessage) -> int:
    """Size of a message's text, for inspection (never the text itself)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for block in content:
            for attr in ("text", "thinking"):
                value = getattr(block, attr, None)
                if isinstance(value, str):
                    total += len(value)
        return total
    summary = getattr(message, "summary", None)
    return len(summary) if isinstance(summary, str) else 0


def fingerprints(sizes: dict[str, int], messages: list[AgentMessage]) -> list[str]:
    """The messages' fingerprints, noting each one's size in ``sizes``."""
    out = []
    for m in messages:
        f = fingerprint(m)
        sizes.setdefault(f, message_chars(m))
        out.append(f)
    return out
