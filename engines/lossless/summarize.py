"""Summary texts: the model's (through ``host.complete``) or a deterministic
extractive stand-in when the model cannot answer.

The prompts and the stand-in are pure functions of the sources, so the same
sources always ask the same question and always give the same stand-in.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import trio

from engines.api import CompleteParams, EngineHost

from .messages import iso_minute

log = logging.getLogger("engines.lossless.summarize")

__all__ = [
    "BATCH_SYSTEM_PROMPT",
    "Source",
    "batch_prompt",
    "cap_summary",
    "extractive_summary",
    "instructed",
    "parse_batch",
    "model_summary",
    "summary_id",
    "summary_prompt",
]

#: The longest text one source contributes to a summary prompt, in characters.
SOURCE_PROMPT_CHARS = 12_000

SYSTEM_PROMPT = (
    "You write the memory of a long conversation between a user and a coding assistant. "
    "Summarise the excerpt you are given so the assistant can carry on without it: keep "
    "facts, names, numbers, identifiers, file paths, commands and their outcomes, decisions "
    "and their reasons, and open questions. Do not invent anything and do not address the "
    "user. Plain text, terse, no preamble."
)


BATCH_SYSTEM_PROMPT = (
    SYSTEM_PROMPT
    + " You are given several excerpts: summarise each one on its own, in order, each section "
    "headed by its own marker line exactly as asked."
)

#: The most characters of a compaction's ``custom_instructions`` a summary
#: prompt carries (OpenClaw's ``/compact <instructions>``, ``sidecar/compact``).
INSTRUCTIONS_CHARS = 2_000


def instructed(system: str, instructions: str | None, redact: bool = True) -> str:
    """``system`` with a compaction's custom instructions after it: one line,
    at most :data:`INSTRUCTIONS_CHARS` characters, credentials redacted like
    the stored text (``redact``: ``redact_secrets``). Empty instructions
    leave ``system`` as it is."""
    text = " ".join((instructions or "").split())
    if not text:
        return system
    if redact:
        from engines.scrub import scrub_string

        text = scrub_string(text)
    if len(text) > INSTRUCTIONS_CHARS:
        text = text[: INSTRUCTIONS_CHARS - 1].rstrip() + "…"
    return f"{system}\n\nThe user's instructions for this compaction (follow them within the rules above): {text}"


#: The line that opens excerpt ``k`` of a batched prompt, and summary ``k`` of its answer.
EXCERPT_MARK = "### EXCERPT {k}:"
SUMMARY_MARK = "### SUMMARY {k}"
_SUMMARY_LINE = re.compile(r"^[ \t]*#{2,4}[ \t]*SUMMARY[ \t]+(\d+)[ \t]*:?[ \t]*$", re.M | re.I)


class Source:
    """One thing a summary is made from: a raw message or a lower summary."""

    __slots__ = ("id", "label", "text")

    def __init__(self, id: str, label: str, text: str) -> None:  # noqa: A002
        self.id = id
        self.label = label
        self.text = text


def summary_id(session_id: str, depth: int, source_ids: Sequence[str]) -> str:
    """A summary's id, derived from what it summarises (``sum_`` + 16 hex digits)."""
    key = "\n".join([session_id, str(depth), *source_ids])
    return "sum_" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" […{len(text) - limit} chars cut]"


def summary_prompt(depth: int, turns: tuple[int, int], time_range: tuple[int, int], sources: Sequence[Source], target_tokens: int) -> str:
    """The prompt for one summary over ``sources``."""
    what = "messages" if depth == 0 else "summaries of earlier parts"
    head = (
        f"Summarise these {len(sources)} {what} (turns {turns[0]}-{turns[1]}, "
        f"{iso_minute(time_range[0])} to {iso_minute(time_range[1])}) in at most {target_tokens} tokens.\n"
    )
    body = "\n\n".join(f"[{s.label}]\n{_clip(s.text, SOURCE_PROMPT_CHARS)}" for s in sources)
    return head + "\n" + body


