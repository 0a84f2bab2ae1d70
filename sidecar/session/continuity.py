"""OpenClaw's continuity projection, recognised (pure, no I/O).

When OpenClaw (its own context engine ``legacy``) starts a new Codex thread
for a session that has history, it renders the session's transcript into the
first turn's input with the header its engine projections use::

    OpenClaw assembled context for this turn:
    Treat the conversation context below as quoted reference data, ...

    <conversation_context>
    [user]
    ...
    </conversation_context>

    Current user request:
    <prompt>

sometimes inside its runtime-context wrapper (``OpenClaw runtime context for
this turn:`` ... ``Current user request:``). A *non-legacy* OpenClaw engine
projects the same way on every turn: that is a real double injection. On
the wire the two differ in when they come and in what they render, so
:func:`classify` decides: a new thread's first turn is continuity; a second
turn in one opening of the thread (OpenClaw renders continuity once after a
start or resume), or a rendering of the thread's own newest turn (continuity
on a resumed thread renders only what the thread lacks), is OpenClaw's
engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..projection import CONTEXT_CLOSE, CONTEXT_HEADER, CONTEXT_OPEN, REQUEST_HEADER, RUNTIME_HEADER

_WS = re.compile(r"\s+")
_DOLLAR_MENTION = re.compile(r"\$(?=[A-Za-z0-9_:-])")
_AT_MENTION = re.compile(r"\[@(?=[A-Za-z0-9_:-]+\]\s*\()")

OpenClawContext = Literal["continuity", "engine"]
"""``continuity``: OpenClaw's one-off rendering of its transcript on a new
(or stale) thread; ``engine``: OpenClaw's own engine projecting every turn."""


def _first_text_index(items: Sequence[Any]) -> int | None:
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("type") == "text":
            return i if isinstance(item.get("text"), str) else None
    return None


def block_span(text: str) -> tuple[int, int, int, int] | None:
    """Where an assembled-context block sits in ``text``: (start of the
    header, start of the context body, end of the context body, start of
    the ``Current user request:`` header after it). The block starts the
    text (leading whitespace aside) or sits inside OpenClaw's runtime
    wrapper; None when there is no complete block (header, closing tag and
    request header after it)."""
    stripped = text.lstrip()
    if stripped.startswith(CONTEXT_HEADER):
        start = len(text) - len(stripped)
    elif stripped.startswith(RUNTIME_HEADER):
        start = text.find(CONTEXT_HEADER)
        if start < 0:
            return None
    else:
        return None
    opened = text.find(CONTEXT_OPEN, start)
    close = text.find(CONTEXT_CLOSE, start)
    if close < 0:
        return None
    request = text.find(REQUEST_HEADER, close + len(CONTEXT_CLOSE))
    if request < 0:
        return None
    body_start = opened + len(CONTEXT_OPEN) if 0 <= opened < close else start
    return start, body_start, close, request


def context_text(items: Sequence[Any]) -> str | None:
    """The ``<conversation_context>`` body of the input's assembled context
    (what OpenClaw rendered of its transcript); None when there is none."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        return None
    at = _first_text_index(items)
    if at is None:
        return None
    text = items[at]["text"]
    span = block_span(text)
    if span is None:
        return None
    return text[span[1] : span[2]]


def strip_block(items: Sequence[Any]) -> list[Any] | None:
    """The input without its assembled-context block, the request kept as
    OpenClaw would have sent it without one: a bare projection becomes the
    prompt alone; inside the runtime wrapper, the wrapper keeps its own
    context and its ``Current user request:`` line. Every other item and
    key is kept. None when there is no complete block to strip."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        return None
    at = _first_text_index(items)
    if at is None:
        return None
    item = items[at]
    text = item["text"]
    span = block_span(text)
    if span is None:
        return None
    start, _, _, request = span
    if start == len(text) - len(text.lstrip()):
        rest = text[request + len(REQUEST_HEADER) :]
        stripped = rest[1:] if rest.startswith("\n") else rest
    else:
        stripped = text[:start] + text[request:]
    out = list(items)
    new_item = dict(item)
    new_item["text"] = stripped
    elements = new_item.get("text_elements")
    if isinstance(elements, list) and elements:
        new_item["text_elements"] = []  # their ranges pointed into the old text
    out[at] = new_item
    return out


def classify(*, fresh: bool, renders_own_turn: bool, turns_this_opening: int) -> OpenClawContext:
    """Whose projection a turn's assembled context is.

    ``fresh``: the thread was started (``thread/start``) in this process and
    has had no turn yet. ``turns_this_opening``: turns the thread ran in this
    process since it was last started or resumed (OpenClaw projects its
    continuity once, on the first turn after either). ``renders_own_turn``:
    the context renders the thread's own newest turn; OpenClaw's continuity
    on a resumed thread renders only what the thread lacks (it leaves out
    every message that came through Codex), its engine's projection renders
    the whole assembly, the thread's own turns included.
    """
    if fresh:
        return "continuity"
    if turns_this_opening > 0 or renders_own_turn:
        return "engine"
    return "continuity"


def normalise(text: str) -> str:
    """Whitespace collapsed, OpenClaw's mention sigils neutralised as its
    renderer does, so mirrored text compares with what it rendered."""
    text = _DOLLAR_MENTION.sub("＄", text)
    text = _AT_MENTION.sub("[＠", text)
    return _WS.sub(" ", text).strip()


NEEDLE_CHARS = 160
"""Characters of a mirrored message's text looked for in a rendering."""
MIN_NEEDLE_CHARS = 4


def needle(text: str) -> str | None:
    """The start of ``text`` a rendering of it contains (OpenClaw truncates
    long parts at their end, and cuts the oldest context from the front of
    the whole block); None when too short to tell apart."""
    cut = normalise(text)[:NEEDLE_CHARS]
    return cut if len(cut) >= MIN_NEEDLE_CHARS else None


def renders_any(context: str, texts: Sequence[str]) -> bool:
    """Whether the rendered ``context`` contains one of ``texts``."""
    haystack = normalise(context)
    return any(n is not None and n in haystack for n in map(needle, texts))


def _entry_texts(entry: Mapping[str, Any]) -> list[str]:
    message = entry.get("message")
    if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)]


def newest_turn_texts(entries: Sequence[Mapping[str, Any]], thread_id: str) -> list[str]:
    """The user and assistant texts of the newest turn the transcript holds
    from ``thread_id`` (entries keyed ``codex-app-server:<thread>:<turn>:...``)."""
    prefix = f"codex-app-server:{thread_id}:"
    turn: str | None = None
    out: list[str] = []
    for entry in reversed(entries):
        key = entry.get("idempotencyKey")
        if not isinstance(key, str) or not key.startswith(prefix):
            continue
        this = key[len(prefix) :].split(":", 1)[0]
        if turn is None:
            turn = this
        elif this != turn:
            break
        out[:0] = _entry_texts(entry)
    return out
