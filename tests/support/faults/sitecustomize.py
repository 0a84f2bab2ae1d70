"""Injected file-system faults for the state-dir tests (the suite runs as root,
for whom permission bits never fail): put this folder first on PYTHONPATH and
set ``CODEX_SIDECAR_TEST_FAULTS`` to a JSON list of ``{"op", "path", "errno"}``.

``op`` is ``listdir`` (listing a folder: unreadable), ``create`` (creating a
file or folder in it: unwritable), or ``fallocate`` (reserving space for a
file in it: a full disk). ``path`` is the folder (exactly), ``errno`` a name
such as ``EACCES`` or ``ENOSPC``.
"""

import errno
import json
import os

_FAULTS = json.loads(os.environ.get("CODEX_SIDECAR_TEST_FAULTS") or "[]")


def _fail(op, folder):
    folder = os.path.abspath(os.fsdecode(folder))
    for f in _FAULTS:
        if f["op"] == op and folder == os.path.abspath(f["path"]):
            code = getattr(errno, f["errno"])
            raise OSError(code, os.strerror(code), folder)


if _FAULTS:
    _listdir, _scandir, _mkdir, _open, _fallocate = os.listdir, os.scandir, os.mkdir, os.open, os.posix_fallocate

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

    def posix_fallocate(fd, offset, length):
        _fail("fallocate", os.path.dirname(os.readlink(f"/proc/self/fd/{fd}")))
        return _fallocate(fd, offset, length)

    os.listdir, os.scandir, os.mkdir, os.open, os.posix_fallocate = listdir, scandir, mkdir, open, posix_fallocate
