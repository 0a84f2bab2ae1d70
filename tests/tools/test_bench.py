"""The benchmark's building blocks at a tiny size: correctness, not speed.

``make bench`` measures the relay with these same pieces; here they check
that every frame comes back through the sidecar intact and in order (no
timing is asserted anywhere).
"""

from __future__ import annotations

import contextlib
import threading

import pytest

from tools.bench import (
    MB,
    FrameMismatch,
    Peer,
    Row,
    build_rows,
    cat_argv,
    echo_child_argv,
    echo_request,
    format_table,
    notification,
    percentile,
    round_trips,
    sidecar_peer,
    stream,
    stream_frames,
)
from tools.echo_child import answer

N = 200


@contextlib.contextmanager
def watchdog(peer: Peer, seconds: float = 60.0):
    """Kill a hung peer so a blocking read ends in EOF instead of hanging the suite."""
    timer = threading.Timer(seconds, peer.proc.kill)
    timer.start()
    try:
        yield peer
    finally:
        timer.cancel()


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_frame_makers_are_exact():
    assert len(notification(1024)) == 1024
    assert len(notification(1024, seq=123456)) == 1024
    assert notification(100).endswith(b'"}}\n') and notification(100).count(b"\n") == 1
    req, want = echo_request(42, 1024)
    assert len(req) == 1024
    assert answer(req[:-1]) == want
    assert answer(notification(64)[:-1]) is None, "notifications get no answer"
    with pytest.raises(ValueError):
        notification(10)


def test_notifications_through_the_sidecar_and_cat_come_back_intact_and_in_order():
    frames = [notification(1024, seq=i) for i in range(N)]
    data = b"".join(frames)
    with sidecar_peer(cat_argv()) as peer, watchdog(peer):
        # Writes that split frames at arbitrary points, as a pipe may.
        result = stream(peer, chunked(data, 7777), N, len(data), keep=True)
    assert result.frames == N
    assert result.data == data


def test_requests_through_the_sidecar_each_get_their_own_answer_in_order():
    requests = [echo_request(i, 1024) for i in range(1, N + 1)]
    with sidecar_peer(echo_child_argv()) as peer, watchdog(peer):
        times = round_trips(peer, requests)  # compares every answer byte for byte
    assert len(times) == N and all(t > 0 for t in times)


def test_megabyte_frames_through_the_sidecar_come_back_intact():
    frames = [notification(MB, seq=i) for i in range(3)]
    data = b"".join(frames)
    with sidecar_peer(cat_argv()) as peer, watchdog(peer):
        result = stream(peer, chunked(data, 300_000), len(frames), len(data), keep=True)
    assert result.data == data


def test_throughput_mode_counts_every_frame_direct_and_proxied():
    frame = notification(1024)
    for make in (lambda: Peer(cat_argv()), lambda: sidecar_peer(cat_argv())):
        with make() as peer, watchdog(peer):
            result = stream_frames(peer, frame, N)
            assert (result.frames, result.bytes) == (N, N * len(frame))
            rss = peer.rss()
            assert rss["VmRSS"] > 0


def test_a_lost_frame_is_reported_not_counted():
    frame = notification(256)
    with Peer(cat_argv()) as peer, watchdog(peer):
        with pytest.raises(FrameMismatch):
            # Claims one frame more than it sends: the peer's EOF ends the wait.
            stream(peer, [frame * 3], 3, len(frame) * 3 + 1)


def test_the_table_has_one_row_per_metric_and_judges_targets():
    lat = {f"{who}_p{p}_us": v for p in (50, 99) for who, v in (("direct", 50.0), ("sidecar", 150.0))}
    lat |= {"added_p50_us": 100.0, "added_p99_us": 100.0}
    lat |= {"no_busy_poll_p50_us": 250.0, "no_busy_poll_added_p50_us": 200.0}
    lat |= {"sidecar_cpu_per_round_trip_us": 80.0, "no_busy_poll_cpu_per_round_trip_us": 60.0}
    tp1k = {
        "direct_frames_per_s": 500_000.0,
        "sidecar_frames_per_s": 40_000.0,
        "memory": {"framesAfterWarmup": 1_000_000, "growth_mib": 1.5, "rss_after_warmup_kib": 60_000,
                   "rss_after_kib": 61_536, "peak_rss_kib": 70_000},
    }
    tp1m = {"direct_mb_per_s": 900.0, "sidecar_mb_per_s": 300.0}
    rows = build_rows(lat, lat, tp1k, tp1m)
    assert [r.passed for r in rows] == [True, None, None, None, None, None, False, True, True]
    assert "+200.0 µs with --busy-poll-us 0" in rows[2].note and "60 µs" in rows[3].note
    assert rows[0].ratio == pytest.approx(3.0)
    table = format_table(rows)
    assert len(table.splitlines()) == 2 + len(rows)
    assert "FAIL" in table and "PASS" in table
    assert Row("x", None, 1.0, "-", None).ratio is None


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile([7.0], 99) == 7.0
