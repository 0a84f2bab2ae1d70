"""Is the state dir usable? One check, before the relay starts, shared with ``doctor``.

A state dir the sidecar cannot use must never cost the client its
app-server: the check names the first problem (the exact path, what is
wrong, what to do) and the caller runs with less. ``readable`` says how much
less: a folder whose contents can still be read keeps the history part (the
backing-thread map, archived turns) without an engine; one that cannot be
read runs as a pure relay.

Each folder is listed for real; whether this user may write in it is
``access(2)``'s answer (this user, ACLs, read-only mounts); a full disk is
``statvfs``'s free space. Nothing is written: the check costs well under a
millisecond at every start, and a legacy sidecar stays invisible.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import msgspec

from .private import private_dir

SUBFOLDERS = ("sessions", "inspect", "inspect-text", "ledger", "turns", "injected", "backing", "engines", "engine-tools")
"""The state dir's folders (README: "The state dir holds ...")."""

FIX_SETTING = "set state_dir (--state-dir, CODEX_SIDECAR_STATE_DIR or state_dir in the config file) to a folder this user owns"


class StateProblem(msgspec.Struct, frozen=True):
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
    if creating or exc.errno == errno.ENOENT:  # ENOENT on a folder's creation: the file system refuses (/proc)
        return StateProblem(path, f"cannot be created ({_reason(exc)})", f"create it (mkdir -m 700 {path}), or {FIX_SETTING}", False, "state-cannot-create")
    if readable:
        return StateProblem(path, f"is not writable by this user ({_reason(exc)})", f"chown -R $(id -un) {path}, or {FIX_SETTING}", True, "state-unwritable")
    return StateProblem(path, f"cannot be read by this user ({_reason(exc)})", f"chown -R $(id -un) {path}, or {FIX_SETTING}", False, "state-unreadable")


def _unwritable(folder: Path) -> OSError | None:
    """Why this user cannot create files in ``folder``, or None. ``access``
    answers for this user, ACLs and read-only mounts included (root passes
    permission bits, as the kernel would let it)."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), str(folder))
    return OSError(errno.EACCES, os.strerror(errno.EACCES), str(folder))


def _full(folder: Path, reserve: int) -> OSError | None:
    """ENOSPC when ``folder``'s disk has less than ``reserve`` bytes, or no
    inode, left for this user (root may use the blocks kept for it)."""
    st = os.statvfs(folder)
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    if blocks * st.f_frsize < reserve or (st.f_files and st.f_favail == 0):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
    return None


def _unenterable(p: Path, exc: OSError) -> StateProblem:
    """The state dir cannot even be looked up: name the folder above it that
    this user may not enter (the first whose entry cannot be looked at)."""
    blocked = p.parent
    for a in [*reversed(p.parents), p][1:]:
        try:
            os.stat(a)
        except OSError:
            blocked = a.parent
            break
    return StateProblem(
        p,
        f"is inside {blocked}, which this user cannot enter ({_reason(exc)})",
        f"let this user into {blocked} (chmod o+x, or an ACL), or {FIX_SETTING}",
        False,
        "state-unreadable",
    )


def state_dir_problem(path: str | os.PathLike[str], *, create: bool, reserve: int = 64 * 1024, missing_ok: bool = False) -> StateProblem | None:
    """The first problem with the state dir at ``path``, or None.

    ``create``: make it (0700) when missing, as an engine would; otherwise a
    missing folder is fine when it could be created. Its folders that exist
    must be listable and writable, and its disk must have ``reserve`` bytes
    free, so a full disk shows here and not mid-turn. ``missing_ok``: a
    missing state dir is no problem at all (a legacy sidecar, which has
    nothing to read there and writes nothing)."""
    p = Path(path)
    try:
        exists = p.exists()
    except OSError as closed:  # a folder above it this user cannot enter (another user's 0700 home)
        return _unenterable(p, closed)
    if not exists:
        if missing_ok:
            return None
        if not create:
            ancestor = next((a for a in p.parents if a.exists()), None)
            if ancestor is not None and not ancestor.is_dir():
                return StateProblem(ancestor, "is a file where a folder should be", f"move that file away, or {FIX_SETTING}", False, "state-not-a-folder")
            if ancestor is not None:
                exc = _unwritable(ancestor)
                if exc is not None:
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
        denied = _unwritable(folder)
        if denied is not None:
            return _from_error(folder, denied, readable=True)
    full = _full(p, reserve)
    return _from_error(p, full, readable=True) if full is not None else None
