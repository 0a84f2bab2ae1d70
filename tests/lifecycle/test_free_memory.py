"""The sidecar hands the C allocator's free memory back to the system."""

from __future__ import annotations

import os

from sidecar.lifecycle.finalize import release_free_memory


def _rss_kb() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_freed_holes_between_live_allocations_leave_the_resident_set_once_released():
    # ~60 MB in 20 KB blocks with a small block kept between each two: once
    # the large ones go, their room is free but stays resident (no free
    # room at the heap's top to give back).
    large, kept = [], []
    for _ in range(3_000):
        large.append(bytearray(20_000))
        kept.append(bytearray(600))
    for block in large:
        block[::4096] = b"x" * len(block[::4096])  # touched: resident
    del large
    before = _rss_kb()
    assert release_free_memory() is True
    after = _rss_kb()
    assert before - after > 30_000, (before, after)
    assert len(kept) == 3_000
