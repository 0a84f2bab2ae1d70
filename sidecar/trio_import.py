"""trio, imported without the ``ldconfig -p`` its import runs.

trio names its worker threads with ``pthread_setname_np`` and looks for the
library that has it while ``trio._core._thread_cache`` is imported:
``ctypes.util.find_library("pthread")``, which on Linux starts
``/sbin/ldconfig -p`` and reads all of its output: ~2 ms on an idle machine,
up to ~17 ms of a session's start-up while codex boots on the other core
(before the relay can answer anything, paid on every OpenClaw turn).

On glibc 2.34 and later the pthread functions are in libc itself, which the
process has loaded already, so :func:`import_trio` answers that one question
with ``libc.so.6`` for the length of the import, and trio names its threads
as before. Elsewhere (an older glibc, musl, another system) trio is imported
as it is. (Where glibc names its libc otherwise, ``libc.so.6.1`` on alpha
and ia64, trio then finds no ``pthread_setname_np`` and leaves its threads
unnamed; nothing else changes.)

Call it before any other thread starts (the session does, first thing): the
patch is process-wide for the length of the import.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

GLIBC_WITH_PTHREADS = (2, 34)
"""The first glibc whose libc holds the pthread functions."""


def libc_with_pthreads() -> str | None:
    """The name to open for ``pthread_setname_np`` when libc itself has it
    (glibc >= 2.34), else None (then ``find_library`` is asked)."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, OSError, ValueError):  # not glibc, or no confstr
        return None
    name, _, number = version.partition(" ")
    if name != "glibc":
        return None
    try:
        release = tuple(int(part) for part in number.split(".")[:2])
    except ValueError:
        return None
    return "libc.so.6" if release >= GLIBC_WITH_PTHREADS else None


def import_trio() -> ModuleType:
    """``import trio``, without the ``ldconfig`` run where libc has the
    pthread functions; ``ctypes.util.find_library`` is itself again after."""
    if "trio" in sys.modules:  # imported, or being imported: the import lock decides
        import trio

        return trio
    libc = libc_with_pthreads()
    if libc is None:
        import trio

        return trio
    import ctypes.util

    find_library = ctypes.util.find_library

    def pthread_in_libc(name: str) -> str | None:
        return libc if name == "pthread" else find_library(name)

    ctypes.util.find_library = pthread_in_libc
    try:
        import trio
    finally:
        ctypes.util.find_library = find_library
    return trio
