"""Credentials found in free text by the rules of a secret scanner.

The rules are Yelp's ``detect-secrets`` (a maintained scanner used in
pre-commit hooks and CI), applied in-process to strings, never to files and
never with network verification:

* every regex plugin it ships (AWS, GitHub, GitLab, Slack, Stripe, OpenAI,
  SendGrid, Twilio, npm, PyPI, JWT, private keys, basic auth in URLs,
  Azure, Artifactory, Discord, Telegram, Mailchimp, Square, IBM, ...),
  except ``IPPublicDetector`` (an address is not a credential);
* its ``KeywordDetector`` assignment rules (``api_key = ...``,
  ``"password": "..."``, ``PASSWORD=...``, ``secret: ...``), with a hyphen
  between word characters read as ``_`` so ``X-Api-Key: ...`` counts as
  ``api_key``.

Its entropy plugins are left out: they flag ids, hashes and base64 image
data, which a recording must keep to be useful.

On top of the scanner, shapes its rules miss: RFC 6750 bearer tokens,
OpenAI's ``sk-proj-...`` keys (its OpenAI rule predates them), a JWT's
signature (its rule stops before it) and a private key's body (its rule
matches the ``BEGIN`` line only).

Loaded on first use (importing the scanner costs ~0.4 s): only a recording
pays for it. Deterministic: the same text always comes out the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

CREDENTIAL = "[redacted credential]"

_EXTRA = (
    re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    # Its JWT rule ends lazily and leaves the signature out: the whole token.
    re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"),
)
_KEY_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")
_TRIM = " \t\r\n\"'=:`"


Rules = tuple[list[re.Pattern[str]], list[re.Pattern[str]], list[tuple[re.Pattern[str], int]], re.Pattern[str]]


@cache
def _rules() -> Rules:
    """(whole-match rules, private-key rules, keyword rules with their
    secret's group, and the scanner's keywords, which each keyword rule needs)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.ip_public import IPPublicDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    whole: list[re.Pattern[str]] = list(_EXTRA)
    keys: list[re.Pattern[str]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for name in sorted(plugins):  # a fixed order: the same output every run
        cls = plugins[name]
        if not issubclass(cls, RegexBasedDetector) or cls is IPPublicDetector:
            continue
        denylist: Iterable[re.Pattern[str]] = cls.denylist  # a class attribute on every plugin
        (keys if cls is PrivateKeyDetector else whole).extend(denylist)
    tables = (keyword.CONFIG_DENYLIST_REGEX_TO_GROUP, keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
    words = sorted({(regex, group) for table in tables for regex, group in table.items()}, key=lambda p: (p[0].pattern, p[1]))
    return whole, keys, words, re.compile("|".join(keyword.DENYLIST), re.IGNORECASE)


def compile_rules() -> None:
    """Compile the rules now (``--record`` does, before the first frame)."""
    _rules()


def spans(text: str) -> list[tuple[int, int]]:
    """The credentials in ``text``, as sorted, merged (start, end) spans."""
    whole, keys, words, deny = _rules()
    found: list[tuple[int, int]] = []
    for regex in whole:
        for m in regex.finditer(text):
            start, end = m.span()
            while start < end and text[start] in _TRIM:
                start += 1
            while end > start and text[end - 1] in _TRIM:
                end -= 1
            # A rule that stops inside a token (fixed lengths, lazy ends)
            # takes the rest of it too.
            while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
                end += 1
            if end > start:
                found.append((start, end))
    for regex in keys:
        for m in regex.finditer(text):
            close = _KEY_END.search(text, m.end())
            found.append((m.start(), close.end() if close else len(text)))
    normal = _HYPHEN.sub("_", text)  # same length: spans carry over
    for regex, group in words if deny.search(normal) else ():
        for m in regex.finditer(normal):
            start, end = m.span(group)
            if end > start:
                found.append((start, end))
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def anywhere(texts: list[str]) -> bool:
    """Whether any of ``texts`` may hold a credential: one pass over them
    all, joined by newlines (a superset: it may say yes for a pair that only
    looks like one across two strings, never no for one inside a string)."""
    return bool(spans("\n".join(texts)))


def scrub(text: str) -> str:
    """``text`` with each credential replaced by ``[redacted credential]``."""
    found = spans(text)
    if not found:
        return text
    out, at = [], 0
    for start, end in found:
        out.append(text[at:start])
        out.append(CREDENTIAL)
        at = end
    out.append(text[at:])
    return "".join(out)


def is_secret_assignment(name: str, value: str) -> bool:
    """Whether the scanner's keyword rules see ``value`` as a secret when
    assigned to ``name`` (``DB_PASSWORD`` in an env map, a header's name):
    then the whole value goes, whatever its shape."""
    if not value or not name or "\n" in name:
        return False
    _, _, words, deny = _rules()
    if not deny.search(_HYPHEN.sub("_", name)):
        return False
    text = _HYPHEN.sub("_", f"{name}={value}")
    return any(m.start() < len(name) < m.start(group) for regex, group in words for m in regex.finditer(text))
