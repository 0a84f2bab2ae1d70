"""A session imports trio without the ``ldconfig -p`` that trio's import
runs to find ``pthread_setname_np``, and trio still names its threads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sidecar.trio_import import libc_with_pthreads

PROBE = """
import json, subprocess, sys
started = []
real_init = subprocess.Popen.__init__
def record(self, args, *a, **k):
    started.append(args if isinstance(args, str) else list(map(str, args)))
    real_init(self, args, *a, **k)
subprocess.Popen.__init__ = record
import ctypes.util
before = ctypes.util.find_library
{how}
import trio, threading
from trio._core import _thread_cache
names = []
async def main():
    await trio.to_thread.run_sync(lambda: names.append(open(f"/proc/self/task/{{threading.get_native_id()}}/comm").read().strip()))
trio.run(main)
print(json.dumps({{"started": started, "restored": ctypes.util.find_library is before,
                   "named": _thread_cache.set_os_thread_name is not None, "thread": names[0]}}))
"""


def probe(how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(how=how)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(libc_with_pthreads() is None, reason="libc without the pthread functions (glibc < 2.34, musl): trio is imported as it is")
def test_trio_is_imported_without_running_ldconfig_and_still_names_its_threads():
    plain = probe("import trio")
    assert any("ldconfig" in " ".join(argv) for argv in plain["started"])  # what is avoided, still there
    got = probe("from sidecar.trio_import import import_trio; import_trio()")
    assert got["started"] == []
    assert got["restored"] is True
    assert got["named"] is True
    assert got["thread"] == plain["thread"]  # named after its job, as trio names it
    assert not got["thread"].startswith("python")  # an unnamed thread has the process's name


@pytest.mark.parametrize(
    ("version", "expected"),
    [("glibc 2.36", "libc.so.6"), ("glibc 2.34", "libc.so.6"), ("glibc 2.33", None), ("glibc 2.17", None), ("", None), ("musl 1.2", None), ("glibc x.y", None)],
)
def test_only_a_glibc_whose_libc_has_the_pthread_functions_is_named(monkeypatch, version, expected):
    monkeypatch.setattr("os.confstr", lambda name: version)
    assert libc_with_pthreads() == expected


def test_a_system_without_confstr_imports_trio_as_it_is(monkeypatch):
    def missing(name):
        raise ValueError("unrecognized configuration name")

    monkeypatch.setattr("os.confstr", missing)
    assert libc_with_pthreads() is None
