"""The conformance suite's normaliser (a pure function): what it hides and,
as much, what it must not hide."""

from __future__ import annotations

from tests.conformance.normalise import canonical, differences, normalise, per_thread

T1 = "01a21b43-2dd3-7503-8e70-32e28f60f1dc"
T2 = "01a21b43-2de5-7f81-8d6c-630ade2e253a"
T3 = "01a21b43-3a02-7e51-92e1-ae1ad0816163"


def started(thread: str, turn: str, at: int = 1795753717251) -> dict:
    return {"method": "turn/started", "params": {"threadId": thread, "turn": {"id": turn, "startedAt": at}}, "emittedAtMs": at}


def test_ids_become_placeholders_by_first_appearance_and_clocks_markers():
    a = normalise([started(T1, T2, 1), started(T1, T2, 2)])
    b = normalise([started(T3, T1, 3), started(T3, T1, 4)])
    assert a == b
    assert a[0]["params"]["threadId"] == "<id0>" and a[0]["params"]["turn"]["id"] == "<id1>"
    assert a[0]["emittedAtMs"] == a[0]["params"]["turn"]["startedAt"] == "<time>"


def test_the_same_id_twice_is_not_the_same_as_two_ids():
    same = normalise([started(T1, T2), started(T1, T2)])
    two = normalise([started(T1, T2), started(T1, T3)])
    assert same != two


def test_content_order_and_errors_are_kept():
    base = [started(T1, T2), {"id": 3, "error": {"code": -32600, "message": "no active turn to interrupt"}}]
    assert normalise(base) != normalise([started(T1, T2), {"id": 3, "result": {}}])
    assert normalise(base) != normalise(list(reversed(base)))
    texts = [{"method": "item/agentMessage/delta", "params": {"delta": t}} for t in ("a", "b")]
    assert normalise(texts) != normalise(list(reversed(texts)))


def test_roots_ports_digests_fake_model_ids_and_cursors_are_masked():
    one = {"id": 1, "result": {"cwd": "/tmp/x1/work", "url": "http://127.0.0.1:4101/v1", "v": "sha256:" + "a" * 64, "item": "msg_fake_3", "nextCursor": "abc"}}
    two = {"id": 1, "result": {"cwd": "/tmp/x2/work", "url": "http://127.0.0.1:5202/v1", "v": "sha256:" + "b" * 64, "item": "msg_fake_9", "nextCursor": "codex-sidecar:wrap"}}
    assert normalise([one], ["/tmp/x1"]) == normalise([two], ["/tmp/x2"])
    assert normalise([one], ["/tmp/x1"])[0]["result"]["cwd"] == "<root>/work"
    assert normalise([{"id": 1, "result": {"nextCursor": None}}]) != normalise([{"id": 1, "result": {"nextCursor": "x"}}])  # the end of a listing shows


def test_map_keys_that_are_ids_are_normalised_too():
    a = normalise([{"id": 1, "result": {"readStates": {T1: {"revision": T2}}}}])
    b = normalise([{"id": 1, "result": {"readStates": {T3: {"revision": T1}}}}])
    assert a == b == [{"id": 1, "result": {"readStates": {"<id0>": {"revision": "<id1>"}}}}]


def test_masked_keys_and_codex_s_own_noise_are_left_out():
    usage = {"method": "thread/tokenUsage/updated", "params": {"threadId": T1, "tokenUsage": {"total": 5}}}
    other = {"method": "thread/tokenUsage/updated", "params": {"threadId": T1, "tokenUsage": {"total": 6}}}
    assert normalise([usage]) != normalise([other])
    assert normalise([usage], mask=frozenset({"tokenUsage"})) == normalise([other], mask=frozenset({"tokenUsage"}))
    noise = {"method": "account/rateLimits/updated", "params": {}}
    assert normalise([noise, usage]) == normalise([usage])


def test_canonical_order_keeps_the_stream_and_sorts_the_answers_by_id():
    answer1, answer2 = {"id": 1, "result": {}}, {"id": 2, "result": {}}
    note = started(T1, T2)
    assert canonical([answer2, note, answer1]) == [note, answer1, answer2]
    assert canonical([note, answer1]) == canonical([answer1, note])


def test_per_thread_keeps_each_thread_s_order_whatever_the_interleaving():
    a1, a2 = started(T1, T2), {"method": "turn/completed", "params": {"threadId": T1, "turn": {"id": T2}}}
    b1, b2 = started(T3, "01a21b43-4444-7e51-92e1-ae1ad0816163"), {"method": "turn/completed", "params": {"threadId": T3, "turn": {"id": "01a21b43-4444-7e51-92e1-ae1ad0816163"}}}
    assert per_thread([a1, b1, a2, b2]) == per_thread([a1, b1, b2, a2])
    assert per_thread([a1, b1, a2, b2]) != per_thread([a2, b1, a1, b2])


def test_differences_name_the_field_that_differs():
    a = normalise([started(T1, T2, 1)])
    b = normalise([{"method": "turn/started", "params": {"threadId": T1, "turn": {"id": T2, "startedAt": 1, "status": "x"}}, "emittedAtMs": 1}])
    assert differences(a, b) == ["[0]/params/turn/status: <missing> | x"]
    assert differences(a, a) == []
