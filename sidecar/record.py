"""``--record FILE``: every frame on every wire, as JSONL, written as it passes.

One record a line: ``{"seq", "t", "dir", "frame"}`` where ``t`` is seconds on
a monotonic clock since recording began and ``dir`` names the wire
(``client>codex``, ``codex>client``, ``sidecar>codex``, ``codex>sidecar``,
``client>sidecar``, ``sidecar>client``). A frame that is valid JSON is
embedded byte for byte; one that is not is kept as ``rawBase64``. Each record
is one ``write`` on an O_APPEND descriptor, so a SIGKILL loses at most the
record being written and leaves at most one partial last line, which
``read_recording`` skips. A write that fails (a full disk) disables
recording with one error log; the relay itself never stops for it.

With ``redact=True`` the text a person or model wrote is replaced by its
length (see ``REDACTED_KEYS``), so a recording can be shared without prompts.

Credentials never reach the file, with or without ``redact``: a string under
a key that names one (``apiKey``, ``accessToken``, ``Authorization``,
``OPENAI_API_KEY`` in an env map, ...; see ``is_credential_key``), the value
of a ``{name, value}`` header whose name does, and anything shaped like a key
or token wherever it appears (``sk-...``, ``Bearer ...``, a JWT) become
``[redacted credential]``. A frame with nothing to redact is still embedded
byte for byte.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import msgspec

log = logging.getLogger("codex_sidecar.record")

REDACTED_KEYS = frozenset(
    {
        "text",
        "delta",
        "developerInstructions",
        "baseInstructions",
        "instructions",
        "summary",
        "aggregatedOutput",
        "formattedOutput",
        "output",
        "stdout",
        "stderr",
        "content",
        "arguments",
        "prompt",
        "command",
        "query",
        "url",
        "value",
        "preview",
        "diff",
        "reason",
        "proposedExecpolicyAmendment",
    }
)
"""Keys whose string values are message text, tool I/O or images."""

_validate = msgspec.json.Decoder(msgspec.Raw)
_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


CREDENTIAL = "[redacted credential]"
_CREDENTIAL_WORDS = ("apikey", "token", "secret", "password", "passwd", "authorization", "cookie", "credential", "privatekey", "bearer", "accesskey")
_CREDENTIAL_EXACT = frozenset({"auth"})
# Key-shaped strings wherever they appear (message text included): OpenAI keys,
# bearer headers, JWTs.
_CREDENTIAL_VALUE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{8,}|\bBearer\s+[A-Za-z0-9._~+/=\-]+|\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"
)
_CREDENTIAL_VALUE_B = re.compile(_CREDENTIAL_VALUE.pattern.encode())
# In a frame that is not JSON: `"<credential key>": "<value>"` pairs.
_CREDENTIAL_PAIR_B = re.compile(
    rb'("[^"\\]*(?:' + b"|".join(w.encode() for w in _CREDENTIAL_WORDS) + rb')[^"\\]*"\s*:\s*)"(?:[^"\\]|\\.)*"', re.IGNORECASE
)
# A frame holding none of these (case-insensitively) has nothing to redact.
_CREDENTIAL_HINTS_B = tuple(w.encode() for w in ("key", "token", "secret", "passw", "auth", "cookie", "credential", "bearer", "sk-", "eyj"))
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
    return norm in _CREDENTIAL_EXACT or norm.endswith("headers") or any(w in norm for w in _CREDENTIAL_WORDS)


def redact_credentials(value: Any) -> Any:
    """``value`` with every credential replaced by ``[redacted credential]``."""
    if isinstance(value, dict):
        secret_header = any(isinstance(value.get(k), str) and is_credential_key(value[k]) for k in _NAMING_KEYS)
        out = {}
        for k, v in value.items():
            if is_credential_key(k) or (secret_header and k == "value"):
                out[k] = _all_strings(v, CREDENTIAL)
            else:
                out[k] = redact_credentials(v)
        return out
    if isinstance(value, list):
        return [redact_credentials(v) for v in value]
    if isinstance(value, str):
        return _CREDENTIAL_VALUE.sub(CREDENTIAL, value)
    return value


def _all_strings(value: Any, replacement: str) -> Any:
    if isinstance(value, str):
        return replacement
    if isinstance(value, dict):
        return {k: _all_strings(v, replacement) for k, v in value.items()}
    if isinstance(value, list):
        return [_all_strings(v, replacement) for v in value]
    return value


def may_hold_credential(line: bytes) -> bool:
    low = line.lower()
    return any(h in low for h in _CREDENTIAL_HINTS_B)


def redact_credentials_raw(line: bytes) -> bytes:
    """A frame that is not JSON, with credential pairs and key-shaped values blanked."""
    line = _CREDENTIAL_PAIR_B.sub(rb'\1"' + CREDENTIAL.encode() + rb'"', line)
    return _CREDENTIAL_VALUE_B.sub(CREDENTIAL.encode(), line)


def redact(value: Any) -> Any:
    """Replace every string under a REDACTED_KEYS key by ``"[redacted N chars]"``."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in REDACTED_KEYS and isinstance(v, str):
                out[k] = f"[redacted {len(v)} chars]"
            elif k in REDACTED_KEYS and isinstance(v, (dict, list)):
                # A list of summaries, an argv, content blocks: every string goes.
                out[k] = redact_all_strings(v)
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def redact_all_strings(value: Any) -> Any:
    if isinstance(value, str):
        return f"[redacted {len(value)} chars]"
    if isinstance(value, dict):
        return {k: redact_all_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_all_strings(v) for v in value]
    return value


