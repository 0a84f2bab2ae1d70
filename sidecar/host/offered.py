"""Which engine tools each client thread was given.

Codex keeps a thread's dynamic tools with the thread (a resume, in this
process or a later one, offers them again), so the sidecar must know,
for as long as the thread lives, which of its tool names are the engine's
(answered here, hidden from the client) and which the client's. One small
JSON file per thread under ``<state_dir>/engine-tools/``, written (fsync,
rename) when Codex answers the ``thread/start`` that offered them; read
back on first use after a restart. A thread with no file was offered
nothing: every call on it is the client's.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from ..store.private import private_dir

log = logging.getLogger("codex_sidecar.host")

_THREAD_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,127}")
NONE: frozenset[str] = frozenset()


class OfferedTools:
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir) / "engine-tools"
        self._known: dict[str, frozenset[str]] = {}

    def _path(self, thread_id: str) -> Path | None:
        return self.dir / f"{thread_id}.json" if _THREAD_ID.fullmatch(thread_id) else None

    def get(self, thread_id: str) -> frozenset[str]:
        """The engine's tool names on the thread (read from disk once)."""
        names = self._known.get(thread_id)
        if names is None:
            names = self._known[thread_id] = self._read(thread_id)
        return names

    def note(self, thread_id: str, names: frozenset[str]) -> None:
        """In memory at once (calls may follow before the file is written)."""
        self._known[thread_id] = names

    def _read(self, thread_id: str) -> frozenset[str]:
        path = self._path(thread_id)
        if path is None:
            return NONE
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return NONE
        except (OSError, ValueError) as exc:
            log.warning("unreadable engine-tools record ignored", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})
            return NONE
        names = data.get("names") if isinstance(data, dict) else None
        return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else NONE

    def write(self, thread_id: str, names: frozenset[str]) -> None:
        """Durably (temporary file, fsync, rename); blocking: run it in a worker."""
        path = self._path(thread_id)
        if path is None:
            return
        private_dir(self.dir)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps({"names": sorted(names)}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
