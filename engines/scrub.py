"""Credentials found in free text and in JSON values: the one secret scanner
of the project, shared by the sidecar's recordings (``sidecar.record``) and
the engines (``lossless`` redacts what it stores with it, see
``engines/lossless/redact.py``).

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
data, which a recording or a store must keep to be useful.

On top of the scanner, shapes its rules miss (:data:`EXTRA_RULES`, rules as
data): RFC 6750 bearer tokens, OpenAI's ``sk-proj-...`` keys (its OpenAI rule
predates them), a JWT's signature (its rule stops before it), a private
key's body (its rule matches the ``BEGIN`` line only), Hugging Face tokens
(``hf_...``), Google API keys (``AIza...``), ``Authorization: token <hex>``
(and ``Basic``/``Digest``), and a password said in words ("my password is
hunter2"; "the password is stored in vault" is left alone).

For JSON values (a frame, a tool call's arguments), :func:`redact_credentials`
also blanks what a key names: a string under a key that names a credential
(``apiKey``, ``accessToken``, ``Authorization``, header maps; see
:func:`is_credential_key`), the value of a ``{name, value}`` pair whose name
does, and a value the keyword rules read as a secret when assigned to its key
(``DB_PASSWORD`` in an env map).

Loaded on first use (importing the scanner costs ~0.4 s): only what scans
pays for it. Deterministic: the same text always comes out the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

import msgspec

__all__ = [
    "CREDENTIAL",
    "CREDENTIAL_WORDS",
    "EXTRA_RULES",
    "anywhere",
    "compile_rules",
    "is_credential_key",
    "is_secret_assignment",
    "redact_credentials",
    "scrub",
    "scrub_string",
    "spans",
]

CREDENTIAL = "[redacted credential]"

# Words a "password is ..." value is not (the sentence is about the password).
_NOT_A_PASSWORD = (
    "a an the not no now set still stored saved kept required needed wrong incorrect correct right invalid valid "
    "empty blank missing too in on at of for to also same different expired changed reset hidden there here this "
    "that it its your my our their his her being going very only just never always what which where and or but "
    "because managed generated shown printed read given used optional unset null none encrypted hashed sent ignored "
    "long short strong weak secret case protected rotated updated"
).split()

#: Shapes the scanner misses, as data: ``(regex, group)``; the group's span
#: is the credential (0: the whole match, widened to the end of its token).
EXTRA_RULES: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=\-]{8,}"), 0),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), 0),
    # Its JWT rule ends lazily and leaves the signature out: the whole token.
    (re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"), 0),
    # Hugging Face user and org access tokens: hf_ and 34 letters and digits.
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), 0),
    # Google API keys: AIza and 35 characters.
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), 0),
    # GitHub's `Authorization: token <40 hex>`, and Basic/Digest credentials.
    (re.compile(r"(?i)\bauthorization\s*[:=]\s*[\"']?(?:token|basic|digest)\s+([A-Za-z0-9._~+/=\-]{8,})"), 1),
    # A password said in words: "my password is hunter2", "the passphrase was: x y".
    (
        re.compile(
            r"(?i)\b(?:pass(?:word|phrase|code)|passwd|pwd)s?\s+(?:is|was|are|will\s+be|would\s+be|should\s+be|becomes|"
            r"(?:is\s+)?(?:set|changed)\s+to|now)\s*[:=]?\s*[\"'`]?"
            r"(?!\[redacted)(?!(?:" + "|".join(_NOT_A_PASSWORD) + r")(?![\w-]))([^\s\"'`]{3,})"
        ),
        1,
    ),
)
_TAIL_PUNCT = ".,;:!?)]}"
_KEY_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")
_TRIM = " \t\r\n\"'=:`"


#: What a rule's matches must contain: (case-insensitive?, gates); each gate
#: is strings of which a match holds at least one (see :func:`_gates`).
_Gates = tuple[bool, tuple[tuple[str, ...], ...]]
Rules = tuple[
    list[tuple[re.Pattern[str], _Gates]], list[re.Pattern[str]], list[tuple[re.Pattern[str], int]], re.Pattern[str], list[_Gates]
]


def _leading(items: Any, literal: Any) -> str:
    run = []
    for op, av in items:
        if op is not literal:
            break
        run.append(chr(av))
    return "".join(run)


def _gates(regex: re.Pattern[str]) -> _Gates:
    """The strings a match of ``regex`` cannot do without, read from its
    parse tree: each run of two or more literal characters at its top
    level, and for each group at its top level (not optional) whose every
    alternative starts with two or more literal characters, those starts.
    A text holding none of a gate's strings cannot match, so the rule is
    not run on it: most rules then cost one substring search a text (the
    slowest, IBM's and Cloudant's keyword rules, ~3 ms on 5 KB of prose,
    need one of ``key``/``pw``/``pass``/``token``). Nothing is lost: a gate
    is only what every match holds."""
    fold = bool(regex.flags & re.IGNORECASE)
    try:
        from re import _constants as c  # type: ignore[attr-defined]
        from re import _parser as parser  # type: ignore[attr-defined]

        tree = parser.parse(regex.pattern, regex.flags)
    except Exception:  # another Python's internals: no gates, every rule runs
        return fold, ()
    gates: list[tuple[str, ...]] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= 2:
            gates.append(("".join(run),))
        run.clear()

    for op, av in tree:
        if op is c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        branch = None
        if op is c.SUBPATTERN:
            sub = list(av[-1])
            head = _leading(sub, c.LITERAL)
            if len(head) >= 2:
                gates.append((head,))
            elif not head and sub and sub[0][0] is c.BRANCH:
                branch = sub[0][1][1]
        elif op is c.BRANCH:  # a group without a capture is inlined
            branch = av[1]
        if branch is not None:
            starts = [_leading(list(alt), c.LITERAL) for alt in branch]
            if all(len(x) >= 2 for x in starts):
                gates.append(tuple(sorted(set(starts))))
    flush()
    if fold:
        gates = [tuple(x.lower() for x in gate) for gate in gates]
    return fold, tuple(gates)


def _passes(gates: _Gates, text: str, low: list[str]) -> bool:
    """Whether ``text`` holds a string of every gate (``low`` caches its lower case)."""
    fold, need = gates
    if not need:
        return True
    if fold and not low:
        low.append(text.lower())
    hay = low[0] if fold else text
    return all(any(x in hay for x in gate) for gate in need)


@cache
def _rules() -> Rules:
    """(whole-match rules, private-key rules, keyword rules with their
    secret's group, and the scanner's keywords, which each keyword rule needs)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.ip_public import IPPublicDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    whole: list[tuple[re.Pattern[str], _Gates]] = []
    keys: list[re.Pattern[str]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for name in sorted(plugins):  # a fixed order: the same output every run
        cls = plugins[name]
        if not issubclass(cls, RegexBasedDetector) or cls is IPPublicDetector:
            continue
        denylist: Iterable[re.Pattern[str]] = cls.denylist  # a class attribute on every plugin
        if cls is PrivateKeyDetector:
            keys.extend(denylist)
        else:
            whole.extend((regex, _gates(regex)) for regex in denylist)
    tables = (keyword.CONFIG_DENYLIST_REGEX_TO_GROUP, keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP)
    words = sorted({(regex, group) for table in tables for regex, group in table.items()}, key=lambda p: (p[0].pattern, p[1]))
    extra = [_gates(regex) for regex, _ in EXTRA_RULES]
    return whole, keys, words, re.compile("|".join(keyword.DENYLIST), re.IGNORECASE), extra


def compile_rules() -> None:
    """Compile the rules now (``--record`` does, before the first frame)."""
    _rules()


def spans(text: str) -> list[tuple[int, int]]:
    """The credentials in ``text``, as sorted, merged (start, end) spans."""
    whole, keys, words, deny, extra = _rules()
    found: list[tuple[int, int]] = []
    low: list[str] = []
    for regex, gates in whole:
        if not _passes(gates, text, low):
            continue
        for m in regex.finditer(text):
            start, end = m.span()
            while start < end and text[start] in _TRIM:
                start += 1
            while end > start and text[end - 1] in _TRIM:
                end -= 1
            # A rule that stops inside a token (fixed lengths, lazy ends)
            # takes the rest of it too; one that ends on a separator (a
            # URL's user:password@) ends there: the host name stays.
            if end > start and (text[end - 1].isalnum() or text[end - 1] in "_-."):
                while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
                    end += 1
            if end > start:
                found.append((start, end))
    for (regex, group), gates in zip(EXTRA_RULES, extra, strict=True):
        if not _passes(gates, text, low):
            continue
        for m in regex.finditer(text):
            start, end = m.span(group)
            if group:  # a value in words: not the sentence's full stop
                while end > start and text[end - 1] in _TAIL_PUNCT:
                    end -= 1
            else:
                while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
                    end += 1
            if end > start:
                found.append((start, end))
    for regex in keys:
        for m in regex.finditer(text):
            close = _KEY_END.search(text, m.end())
            found.append((m.start(), close.end() if close else len(text)))
    normal = _HYPHEN.sub("_", text)  # same length: spans carry over
    for lo, hi in _keyword_windows(normal, deny):
        for regex, group in words:
            for m in regex.finditer(normal, lo, hi):
                start, end = m.span(group)
                # The rules were written for one line (their values run to
                # anything but \v): a value ends with its line.
                line_end = normal.find("\n", start, end)
                end = end if line_end < 0 else line_end
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


def _keyword_windows(text: str, deny: re.Pattern[str]) -> list[tuple[int, int]]:
    """Where the keyword rules are run: each line holding one of the
    scanner's keywords, with the line after it (``password:`` then its value
    on the next line), merged. The scanner itself reads a file line by line,
    and its rules were written for lines: on a whole text a value ran on
    across lines to the next quote, and the rules cost 5-10 ms a KB of any
    text naming a keyword (the regex engine holds the GIL, so the relay
    waited); on these windows they cost what the keywords' lines cost."""
    windows: list[tuple[int, int]] = []
    for m in deny.finditer(text):
        lo = text.rfind("\n", 0, m.start()) + 1
        if windows and lo <= windows[-1][1]:
            if m.end() <= windows[-1][1]:
                continue
            lo = windows[-1][0]
            windows.pop()
        end_line = text.find("\n", m.end())
        hi = len(text) if end_line < 0 else text.find("\n", end_line + 1)
        windows.append((lo, len(text) if hi < 0 else hi))
    return windows


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
    _, _, words, deny, _ = _rules()
    if not deny.search(_HYPHEN.sub("_", name)):
        return False
    text = _HYPHEN.sub("_", f"{name}={value}")
    return any(m.start() < len(name) < m.start(group) for regex, group in words for m in regex.finditer(text))


# ------------------------------------------------------------ JSON values

#: Parts of a key's name that make its string value a credential.
CREDENTIAL_WORDS = ("apikey", "token", "secret", "password", "passwd", "authorization", "cookie", "credential", "privatekey", "bearer", "accesskey")
_CREDENTIAL_EXACT = frozenset({"auth"})
_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()
# A dict naming what its "value" is: a header {name, value}, a config edit {keyPath, value}.
_NAMING_KEYS = ("name", "key", "keyPath")


def is_credential_key(key: str) -> bool:
    """True for a key naming a credential: ``apiKey``, ``accessToken``,
    ``Authorization``, ``OPENAI_API_KEY``, ``clientSecret``, ``x-api-key``,
    ``http_headers``...
    Numbers and booleans under such keys (``tokenUsage`` counts,
    ``refreshToken: true``) are not credentials and are kept."""
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    # Any header may be one (``x-honeycomb-team``): header maps go whole.
    return norm in _CREDENTIAL_EXACT or norm.endswith("headers") or any(w in norm for w in CREDENTIAL_WORDS)


def redact_credentials(value: Any) -> Any:
    """``value`` (decoded JSON) with every credential replaced by
    ``[redacted credential]``: under a key that names one (the protocol's
    ``apiKey``, ``accessToken``, header maps...), under a name the keyword
    rules read as one (``DB_PASSWORD`` in an env map), and wherever the
    scanner finds one in a string, JSON inside a string (a tool call's
    ``arguments``) included. Returns ``value`` itself when nothing changed."""
    if isinstance(value, dict):
        secret_header = any(isinstance(value.get(k), str) and is_credential_key(value[k]) for k in _NAMING_KEYS)
        out = {}
        for k, v in value.items():
            if is_credential_key(k) or (secret_header and k == "value"):
                out[k] = _all_strings(v, CREDENTIAL)
            elif isinstance(v, str):
                # {"name": "DB_PASSWORD", "value": ...} assigns to its name.
                name = next((value[n] for n in _NAMING_KEYS if k == "value" and isinstance(value.get(n), str)), k)
                out[k] = CREDENTIAL if is_secret_assignment(name, v) else scrub_string(v)
            else:
                out[k] = redact_credentials(v)
        return value if out == value else out
    if isinstance(value, list):
        items = [redact_credentials(v) for v in value]
        return value if items == value else items
    if isinstance(value, str):
        return scrub_string(value)
    return value


def scrub_string(text: str) -> str:
    """A string scrubbed; one holding a JSON object or array (a tool call's
    ``arguments``) is scrubbed member by member and re-encoded when it changed."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            inner = _decode.decode(stripped)
        except (msgspec.DecodeError, UnicodeDecodeError):
            inner = None
        if isinstance(inner, (dict, list)):
            clean = redact_credentials(inner)
            return text if clean == inner else _encode.encode(clean).decode()
    return scrub(text)


def _all_strings(value: Any, replacement: str) -> Any:
    if isinstance(value, str):
        return replacement
    if isinstance(value, dict):
        return {k: _all_strings(v, replacement) for k, v in value.items()}
    if isinstance(value, list):
        return [_all_strings(v, replacement) for v in value]
    return value
