"""Is the state dir usable? One check, before the relay starts, shared with ``doctor``.

A state dir the sidecar cannot use must never cost the client its
app-server: the check names the first problem (the exact path, what is
wrong, what to do) and the caller runs with less. ``readable`` says how much
less: a folder whose contents can still be read keeps the history part (the
backing-thread map, archived turns) without an engine; one that cannot be
read runs as a pure relay.

Permission bits say nothing for root, on a read-only mount or under an ACL,
so access is tried for real: each folder is listed, and a file is created
(and its space reserved, which is where a full disk shows) then removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .private import private_dir

SUBFOLDERS = ("sessions", "inspect", "ledger", "turns", "injected", "backing", "engines", "engine-tools")
"""The state dir's folders (README: "The state dir holds ...")."""

FIX_SETTING = "set state_dir (--state-dir, CODEX_SIDECAR_STATE_DIR or state_dir in the config file) to a folder this user owns"


@dataclass(frozen=True)
class StateProblem:
    path: Path
    """The exact file or folder that failed (the state dir or one inside it)."""
    reason: str
    fix: str
    readable: bool
    """True: what is there can still be read (history kept, no engine)."""
    code: str
    """Stable id of the case (``docs/errors.md``)."""

    def message(self) -> str:
        return f"state dir unusable: {self.path} {self.reason}; fix: {self.fix}"


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def _from_error(path: Path, exc: OSError, *, readable: bool, creating: bool = False) -> StateProblem:
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return StateProblem(path, "is on a full disk (no space left)", f"free space on its disk, or {FIX_SETTING} on another disk", readable, "state-full")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        path = next((a for a in (path, *path.parents) if a.exists() and not a.is_dir()), path)
        return StateProblem(path, "has a file where a folder should be", f"move that file away, or {FIX_SETTING}", False, "state-not-a-folder")
    if exc.errno == errno.EROFS:
        return StateProblem(path, "is on a read-only file system", FIX_SETTING, readable, "state-unwritable")
    if creating:
        return StateProblem(path, f"cannot be created ({_reason(exc)})", f"create it (mkdir -m 700 {path}), or {FIX_SETTING}", False, "state-cannot-create")
    if readable:
        return StateProblem(path, f"is not writable by this user ({_reason(exc)})", f"chown -R $(id -un) {path}, or {FIX_SETTING}", True, "state-unwritable")
    return StateProblem(path, f"cannot be read by this user ({_reason(exc)})", f"chown -R $(id -un) {path}, or {FIX_SETTING}", False, "state-unreadable")


def _probe_write(folder: Path, reserve: int) -> None:
    fd, name = tempfile.mkstemp(prefix=".codex-sidecar-probe-", dir=folder)
    try:
        if reserve:
            try:
                os.posix_fallocate(fd, 0, reserve)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                os.write(fd, b"\0" * reserve)  # where fallocate is not supported
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


def check_state_dir(path: str | os.PathLike[str], *, create: bool, reserve: int = 64 * 1024) -> StateProblem | None:
    """The first problem with the state dir at ``path``, or None.

    ``create``: make it (0700) when missing, as an engine would; otherwise a
    missing folder is fine when it could be created. Its folders that exist
    are listed and written to; the state dir gets ``reserve`` bytes reserved
    for a moment (0: none), so a full disk shows here and not mid-turn."""
    p = Path(path)
    if not p.exists():
        if not create:
            ancestor = next((a for a in p.parents if a.exists()), None)
            if ancestor is not None and not ancestor.is_dir():
                return StateProblem(ancestor, "is a file where a folder should be", f"move that file away, or {FIX_SETTING}", False, "state-not-a-folder")
            if ancestor is not None:
                try:
                    _probe_write(ancestor, 0)
                except OSError as exc:
                    return StateProblem(p, f"does not exist and cannot be created in {ancestor} ({_reason(exc)})", f"create it (mkdir -m 700 {p}), or {FIX_SETTING}", False, "state-cannot-create")
            return None
        try:
            private_dir(p)
        except OSError as exc:
            return _from_error(p, exc, readable=False, creating=True)
    if not p.is_dir():
        return StateProblem(p, "is a file, not a folder", f"move that file away, or {FIX_SETTING}", False, "state-not-a-folder")
    folders = [p, *(p / name for name in SUBFOLDERS)]
    for folder in folders:
        if folder != p and not os.path.lexists(folder):
            continue
        if folder != p and not folder.is_dir():
            return StateProblem(folder, "is a file where a folder should be", f"move that file away, or {FIX_SETTING}", False, "state-not-a-folder")
        try:
            os.listdir(folder)
        except OSError as exc:
            return _from_error(folder, exc, readable=False)
    for folder in folders:
        if folder != p and not folder.is_dir():
            continue
        try:
            _probe_write(folder, reserve if folder == p else 0)
        except OSError as exc:
            return _from_error(folder, exc, readable=True)
    return None