class Recorder:
    def __init__(self, path: str | os.PathLike[str], *, redact: bool = False) -> None:
        self.path = os.fspath(path)
        self.redact = redact
        self.enabled = True
        self.seq = 0
        self._t0 = time.monotonic()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def record(self, direction: str, line: bytes) -> None:
        if not self.enabled:
            return
        self.seq += 1
        head = b'{"seq":%d,"t":%.6f,"dir":"%s",' % (self.seq, time.monotonic() - self._t0, direction.encode())
        try:
            _validate.decode(line)
            valid = True
        except (msgspec.DecodeError, UnicodeDecodeError):
            valid = False
        suspect = may_hold_credential(line)
        if valid and (self.redact or suspect):
            frame = _decode.decode(line)
            clean = redact_credentials(frame) if suspect else frame
            if self.redact:
                clean = redact(clean)
            body = b'"frame":' + (_encode.encode(clean) if clean != frame or self.redact else line.rstrip(b"\r")) + b"}\n"
        elif valid:
            body = b'"frame":' + line.rstrip(b"\r") + b"}\n"
        else:
            raw = redact_credentials_raw(line) if suspect else line
            body = b'"rawBase64":"' + base64.b64encode(raw) + b'"}\n'
        self._write(head + body)

    def note(self, direction: str, note: str) -> None:
        if not self.enabled:
            return
        self.seq += 1
        note = _CREDENTIAL_VALUE.sub(CREDENTIAL, note)
        rec = {"seq": self.seq, "t": round(time.monotonic() - self._t0, 6), "dir": direction, "note": note}
        self._write(_encode.encode(rec) + b"\n")

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            self.enabled = False
            log.error(
                "recording disabled: write failed",
                extra={"fields": {"path": self.path, "errno": exc.errno, "error": os.strerror(exc.errno or 0)}},
            )

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


class RecordEntry(msgspec.Struct):
    seq: int
    t: float
    dir: str
    frame: msgspec.Raw = msgspec.Raw(b"")
    rawBase64: str | None = None
    note: str | None = None

    def line(self) -> bytes | None:
        """The frame's bytes as they were on the wire (None for notes).

        Valid-JSON frames come back as recorded; whitespace inside them is
        what the peer sent, since they are embedded, not re-encoded.
        """
        if self.frame:
            return bytes(self.frame)
        if self.rawBase64 is not None:
            return base64.b64decode(self.rawBase64)
        return None


_entry_decoder = msgspec.json.Decoder(RecordEntry)


def read_recording(path: str | os.PathLike[str]) -> Iterator[RecordEntry]:
    """Records in order; a torn last line (a kill mid-write) is skipped."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            yield _entry_decoder.decode(raw)
        except msgspec.DecodeError:
            if i == len(lines) - 1:
                log.warning("recording ends in a torn line; skipped", extra={"fields": {"path": os.fspath(path)}})
                return
            raise
