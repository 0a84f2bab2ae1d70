"""sidecar.history.starts: a client's thread list that Codex answered while a
thread the sidecar starts for itself was unanswered waits for that answer,
and goes on filtered with what it made known (no processes, no clock).

Through :class:`BackingThreads`, the edge that holds the rule: what the relay
asks of it and what it hands back (the relay itself: tests/relay/test_router.py;
with the fake app-server: test_lists_during_own_starts.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.history.backing import BackingThreads
from sidecar.history.starts import OwnStarts
from sidecar.methods import METHODS
from sidecar.rows import thread_id_keys

CLIENT = "01a20000-0000-7000-8000-000000000001"  # the client's thread
NEW = "01a20000-0000-7000-8000-000000000003"  # the client's own start, in flight
OWNED = "01a20000-0000-7000-8000-00000000000c"  # a completion or spare thread


def line(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def edge(tmp_path, wait: float = 7.0) -> BackingThreads:
    return BackingThreads(tmp_path, thread_id_keys(METHODS), list_wait=wait)


def test_a_list_answered_while_the_sidecars_start_is_unanswered_waits_and_goes_on_without_its_thread(tmp_path):
    b = edge(tmp_path)
    b.sidecar_request("codex-sidecar:1", "thread/start")
    loaded = line({"id": 4, "result": {"data": [CLIENT, OWNED], "nextCursor": None}})
    assert b.hold("thread/loaded/list", loaded) == 7.0
    b.own(OWNED, lambda _line: None)  # the start's answer read: its on_result ran
    assert b.sidecar_answered("codex-sidecar:1") == [loaded]
    assert json.loads(b.response(loaded, "thread/loaded/list"))["result"]["data"] == [CLIENT]


def test_a_spares_start_holds_thread_list_too(tmp_path):
    b = edge(tmp_path)
    b.remember_start(CLIENT, {})
    b.sidecar_request("codex-sidecar:2", "thread/start")
    listed = line({"id": 5, "result": {"data": [{"id": OWNED}, {"id": CLIENT}], "nextCursor": None}})
    assert b.hold("thread/list", listed) is not None
    b.note_spare(CLIENT, OWNED)
    assert b.sidecar_answered("codex-sidecar:2") == [listed]
    assert [e["id"] for e in json.loads(b.response(listed, "thread/list"))["result"]["data"]] == [CLIENT]


def test_nothing_waits_without_an_own_start_unanswered_nor_any_other_answer(tmp_path):
    b = edge(tmp_path)
    assert b.hold("thread/loaded/list", "a") is None
    b.sidecar_request("codex-sidecar:1", "thread/read")  # reads and other calls open no thread
    b.sidecar_request("codex-sidecar:2", "thread/unsubscribe")
    assert b.hold("thread/loaded/list", "b") is None
    b.sidecar_request("codex-sidecar:3", "thread/start")
    assert b.hold("thread/read", "c") is None
    assert b.hold("turn/start", "d") is None
    assert b.sidecar_answered("codex-sidecar:1") == []


def test_a_client_start_in_flight_is_never_hidden(tmp_path):
    """Codex's list names the client's new thread before the sidecar knows
    of it: unknown is not owned, it stays."""
    b = edge(tmp_path)
    b.sidecar_request("codex-sidecar:1", "thread/start")
    loaded = line({"id": 4, "result": {"data": [CLIENT, NEW, OWNED], "nextCursor": None}})
    assert b.hold("thread/loaded/list", loaded) is not None
    b.own(OWNED, lambda _line: None)
    assert b.sidecar_answered("codex-sidecar:1") == [loaded]
    assert json.loads(b.response(loaded, "thread/loaded/list"))["result"]["data"] == [CLIENT, NEW]
    # With no start of the sidecar's in flight, the client's goes through at once.
    again = line({"id": 5, "result": {"data": [CLIENT, NEW], "nextCursor": None}})
    assert b.hold("thread/loaded/list", again) is None
    assert b.response(again, "thread/loaded/list") is again


def test_an_error_answer_to_the_sidecars_start_releases_the_list_as_it_is(tmp_path):
    b = edge(tmp_path)
    b.sidecar_request("codex-sidecar:1", "thread/start")
    loaded = line({"id": 4, "result": {"data": [CLIENT], "nextCursor": None}})
    b.hold("thread/loaded/list", loaded)
    assert b.sidecar_answered("codex-sidecar:1") == [loaded]  # refused: no thread to hide
    assert b.response(loaded, "thread/loaded/list") is loaded


def test_an_answer_waits_only_for_the_starts_unanswered_when_it_came():
    s: OwnStarts[str] = OwnStarts(5.0)
    s.requested("s1", "thread/start")
    s.hold("thread/list", "first")
    s.requested("s2", "thread/start")  # sent after Codex wrote "first": never in it
    s.hold("thread/loaded/list", "second")
    assert s.answered("s1") == ["first"]
    assert s.answered("s2") == ["second"]
    assert s.waiting == [] and s.starts == set() and s.held == 2


def test_an_overdue_answer_goes_on_as_it_is_and_its_start_is_given_up(logs):
    s: OwnStarts[str] = OwnStarts(5.0)
    s.requested("s1", "thread/start")
    s.hold("thread/loaded/list", "first")
    s.hold("thread/loaded/list", "second")  # waits for s1 only: given up with it
    s.requested("s2", "thread/fork")
    s.hold("thread/list", "third")
    assert s.overdue("first") == ["first", "second"]
    assert s.starts == {"s2"}
    assert s.hold("thread/list", "fourth") is not None  # s2 still counts, s1 no more
    assert s.overdue("first") == []  # gone already: nothing
    assert s.answered("s1") == []  # a late answer to a start given up
    assert s.answered("s2") == ["third", "fourth"]
    assert s.held == 4 and s.overdue_count == 2, "both answers that went on unfiltered count, not just the one whose wait ran out"
    [record] = [r for r in logs.records if "thread list answered before" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert record.fields == {"method": "thread/loaded/list", "unanswered": 1, "answers": 2, "waitSeconds": 5.0}


def test_codex_gone_releases_every_held_answer_in_order():
    s: OwnStarts[str] = OwnStarts(5.0)
    s.requested("s1", "thread/start")
    s.hold("thread/list", "a")
    s.hold("thread/loaded/list", "b")
    assert s.release_all() == ["a", "b"]
    assert s.hold("thread/list", "c") is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "hold", "answer", "overdue"]), st.integers(0, 3)), max_size=40))
def test_held_answers_go_on_once_each_in_the_order_they_came(steps):
    s: OwnStarts[int] = OwnStarts(1.0)
    held: list[int] = []
    out: list[int] = []
    for n, (step, k) in enumerate(steps):
        if step == "send":
            s.requested(f"s{k}", "thread/start")
        elif step == "hold" and s.hold("thread/list", n) is not None:
            held.append(n)
        elif step == "answer":
            out += s.answered(f"s{k}")
        elif step == "overdue" and held:
            out += s.overdue(held[k % len(held)])
    out += s.release_all()
    assert out == held
