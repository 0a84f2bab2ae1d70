"""The end-of-run check for a stale pyenv rehash lock (tests/support/pyenv_lock.py)."""

from __future__ import annotations

import os

from tests.support.pyenv_lock import lock_path, stale_lock, stamp


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.on_sleep = lambda t: None

    def now(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt
        self.on_sleep(self.t)


def test_the_lock_lives_under_pyenv_root_or_home():
    assert str(lock_path({"PYENV_ROOT": "/p"})) == "/p/shims/.pyenv-shim"
    assert str(lock_path({"HOME": "/h"})) == "/h/.pyenv/shims/.pyenv-shim"


def test_a_lock_that_appeared_during_the_run_and_stays_is_stale(tmp_path):
    lock = tmp_path / ".pyenv-shim"
    before = stamp(lock)
    lock.write_text("")
    clock = Clock()
    assert stale_lock(lock, before, now=clock.now, sleep=clock.sleep) is True
    assert clock.t >= 15.0


def test_no_lock_or_the_same_lock_as_before_is_not_the_run_s_doing(tmp_path):
    lock = tmp_path / ".pyenv-shim"
    assert stale_lock(lock, None) is False
    lock.write_text("")
    assert stale_lock(lock, stamp(lock)) is False


def test_a_lock_a_rehash_in_flight_removes_is_not_stale(tmp_path):
    lock = tmp_path / ".pyenv-shim"
    lock.write_text("")
    clock = Clock()
    clock.on_sleep = lambda t: os.unlink(lock) if t > 1.0 and lock.exists() else None
    assert stale_lock(lock, None, now=clock.now, sleep=clock.sleep) is False
    assert clock.t < 2.0
