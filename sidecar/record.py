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
a key that names one (``apiKey``, ``accessToken``, ``Authorization``, header
maps; see ``is_credential_key``), the value of a ``{name, value}`` header
whose name does, and whatever the rules of the ``detect-secrets`` scanner
find in any string (``engines.scrub``, the scanner the engines share: ``ghp_...``, AWS keys, ``X-Api-Key:``
in a command, ``password`` in a tool call's JSON-string arguments, a private
key block...) become ``[redacted credential]``. A frame with nothing to
redact is still embedded byte for byte.
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

from engines.scrub import CREDENTIAL, CREDENTIAL_WORDS, anywhere, is_credential_key, redact_credentials, scrub

log = logging.getLogger("codex_sidecar.record")

__all__ = [
    "CREDENTIAL",
    "REDACTED_KEYS",
    "RecordEntry",
    "Recorder",
    "is_credential_key",
    "read_recording",
    "redact",
    "redact_all_strings",
    "redact_credentials",
    "redact_credentials_raw",
]

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


# In a frame that is not JSON: `"<credential key>": "<value>"` pairs.
_CREDENTIAL_PAIR_B = re.compile(rb'("[^"\\]*(?:' + b"|".join(w.encode() for w in CREDENTIAL_WORDS) + rb')[^"\\]*"\s*:\s*)"(?:[^"\\]|\\.)*"', re.IGNORECASE)
# Key names that may call for a look: the protocol's credential keys and the
# secret scanner's keywords (``pwd``, ``contraseña``...).
_KEY_HINTS_B = tuple(w.encode() for w in ("key", "token", "secret", "passw", "pwd", "auth", "cookie", "credential", "bearer", "contrase", "headers"))


def _may_hold_credential(line: bytes, frame: Any) -> bool:
    """A cheap look before the walk: a key that may name a credential, or
    anything the scanner finds in the frame's strings taken together."""
    low = line.lower()
    if any(h in low for h in _KEY_HINTS_B):
        return True
    texts: list[str] = []
    _strings(frame, texts)
    return anywhere(texts)


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def redact_credentials_raw(line: bytes) -> bytes:
    """A frame that is not JSON, with credential pairs and what the scanner finds blanked."""
    line = _CREDENTIAL_PAIR_B.sub(rb'\1"' + CREDENTIAL.encode() + rb'"', line)
    return scrub(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


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
        if valid:
            frame = _decode.decode(line)
            clean = redact_credentials(frame) if _may_hold_credential(line, frame) else frame
            if self.redact:
                clean = redact(clean)
            body = b'"frame":' + (_encode.encode(clean) if clean != frame or self.redact else line.rstrip(b"\r")) + b"}\n"
        else:
            body = b'"rawBase64":"' + base64.b64encode(redact_credentials_raw(line)) + b'"}\n'
        self._write(head + body)

    def note(self, direction: str, note: str) -> None:
        if not self.enabled:
            return
        self.seq += 1
        note = scrub(note)
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
