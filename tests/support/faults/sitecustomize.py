"""Injected file-system faults for the state-dir tests (the suite runs as root,
for whom permission bits never fail): put this folder first on PYTHONPATH and
set ``CODEX_SIDECAR_TEST_FAULTS`` to a JSON list of ``{"op", "path", "errno"}``.

``op`` is ``listdir`` (listing a folder: unreadable), ``create`` (creating a
file or folder in it, and ``access(W_OK)``: unwritable; ``EROFS`` also marks
its file system read-only), or ``full`` (``statvfs``: no space left).
``path`` is the folder (exactly), ``errno`` a name such as ``EACCES``.
"""

import errno
import json
import os

_FAULTS = json.loads(os.environ.get("CODEX_SIDECAR_TEST_FAULTS") or "[]")


def _fault(op, folder):
    folder = os.path.abspath(os.fsdecode(folder))
    return next((f for f in _FAULTS if f["op"] == op and folder == os.path.abspath(f["path"])), None)


def _fail(op, folder):
    f = _fault(op, folder)
    if f is not None:
        code = getattr(errno, f["errno"])
        raise OSError(code, os.strerror(code), os.fsdecode(folder))


if _FAULTS:
    _listdir, _scandir, _mkdir, _open, _access, _statvfs = os.listdir, os.scandir, os.mkdir, os.open, os.access, os.statvfs

    def listdir(path="."):
        _fail("listdir", path)
        return _listdir(path)

    def scandir(path="."):
        _fail("listdir", path)
        return _scandir(path)

    def mkdir(path, mode=0o777, *, dir_fd=None):
        _fail("create", os.path.dirname(os.path.abspath(os.fsdecode(path))))
        return _mkdir(path, mode, dir_fd=dir_fd)

    def open(path, flags, mode=0o777, *, dir_fd=None):  # noqa: A001
        if flags & os.O_CREAT and isinstance(path, (str, bytes, os.PathLike)):
            _fail("create", os.path.dirname(os.path.abspath(os.fsdecode(path))))
        return _open(path, flags, mode, dir_fd=dir_fd)

    def access(path, mode, **kw):
        if mode & os.W_OK and isinstance(path, (str, bytes, os.PathLike)) and _fault("create", path):
            return False
        return _access(path, mode, **kw)

    def statvfs(path):
        st = _statvfs(path)
        fields = [st.f_bsize, st.f_frsize, st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree, st.f_favail, st.f_flag, st.f_namemax]
        if _fault("full", path):
            fields[3] = fields[4] = 0
        created = _fault("create", path)
        if created and created["errno"] == "EROFS":
            fields[8] |= os.ST_RDONLY
        return os.statvfs_result(fields)

    os.listdir, os.scandir, os.mkdir, os.open, os.access, os.statvfs = listdir, scandir, mkdir, open, access, statvfs
