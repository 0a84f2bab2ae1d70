"""Reading the project's Markdown: inline code spans, tables, links and GitHub's heading anchors."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def prose_and_code(text: str) -> tuple[list[str], list[str]]:
    """The lines outside fenced code blocks, and the lines inside them."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def code_spans(text: str) -> list[str]:
    """The contents of every inline code span outside fenced blocks."""
    prose, _ = prose_and_code(text)
    return [m.group(2).strip() for m in _CODE_SPAN.finditer("\n".join(prose))]


def table_rows(text: str) -> list[list[str]]:
    """Every table body row as a list of its cells (header and separator rows included)."""
    prose, _ = prose_and_code(text)
    rows: list[list[str]] = []
    for line in prose:
        stripped = line.strip()
        if not (stripped.startswith("|") and stripped.endswith("|")):
            continue
        # split on pipes that are not escaped (\|) and not inside a code span
        cells: list[str] = []
        cell: list[str] = []
        in_code = False
        body = stripped[1:-1]
        i = 0
        while i < len(body):
            ch = body[i]
            if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
                cell.append("|")
                i += 2
                continue
            if ch == "`":
                in_code = not in_code
            if ch == "|" and not in_code:
                cells.append("".join(cell).strip())
                cell = []
            else:
                cell.append(ch)
            i += 1
        cells.append("".join(cell).strip())
        rows.append(cells)
    return rows


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation
    other than ``-`` and ``_`` removed, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch in "-_ " or ch.isalnum():
            kept.append(ch)
        elif unicodedata.category(ch).startswith(("L", "N", "M")):
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown file offers: its headings (duplicates numbered
    ``-1``, ``-2`` as GitHub does) and explicit ``<a name=...>`` / ``id=``."""
    prose, _ = prose_and_code(text)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose:
        out.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        if slug in seen:
            seen[slug] += 1
            out.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            out.add(slug)
    return out


def link_targets(text: str) -> list[str]:
    """Every link target outside code: inline links, images and reference definitions."""
    prose, _ = prose_and_code(text)
    joined = "\n".join(prose)
    joined = _CODE_SPAN.sub("", joined)
    found = _INLINE_LINK.findall(joined) + _IMAGE_LINK.findall(joined)
    for line in joined.splitlines():
        match = _REF_DEF.match(line)
        if match:
            found.append(match.group(1))
    return found
