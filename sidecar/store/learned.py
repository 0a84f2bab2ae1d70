"""The journal of what the sidecar learned about each session's threads.

One JSONL journal a session, ``<state_dir>/learned/<session key>.jsonl``
(0600, folder 0700; a key that is not a plain id is named by its SHA-256).
Each entry (:class:`~sidecar.thread.learned.LearnedEntry`, the machine's record) is one ``O_APPEND`` write made when a
thread's :class:`~sidecar.thread.state.LearnedMachine` asks for it, before
the change is relied on: once the write returns, a SIGKILL cannot lose it (a
kill in the middle of a write tears at most that last line, which reading
reports and skips). Entries are written only when a fact changes (a window,
a thread's tools, the session's bootstrap), so a journal holds a handful of
lines.

The file and its record only: the shell that feeds the machines and writes
what they ask for is :class:`sidecar.lifecycle.learned.LearnedFacts`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

import msgspec

from ..thread.learned import LearnedEntry
from .inspect import append_record
from .records import decode_lines

log = logging.getLogger("codex_sidecar.store")

_PLAIN = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")


_decoder = msgspec.json.Decoder(LearnedEntry)


def learned_path(state_dir: str | os.PathLike[str], session_key: str) -> Path:
    """The session's journal; a key that is not a plain id (a template's
    colons, slashes) is named by its digest, so no key escapes the folder."""
    name = session_key if _PLAIN.fullmatch(session_key) else "k-" + hashlib.sha256(session_key.encode()).hexdigest()[:40]
    return Path(state_dir) / "learned" / f"{name}.jsonl"


def read_journal(path: Path) -> list[LearnedEntry]:
    """The journal's entries; a line that does not decode is reported (file
    and line) and skipped; no file: none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("learned-state journal unreadable; starting from nothing", extra={"fields": {"file": str(path), "error": type(exc).__name__}})
        return []
    return decode_lines(data, _decoder, path)


def append_entry(path: Path, entry: LearnedEntry) -> bool:
    """Append one entry in one write (best effort: False when it failed)."""
    return append_record(path, entry)
