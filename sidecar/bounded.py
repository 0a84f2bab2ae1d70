"""Text made bounded and safe for a projection's context block.

The small rules :mod:`sidecar.projection` renders with, none of them about
what a projection is: one short line for a name, a truncation that says what
it cut, a canonical JSON preview of a tool call's arguments (sorted keys,
never a ``repr``), the context block's closing tag and Codex's ``$`` and
``[@`` mentions neutralised inside quoted text, an image's placeholder, and
text cut into parts of at most so many UTF-8 bytes. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from engines.api import ImageBlock

#: Longest rendered tool-call argument preview (characters, ``…`` included).
TOOL_ARGS_PREVIEW_CHARS = 200

NAME_CHARS = 100  # tool names, mime types: one short line

_TAG_RE = re.compile(r"<(\s*/?\s*conversation_context)", re.IGNORECASE)
_DOLLAR_MENTION_RE = re.compile(r"\$(?=[A-Za-z0-9_:-])")
_AT_MENTION_RE = re.compile(r"\[@(?=[A-Za-z0-9_:-]+\]\()")


def split_utf8(text: str, limit: int) -> list[str]:
    """``text`` in consecutive parts of at most ``limit`` UTF-8 bytes, cut at
    line ends where possible; joining the parts gives ``text`` back."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if n > limit:  # a line too long on its own: cut it by characters
            if current:
                parts.append("".join(current))
                current, size = [], 0
            piece: list[str] = []
            piece_size = 0
            for ch in line:
                b = len(ch.encode("utf-8"))
                if piece_size + b > limit:
                    parts.append("".join(piece))
                    piece, piece_size = [], 0
                piece.append(ch)
                piece_size += b
            current, size = piece, piece_size
            continue
        if size + n > limit and current:
            parts.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += n
    if current:
        parts.append("".join(current))
    return parts


def one_line(value: Any, limit: int = NAME_CHARS) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def canonical(value: Any) -> Any:
    """JSON-ready copy with string keys, so sorting never compares mixed types."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, child in value.items():
            if isinstance(key, str):
                name = key
            elif key is None or isinstance(key, (bool, int, float)):
                name = json.dumps(key)
            else:
                name = f"<{type(key).__name__}>"
            out[name] = canonical(child)
        return out
    if isinstance(value, (list, tuple)):
        return [canonical(child) for child in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical_json(canonical(child)) for child in value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return f"<{type(value).__name__}>"  # never repr(): it may hold an address


def _canonical_json(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):  # e.g. circular data
        return f"<{type(value).__name__}>"


def args_preview(arguments: Any) -> str:
    text = _canonical_json(canonical(arguments))
    if len(text) > TOOL_ARGS_PREVIEW_CHARS:
        text = text[: TOOL_ARGS_PREVIEW_CHARS - 1] + "…"
    return text


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated {len(text) - limit} chars]"


def neutralize(body: str) -> str:
    body = _TAG_RE.sub(r"&lt;\1", body)
    body = _DOLLAR_MENTION_RE.sub("＄", body)
    return _AT_MENTION_RE.sub("[＠", body)


def image_placeholder(block: ImageBlock) -> str:
    mime = one_line(block.mime_type) if isinstance(block.mime_type, str) and block.mime_type.strip() else ""
    return f"[image: {mime}]" if mime else "[image]"