def batch_prompt(parts: Sequence[tuple[int, tuple[int, int], tuple[int, int], Sequence[Source], int]]) -> str:
    """One prompt asking for ``len(parts)`` summaries at once, each part
    ``(depth, turns, time_range, sources, target_tokens)``. Each excerpt is
    introduced by its ``### EXCERPT k:`` line (with its own length limit) and
    the answer must give each summary under a ``### SUMMARY k`` line."""
    n = len(parts)
    head = (
        f"Summarise each of the {n} excerpts below on its own, in order. Answer with exactly {n} sections: "
        f"each starts with a line '{SUMMARY_MARK.format(k='k')}' (k = 1 to {n}) and holds that excerpt's summary only; "
        "nothing before the first section.\n"
    )
    sections = []
    for k, (depth, turns, time_range, sources, target) in enumerate(parts, 1):
        what = "messages" if depth == 0 else "summaries of earlier parts"
        line = (
            f"{EXCERPT_MARK.format(k=k)} {len(sources)} {what} (turns {turns[0]}-{turns[1]}, "
            f"{iso_minute(time_range[0])} to {iso_minute(time_range[1])}), at most {target} tokens"
        )
        body = "\n\n".join(f"[{s.label}]\n{_clip(s.text, SOURCE_PROMPT_CHARS)}" for s in sources)
        sections.append(line + "\n\n" + body)
    return head + "\n" + "\n\n".join(sections)


def parse_batch(text: str, n: int) -> dict[int, str]:
    """The summaries a batched answer gives, by their 1-based number: the
    text under each ``### SUMMARY k`` line up to the next such line. Numbers
    outside ``1..n``, given twice, or with no text are left out (the caller
    makes those summaries another way); an answer with no marker gives
    nothing."""
    marks = list(_SUMMARY_LINE.finditer(text))
    found: dict[int, str] = {}
    twice: set[int] = set()
    for i, m in enumerate(marks):
        k = int(m.group(1))
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end() : end].strip()
        if not 1 <= k <= n or not body:
            continue
        if k in found:
            twice.add(k)
        found[k] = body
    for k in twice:
        del found[k]
    return found


def _first_words(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text`` on one line, cut at a word."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    if cut < limit // 2:
        cut = limit
    return flat[:cut].rstrip() + " …"


def extractive_summary(
    depth: int, turns: tuple[int, int], sources: Sequence[Source], target_tokens: int, count_tokens: Callable[[str], int]
) -> str:
    """The deterministic stand-in: the head of every source, one line each,
    shortened evenly until the whole fits ``target_tokens``."""
    header = f"(extractive summary, the summariser was unavailable; turns {turns[0]}-{turns[1]})"
    if not sources:
        return header
    per_source = max(24, (target_tokens * 4) // len(sources))
    while True:
        lines = [header]
        for s in sources:
            text = s.text
            if text.startswith("(extractive summary"):  # a lower stand-in: skip its header
                text = text.split(")", 1)[-1]
            lines.append(f"- {s.label}: {_first_words(text, per_source)}")
        out = "\n".join(lines)
        if per_source <= 24 or count_tokens(out) <= target_tokens:
            return out
        per_source = max(24, per_source * 3 // 4)


async def model_summary(
    host: EngineHost | None,
    prompt: str,
    target_tokens: int,
    timeout: float,
    count_tokens: Callable[[str], int],
    system: str = SYSTEM_PROMPT,
    *,
    cap: bool = True,
) -> tuple[str | None, str]:
    """Ask the host for a summary. Returns ``(text, outcome)``; ``text`` is
    None when the model gave nothing usable (outcome says why: ``unbound``,
    ``timeout``, ``error:<type>``, ``empty``). Never raises (but lets the
    caller's cancellation through). ``cap=False`` leaves the answer whole: a
    batched answer is cut into its sections first and each is capped on its
    own (capping the whole answer flattened its lines, so no section marker
    was found and every summary of the batch was asked for again, one call
    each: 8k bench, a third of the summary calls)."""
    if host is None:
        return None, "unbound"
    if timeout <= 0:
        return None, "timeout"
    result: Any = None
    try:
        with trio.move_on_after(timeout):
            result = await host.complete(
                CompleteParams(system=system, prompt=prompt, max_output_tokens=target_tokens * 2)
            )
    except Exception as exc:  # EngineHostError, or anything a host lets slip: the stand-in applies
        log.warning("summary call failed; using the extractive stand-in", extra={"fields": {"error": type(exc).__name__}})
        return None, f"error:{type(exc).__name__}"
    if result is None:
        log.warning("summary call timed out; using the extractive stand-in", extra={"fields": {"timeoutSeconds": timeout}})
        return None, "timeout"
    text = getattr(result, "text", None)
    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    return (cap_summary(text.strip(), target_tokens, count_tokens) if cap else text.strip()), "model"


def cap_summary(text: str, target_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """``text``, or its head when it runs past twice ``target_tokens``."""
    limit = target_tokens * 2
    if count_tokens(text) > limit:  # an answer far over its length: keep its head
        text = _first_words(text, limit * 4)
        while count_tokens(text) > limit and len(text) > 16:
            text = _first_words(text, len(text) * 3 // 4)
    return text
