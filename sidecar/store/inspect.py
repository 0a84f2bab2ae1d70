"""Per-turn inspection records: what the engine assembled and what went where.

One JSONL file a thread, ``<state_dir>/inspect/<thread id>.jsonl`` (0600),
one record a finalised turn: projection mode and epoch, the assembled
messages (role and size), the channels the sidecar injected through, the
turn input's size before and after projection, the budget, the input tokens
Codex reported for the turn. Fields are only ever added: old records stay
readable. A record is read back as the JSON object it is (``codex-sidecar
inspect`` shows what was written), decoded by a typed decoder that also
checks the members the sidecar itself reads (:class:`InspectRecord`); a line
that does not decode is reported with its file and line and skipped.

Beside it, ``<state_dir>/inspect-text/<thread id>.jsonl`` (0600): per turn
that has any, the text a projection put into the ``turn/start`` (``sent``)
and the engine's tool calls with their answers (``engineTools``), bounded,
for ``codex-sidecar view`` (the state dir holds the transcript's text
anyway). A file of its own, so the records stay small for the reads at a
session's opening (:meth:`InspectLog.last`), and the text can be removed
without them. ``codex-sidecar inspect THREAD`` and
``sidecar/inspect`` read it. Appends are single writes (see the mirror), so a
kill leaves at most a torn last line, which reading skips.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from .mirror import session_path
from .private import private_dir
from .records import skipped

_encode = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


def inspect_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """Beside the session mirrors; the same id rules (no path tricks)."""
    return Path(state_dir) / "inspect" / session_path(state_dir, thread_id).name


def inspect_text_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """The thread's per-turn text (``sent``, ``engineTools``), beside the records."""
    return Path(state_dir) / "inspect-text" / session_path(state_dir, thread_id).name


def append_record(path: Path, record: object) -> bool:
    """Append one JSON line in one write (0600 file, 0700 folder); best
    effort: an error is swallowed (False), the caller's turn goes on.

    A file that ends in a torn line (a kill or a full disk in the middle of
    an earlier write) gets its newline first, so the torn line stays the only
    one lost and this record is not glued onto it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # the folder, once a thread (not a mkdir every turn)
            private_dir(path.parent)
            fd = os.open(path, flags, 0o600)
        try:
            size = os.fstat(fd).st_size
            torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
            os.write(fd, (b"\n" if torn else b"") + _encode.encode(record) + b"\n")
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def decode_records(data: bytes) -> list[Any]:
    """The JSON lines of ``data``; a torn line (a kill mid-write) is skipped."""
    out = []
    for raw in data.split(b"\n"):
        if raw.strip():
            try:
                out.append(_decode.decode(raw))
            except msgspec.DecodeError:
                continue
    return out


class InspectRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The members of a record the sidecar reads back (a session's opening
    reads the last record of an older state dir's thread for its ledger);
    the others are shown as written."""

    turn_id: str | None = None
    rebuilds: int | None = None
    force_rebuild: bool | None = None
    rebuilding: bool | None = None


_object = msgspec.json.Decoder(dict[str, Any])


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of an inspect file, in order: JSON objects whose members
    the sidecar reads have their types; any other line (a torn one, a
    foreign one) is reported by file and line and skipped. No file: none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = _object.decode(raw)
            msgspec.convert(record, InspectRecord)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            skipped(path, number, exc)
            continue
        out.append(record)
    return out


class InspectLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        append_record(self.path, record)  # inspection is best-effort

    def append_text(self, record: dict[str, Any]) -> None:
        """A turn's text (``turnId``, ``sent``, ``engineTools``), in
        ``inspect-text/`` beside ``inspect/``; best-effort too."""
        append_record(self.path.parent.parent / "inspect-text" / self.path.name, record)

    def records(self) -> list[dict[str, Any]]:
        """Per-turn records, in order (ledger markers left out)."""
        return [r for r in self._all() if "turnId" in r]

    def _all(self) -> list[dict[str, Any]]:
        return read_records(self.path)

    def last(self) -> dict[str, Any] | None:
        """The last record, a "rebuilding" marker included."""
        records = self._all()
        return records[-1] if records else None
