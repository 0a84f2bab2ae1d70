"""sidecar.store.private: every folder the sidecar creates under the state dir is 0700."""

from __future__ import annotations

import os
import stat

import pytest

from sidecar.store.inspect import append_record, inspect_path
from sidecar.store.ledger import Ledger, ledger_path
from sidecar.store.private import private_dir


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)  # what most login shells use: mkdir makes 0755
    yield
    os.umask(old)


def modes(root, leaf):
    out = {}
    p = leaf
    while True:
        out[str(p.relative_to(root.parent))] = stat.S_IMODE(os.stat(p).st_mode)
        if p == root:
            return out
        p = p.parent


def test_private_dir_makes_each_missing_folder_0700_and_leaves_existing_ones(tmp_path, loose_umask):
    existing = tmp_path / "home"
    existing.mkdir(mode=0o755)
    leaf = existing / "state" / "a" / "b"
    private_dir(leaf)
    assert set(modes(existing / "state", leaf).values()) == {0o700}
    assert stat.S_IMODE(os.stat(existing).st_mode) == 0o755, "a folder that was there is not touched"
    private_dir(leaf)  # again: nothing to do, no error


def test_the_ledger_creates_the_state_dir_private(tmp_path, loose_umask):
    state = tmp_path / "state"
    led = Ledger(ledger_path(state, "thread-1"))
    led.turn("t1", [("a", 3)], reset=True, turns=["t1"], rebuilds=0, force=False, epoch=None)
    led.reset(led.load())
    folders = [p for p in state.rglob("*") if p.is_dir()] + [state]
    assert folders and {stat.S_IMODE(os.stat(p).st_mode) for p in folders} == {0o700}


def test_an_inspection_record_creates_the_state_dir_private(tmp_path, loose_umask):
    state = tmp_path / "state"
    append_record(inspect_path(state, "thread-1"), {"turn": 1})
    folders = [p for p in state.rglob("*") if p.is_dir()] + [state]
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in folders} == {0o700}
