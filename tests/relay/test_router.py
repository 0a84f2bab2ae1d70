"""The router on its own: lines in, lines out, no processes and no trio.

Each test feeds the router lines as the pumps would and reads what it put
into the two sinks (the ``wire`` fixture, tests/relay/conftest.py).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import CHILD_EXITED, OUTCOME_UNKNOWN, Oversized
from protocol.jsonrpc import PREFIX
from sidecar.relay import HANDLED, RpcError


def frame(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(lines: list[bytes]) -> list[dict]:
    return [json.loads(line) for line in lines]


# ------------------------------------------------------------ forwarding


def test_a_request_and_its_answer_pass_byte_for_byte(wire):
    w = wire()
    request = b'{"id":1,"method":"thread/read","params":{"threadId":"t", "x":[1, 2]}}'
    w.router.from_client(request)
    assert w.child.take() == [request]
    assert w.router.pending.methods() == {"thread/read"}
    answer = b'{"id":1,"result":{"k": 1}}'
    w.router.from_child(answer)
    assert w.client.take() == [answer]
    assert len(w.router.pending) == 0


def test_invalid_lines_pass_both_ways_and_are_counted(wire):
    w = wire()
    w.router.from_client(b"not json")
    w.router.from_child(b'{"neither":1}')
    assert w.child.take() == [b"not json"]
    assert w.client.take() == [b'{"neither":1}']
    assert (w.router.c2s.invalid, w.router.s2c.invalid) == (1, 1)


# ------------------------------------------------------- ids and aliases

client_ids = st.one_of(
    st.integers(-(2**40), 2**40),
    st.text(max_size=8),
    st.text(max_size=6).map(lambda s: PREFIX + s),
    st.sampled_from([PREFIX + "1", PREFIX + "2", PREFIX + "client:1"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(client_ids, unique=True, max_size=16), st.integers(0, 3), st.data())
def test_ids_round_trip_through_aliases_whatever_the_client_picks(wire, ids, n_internal, data):
    """The child never sees two live requests with one id, each client
    request is answered once under its own id, and the sidecar's own calls
    get their answers without the client seeing them."""
    w = wire()
    calls = [w.router.call("thread/list", {"call": k}) for k in range(n_internal)]
    for i, client_id in enumerate(ids):
        w.router.from_client(frame({"id": client_id, "method": "thread/read", "params": {"i": i}}))
    seen = loads(w.child.take())
    wire_ids = [m["id"] for m in seen]
    assert len(set(map(json.dumps, wire_ids))) == len(wire_ids), "two live requests shared an id"
    for m in seen[n_internal:]:
        if not (isinstance(ids[m["params"]["i"]], str) and ids[m["params"]["i"]].startswith(PREFIX)):
            assert m["id"] == ids[m["params"]["i"]], "an id outside the sidecar's space went as it was"
    for k in data.draw(st.permutations(range(len(seen)))):
        body = seen[k].get("params") or {}
        w.router.from_child(frame({"id": seen[k]["id"], "result": body}))
    answers = loads(w.client.take())
    assert sorted(json.dumps([a["id"], a["result"]["i"]]) for a in answers) == sorted(
        json.dumps([client_id, i]) for i, client_id in enumerate(ids)
    )
    assert [c.result for c in calls] == [{"call": k} for k in range(n_internal)]
    assert len(w.router.pending) == 0
    assert not any(w.router.pending.is_alias(wid) for wid in wire_ids), "an alias outlived its request"


def test_a_held_request_with_a_reserved_id_goes_under_its_alias(wire):
    w = wire()
    held = []
    w.router.hooks.on_client_request("turn/start", lambda msg: held.append(msg) or HANDLED)
    w.router.from_client(frame({"id": PREFIX + "1", "method": "turn/start", "params": {}}))
    assert w.child.take() == []
    assert w.router.forward_client_request(held[0])
    [sent] = loads(w.child.take())
    assert sent["id"] != PREFIX + "1" and sent["id"].startswith(PREFIX)
    w.router.from_child(frame({"id": sent["id"], "result": {}}))
    assert loads(w.client.take()) == [{"id": PREFIX + "1", "result": {}}]


def test_answering_a_held_request_from_the_sidecar_closes_it(wire):
    w = wire()
    held = []
    w.router.hooks.on_client_request("thread/read", lambda msg: held.append(msg) or HANDLED)
    w.router.from_client(frame({"id": 5, "method": "thread/read", "params": {}}))
    w.router.answer_client_request(5, frame({"id": 5, "result": {"from": "sidecar"}}))
    assert loads(w.client.take()) == [{"id": 5, "result": {"from": "sidecar"}}]
    assert w.child.take() == [] and len(w.router.pending) == 0
    assert not w.router.forward_client_request(held[0]), "an answered request is not sent again"


# ------------------------------------------------------------------ gates

requests_on = st.lists(st.sampled_from(["a", "b", "c"]), max_size=24)


@settings(max_examples=150, deadline=None)
@given(requests_on, st.sampled_from(["a", "b"]), st.integers(1, 3))
def test_gated_requests_wait_for_the_last_holder_then_go_in_order(wire, threads, gated, n_holders):
    w = wire()
    for holder in range(n_holders):
        w.router.gate(gated, holder)
    for i, thread in enumerate(threads):
        w.router.from_client(frame({"id": i, "method": "thread/read", "params": {"threadId": thread}}))
    first = [m["id"] for m in loads(w.child.take())]
    assert first == [i for i, t in enumerate(threads) if t != gated], "other threads pass at once, in order"
    for holder in range(n_holders - 1):
        w.router.ungate(gated, holder)
        assert w.child.take() == [], "a gate holds while any holder has it"
    w.router.ungate(gated, n_holders - 1)
    assert [m["id"] for m in loads(w.child.take())] == [i for i, t in enumerate(threads) if t == gated]
    w.router.from_client(frame({"id": "after", "method": "thread/read", "params": {"threadId": gated}}))
    assert [m["id"] for m in loads(w.child.take())] == ["after"], "an ungated thread is no longer held"
    assert w.router.gates.waiting == 0 and len(w.router.gates) == 0


def test_ungating_with_a_holder_that_never_gated_changes_nothing(wire):
    w = wire()
    w.router.gate("a", "turn")
    w.router.from_client(frame({"id": 1, "method": "thread/read", "params": {"threadId": "a"}}))
    w.router.ungate("a", "someone else")
    w.router.ungate("b", "turn")
    assert w.child.take() == [] and w.router.gates.waiting == 1


# ------------------------------------------------------------------ hooks


def test_hooks_chain_rewrites_and_the_first_handled_stops_the_chain(wire):
    w = wire()
    seen = []

    def add_flag(msg):
        msg.set_params({**msg.params(), "flag": 1})

    def look(msg):
        seen.append(msg.params())
        return None

    w.router.hooks.on_client_request("turn/start", add_flag)
    w.router.hooks.on_client_request("turn/start", look)
    w.router.from_client(b'{"id":1,"method":"turn/start","params":{}}')
    assert seen == [{"flag": 1}], "the later hook sees the earlier one's params"
    assert w.child.take() == [b'{"id":1,"method":"turn/start","params":{"flag":1}}']

    w.router.hooks.on_server_notification("turn/started", lambda msg: HANDLED)
    w.router.hooks.on_server_notification("turn/started", lambda msg: seen.append("after HANDLED"))
    w.router.from_child(b'{"method":"turn/started","params":{}}')
    assert w.client.take() == [] and seen == [{"flag": 1}]


def test_every_hook_on_a_message_shares_one_decode_of_its_params(wire, monkeypatch):
    import sidecar.relay.messages as messages

    decodes = []
    real = messages.decode
    monkeypatch.setattr(messages, "decode", lambda raw: decodes.append(raw) or real(raw))
    w = wire()
    seen = []
    for _ in range(3):
        w.router.hooks.on_client_request("turn/start", lambda msg: seen.append(msg.params()) and None)
    w.router.from_client(b'{"id":1,"method":"turn/start","params":{"threadId":"t","input":[]}}')
    assert seen == [{"threadId": "t", "input": []}] * 3
    assert len(decodes) == 1, "the params were decoded once for all three hooks"


def test_an_answer_every_hook_reads_and_one_changes_is_decoded_once_and_encoded_once(wire, monkeypatch):
    """An aliased request's answer: its id given back, its result read by
    three hooks and changed by one, the request's state read back from the
    pending entry: one decode, one encode, every other field kept."""
    import sidecar.relay.messages as messages
    from sidecar.relay import Slot

    counts = {"decode": 0, "encode": 0}
    real_decode, real_encode = messages.decode, messages.encode
    monkeypatch.setattr(messages, "decode", lambda raw: counts.__setitem__("decode", counts["decode"] + 1) or real_decode(raw))
    monkeypatch.setattr(messages, "encode", lambda value: counts.__setitem__("encode", counts["encode"] + 1) or real_encode(value))
    w = wire()
    noted = Slot[str]("test.noted")
    seen = []
    w.router.hooks.on_client_request("thread/start", lambda msg: msg.note(noted, "kept"))
    w.router.hooks.on_response("thread/start", lambda msg, pending: seen.append((pending.noted(noted), msg.result())))
    w.router.hooks.on_response("thread/start", lambda msg, pending: msg.set_result({**msg.result(), "added": True}))
    w.router.hooks.on_response("thread/start", lambda msg, pending: seen.append(msg.result()))
    w.router.from_client(frame({"id": PREFIX + "7", "method": "thread/start", "params": {}}))
    [sent] = loads(w.child.take())
    assert sent["id"] != PREFIX + "7", "aliased"
    counts.update(decode=0, encode=0)
    w.router.from_child(frame({"id": sent["id"], "result": {"thread": {"id": "thr"}}, "extra": 1}))
    assert seen == [("kept", {"thread": {"id": "thr"}}), {"thread": {"id": "thr"}, "added": True}]
    assert counts == {"decode": 1, "encode": 1}
    assert loads(w.client.take()) == [{"id": PREFIX + "7", "result": {"thread": {"id": "thr"}, "added": True}, "extra": 1}]


def test_a_pending_request_carries_the_params_and_thread_its_hooks_read(wire, monkeypatch):
    import sidecar.relay.messages as messages
    from protocol import parse
    from sidecar.relay import Message

    decodes = []
    real = messages.decode
    monkeypatch.setattr(messages, "decode", lambda raw: decodes.append(raw) or real(raw))
    w = wire()
    answered = []
    w.router.hooks.on_client_request("turn/start", lambda msg: msg.params() and HANDLED)
    w.router.hooks.on_client_request("thread/read", lambda msg: None)  # reads nothing
    w.router.hooks.on_response("turn/start", lambda msg, pending: answered.append((pending.thread_id, pending.params)))
    held = b'{"id":1,"method":"turn/start","params":{"threadId":"t1","input":[]}}'
    w.router.from_client(held)
    w.router.from_client(b'{"id":2,"method":"thread/read","params":{"threadId":"t2"}}')
    turn, read = w.router.pending.find(1), w.router.pending.find(2)
    assert (turn.thread_id, turn.params) == ("t1", {"threadId": "t1", "input": []})
    assert (read.thread_id, read.params) == (None, None), "params no hook read stay undecoded"
    assert len(decodes) == 1, "only the hook's own read decoded anything"
    assert w.router.forward_client_request(Message(parse(held), held))
    w.router.from_child(b'{"id":1,"result":{"turn":{"id":"u1"}}}')
    assert answered == [("t1", {"threadId": "t1", "input": []})], "the response's hook finds the thread on the request"


def test_a_pending_request_keeps_the_client_s_params_as_read_not_a_hook_s_change(wire):
    w = wire()
    w.router.hooks.on_client_request("turn/start", lambda msg: msg.set_params({**msg.params(), "input": [1]}))
    w.router.hooks.on_client_request("turn/start", lambda msg: msg.params() and None)
    w.router.from_client(b'{"id":1,"method":"turn/start","params":{"threadId":"t1","input":[]}}')
    assert w.router.pending.find(1).params == {"threadId": "t1", "input": []}
    assert w.child.take() == [b'{"id":1,"method":"turn/start","params":{"threadId":"t1","input":[1]}}']


def test_a_raising_hook_fails_open_and_the_chain_goes_on(wire, caplog):
    w = wire()
    later = []

    def broken(msg):
        raise ValueError("PROMPT-TEXT")

    w.router.hooks.on_client_request("turn/start", broken)
    w.router.hooks.on_client_request("turn/start", lambda msg: later.append(msg.id))
    line = b'{"id":1,"method":"turn/start","params":{}}'
    w.router.from_client(line)
    assert w.child.take() == [line]
    assert later == [1]


def test_response_hooks_see_the_client_s_id_and_the_request_s_method(wire):
    w = wire()
    got = []
    w.router.hooks.on_response("thread/start", lambda msg, pending: got.append((msg.id, pending.method, pending.client_id)))
    w.router.from_client(frame({"id": PREFIX + "7", "method": "thread/start", "params": {}}))
    [sent] = loads(w.child.take())
    w.router.from_child(frame({"id": sent["id"], "result": {"thread": {"id": "thr"}}}))
    assert got == [(PREFIX + "7", "thread/start", PREFIX + "7")]
    assert w.router.observed.threads_seen == {"thr"}


# ------------------------------------------------------------ the edge


class NoHolds:
    """An edge's answers that never hold one (``Edge.hold`` and the rest)."""

    def sidecar_request(self, call_id: str, method: str) -> None:
        pass

    def sidecar_answered(self, call_id: str) -> list:
        return []

    def hold(self, method: str, answer: object) -> float | None:
        return None

    def overdue(self, answer: object) -> list:
        return []

    def release_all(self) -> list:
        return []


class SwappingEdge(NoHolds):
    """Calls the client's thread "front" and Codex's "back"; hides "ghost"."""

    active = True
    maps_to_codex = True

    def __init__(self) -> None:
        self.responses: list[str | None] = []
        self.to_codex_calls = 0

    def to_codex(self, line: bytes) -> bytes:
        self.to_codex_calls += 1
        return line.replace(b'"front"', b'"back"') if b'"front"' in line else line

    def response(self, line: bytes, method: str | None) -> bytes:
        self.responses.append(method)
        return line.replace(b'"back"', b'"front"') if b'"back"' in line else line

    def notification(self, line: bytes) -> bytes | None:
        if b"ghost" in line:
            return None
        return line.replace(b'"back"', b'"front"') if b'"back"' in line else line

    def fragment_to_codex(self, data: bytes) -> bytes:
        return data.replace(b'"front"', b'"back"')

    def fragment_to_client(self, data: bytes) -> bytes:
        return data.replace(b'"back"', b'"front"')


def test_the_edge_maps_every_line_at_the_child_s_side(wire):
    w = wire(edge=(edge := SwappingEdge()))
    seen = []
    w.router.hooks.on_server_notification("turn/started", lambda msg: seen.append(msg.params()))
    w.router.from_client(b'{"id":1,"method":"thread/read","params":{"threadId":"front"}}')
    w.router.send_to_child(b'{"id":"x","method":"thread/unsubscribe","params":{"threadId":"front"}}', raw=True)
    assert w.child.take() == [
        b'{"id":1,"method":"thread/read","params":{"threadId":"back"}}',
        b'{"id":"x","method":"thread/unsubscribe","params":{"threadId":"front"}}',
    ], "raw requests pass unmapped"
    w.router.from_child(b'{"id":1,"result":{"thread":{"id":"back"}}}')
    w.router.from_child(b'{"method":"turn/started","params":{"threadId":"back"}}')
    w.router.from_child(b'{"method":"turn/started","params":{"threadId":"ghost"}}')
    assert w.client.take() == [
        b'{"id":1,"result":{"thread":{"id":"front"}}}',
        b'{"method":"turn/started","params":{"threadId":"front"}}',
    ]
    assert seen == [{"threadId": "front"}], "hooks see the client's ids; a hidden notification reaches no hook"
    assert edge.responses == ["thread/read"]


def test_an_edge_with_no_thread_to_map_is_not_asked_about_lines_to_the_child(wire):
    w = wire(edge=(edge := SwappingEdge()))
    edge.maps_to_codex = False
    w.router.from_client(b'{"id":1,"method":"thread/read","params":{"threadId":"front"}}')
    w.router.call("thread/read", {"threadId": "front"})
    assert edge.to_codex_calls == 0
    assert [m["params"] for m in loads(w.child.take())] == [{"threadId": "front"}] * 2
    edge.maps_to_codex = True
    w.router.from_client(b'{"id":2,"method":"thread/read","params":{"threadId":"front"}}')
    assert edge.to_codex_calls == 1 and loads(w.child.take())[0]["params"] == {"threadId": "back"}


def test_the_edge_maps_answers_to_the_sidecar_s_calls_and_oversized_pieces(wire):
    w = wire(max_line=64, edge=(edge := SwappingEdge()))
    call = w.router.call("thread/read", {"threadId": "front"})
    [sent] = loads(w.child.take())
    assert sent["params"] == {"threadId": "back"}
    w.router.from_child(frame({"id": call.id, "result": {"thread": {"id": "back"}}}))
    assert call.result == {"thread": {"id": "front"}} and edge.responses == ["thread/read"]
    w.router.from_client_fragment(Oversized(b'{"method":"x","params":{"threadId":"front","pad":"' + b"p" * 80 + b'"}}\n', True))
    assert b'"back"' in bytes(w.child.data) and b'"front"' not in bytes(w.child.data)


class HoldingEdge(SwappingEdge):
    """Holds a ``thread/loaded/list`` answer while the sidecar's own
    ``thread/start`` is unanswered; once it is, "ghost" is owned and lists
    lose it."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: set[str] = set()
        self.held: list = []
        self.owned = False

    def sidecar_request(self, call_id: str, method: str) -> None:
        if method == "thread/start":
            self.starts.add(call_id)

    def sidecar_answered(self, call_id: str) -> list:
        self.starts.discard(call_id)
        if self.starts:
            return []
        out, self.held = self.held, []
        return out

    def hold(self, method: str, answer: object) -> float | None:
        if method != "thread/loaded/list" or not self.starts:
            return None
        self.held.append(answer)
        return 3.0

    def release_all(self) -> list:
        out, self.held = self.held, []
        return out

    def request_params(self, params):
        return {**params, "threadId": "back"} if isinstance(params, dict) and params.get("threadId") == "front" else params

    def response(self, line: bytes, method: str | None) -> bytes:
        line = super().response(line, method)
        return line.replace(b',"ghost"', b"") if self.owned and method == "thread/loaded/list" else line


def test_a_held_answer_lets_later_frames_pass_and_goes_on_once_the_sidecars_start_is_answered(wire):
    w = wire(edge=(edge := HoldingEdge()))
    call = w.router.call("thread/start", {}, raw=True, on_result=lambda _r: setattr(edge, "owned", True))
    w.router.from_client(b'{"id":1,"method":"thread/loaded/list","params":{}}')
    w.router.from_client(b'{"id":2,"method":"thread/read","params":{"threadId":"front"}}')
    w.child.take()
    w.router.from_child(b'{"id":1,"result":{"data":["back","ghost"]}}')
    assert w.client.take() == [] and w.router.pending.methods() == {"thread/read"}
    [(overdue, (held, seconds))] = w.spawned
    assert overdue == w.router._overdue and seconds == 3.0
    w.router.from_child(b'{"method":"turn/started","params":{"threadId":"back"}}')
    w.router.from_child(b'{"id":2,"result":{"thread":{"id":"back"}}}')
    assert w.client.take() == [
        b'{"method":"turn/started","params":{"threadId":"front"}}',
        b'{"id":2,"result":{"thread":{"id":"front"}}}',
    ], "nothing waits behind the held answer"
    w.router.from_child(frame({"id": call.id, "result": {"thread": {"id": "ghost"}}}))
    assert w.client.take() == [b'{"id":1,"result":{"data":["front"]}}'], "filtered with what the start's answer made known"
    assert call.settled and edge.responses == ["thread/read", "thread/start", "thread/loaded/list"], "mapped once, as it goes on"


def test_a_held_answer_keeps_the_client_s_id_and_its_hooks(wire):
    w = wire(edge=HoldingEdge())
    seen = []
    w.router.hooks.on_response("thread/loaded/list", lambda msg, pending: seen.append(msg.result()))
    call = w.router.call("thread/start", {}, raw=True)
    w.router.from_client(b'{"id":"' + PREFIX.encode() + b'7","method":"thread/loaded/list","params":{}}')
    [sent] = loads(w.child.take()[1:])
    w.router.from_child(frame({"id": sent["id"], "result": {"data": ["back"]}}))
    assert w.client.take() == [] and seen == []
    w.router.from_child(frame({"id": call.id, "error": {"code": -32603, "message": "refused"}}))
    assert loads(w.client.take()) == [{"id": PREFIX + "7", "result": {"data": ["front"]}}]
    assert seen == [{"data": ["front"]}]
    assert isinstance(call.error, RpcError)


def test_answers_held_when_codex_exits_go_to_the_client_as_they_are(wire):
    w = wire(edge=HoldingEdge())
    w.router.call("thread/start", {}, raw=True)
    w.router.from_client(b'{"id":1,"method":"thread/loaded/list","params":{}}')
    w.router.from_client(b'{"id":2,"method":"thread/read","params":{"threadId":"front"}}')
    w.router.from_child(b'{"id":1,"result":{"data":["back","ghost"]}}')
    assert w.client.take() == []
    w.router.child_exited(1)
    answers = {m["id"]: m for m in loads(w.client.take())}
    assert answers[1] == {"id": 1, "result": {"data": ["front", "ghost"]}}
    assert answers[2]["error"]["code"] == -32603  # codex had it


def test_a_held_answer_goes_on_once_the_sidecars_start_is_answered_too_long_to_parse(wire):
    w = wire(edge=HoldingEdge(), max_line=200)
    call = w.router.call("thread/start", {}, raw=True)
    w.router.from_client(b'{"id":1,"method":"thread/loaded/list","params":{}}')
    w.router.from_child(b'{"id":1,"result":{"data":["back"]}}')
    assert w.client.take() == []
    answer = frame({"id": call.id, "result": {"thread": {"id": "ghost", "pad": "y" * 400}}}) + b"\n"
    w.router.from_child_fragment(Oversized(answer[:100], False))
    w.router.from_child_fragment(Oversized(answer[100:], True))
    assert call.error is not None
    assert loads(w.client.take()) == [{"id": 1, "result": {"data": ["front"]}}], "not left to its wait"


# ------------------------------------------------------- control methods


async def test_control_methods_are_answered_by_the_sidecar_never_the_child(wire):
    w = wire()
    w.router.controls.add("sidecar/ping", lambda: {"pong": True})

    async def slow(params):
        return {"echo": params}

    w.router.controls.add_async("sidecar/slow", slow)
    w.router.from_client(b'{"id":1,"method":"sidecar/ping"}')
    w.router.from_client(b'{"id":2,"method":"sidecar/slow","params":{"a":1}}')
    w.router.from_client(b'{"method":"sidecar/ping"}')
    assert w.client.take() == [b'{"result":{"pong":true},"id":1}']
    [(fn, args)] = w.spawned
    await fn(*args)
    assert w.client.take() == [b'{"id":2,"result":{"echo":{"a":1}}}']
    assert w.child.take() == [] and w.router.c2s.frames == 0


# ----------------------------------------------------------- child exit


def test_when_the_child_exits_everything_waiting_on_it_is_answered(wire):
    w = wire()
    w.router.hooks.on_client_request("turn/start", lambda msg: HANDLED)
    w.router.from_client(frame({"id": 1, "method": "turn/start", "params": {"threadId": "a"}}))
    w.router.gate("a", "turn")
    w.router.from_client(frame({"id": 2, "method": "thread/read", "params": {"threadId": "a"}}))
    w.router.from_client(frame({"id": PREFIX + "3", "method": "thread/read", "params": {"threadId": "b"}}))
    call = w.router.call("thread/list")
    assert w.router.child_exited(-9) == 2
    errors = loads(w.client.take())
    assert [e["id"] for e in errors] == [1, PREFIX + "3", 2], "pending first, then the gated, in order"
    # Held by its hook or gated, never handed to codex: safe to retry.
    assert [e["error"]["code"] for e in errors] == [CHILD_EXITED, OUTCOME_UNKNOWN, CHILD_EXITED]
    assert errors[0]["error"]["data"] == {"method": "turn/start", "outcome": "notDelivered", "reason": "appServerExited"}
    # Handed to codex: it may have run, so no client may read it as retryable.
    assert errors[1]["error"]["data"] == {"method": "thread/read", "outcome": "unknown", "reason": "appServerExited"}
    assert "SIGKILL" in errors[0]["error"]["message"]
    assert call.settled and call.error is not None and call.error.code == CHILD_EXITED
    w.router.from_client(frame({"id": 4, "method": "thread/read", "params": {}}))
    assert [e["id"] for e in loads(w.client.take())] == [4]
    with pytest.raises(RpcError):
        w.router.call("thread/list")


# --------------------------------------------------- the sidecar's calls


def test_a_timed_out_call_still_gets_its_answer_to_its_on_result(wire):
    w = wire()
    results = []
    kept = w.router.call("thread/list", on_result=results.append)
    dropped = w.router.call("thread/list")
    w.router.end_call(kept, timed_out=True)
    w.router.end_call(dropped, timed_out=True)
    w.router.from_child(frame({"id": kept.id, "result": {"late": 1}}))
    w.router.from_child(frame({"id": dropped.id, "result": {"late": 2}}))
    assert results == [{"late": 1}]
    assert w.client.take() == [], "answers to the sidecar never reach the client"


def test_an_error_answer_fails_the_call_with_its_code(wire):
    w = wire()
    call = w.router.call("thread/list")
    w.router.from_child(frame({"id": call.id, "error": {"code": -32000, "message": "no", "data": {"x": 1}}}))
    assert (call.error.code, call.error.message, call.error.data) == (-32000, "no", {"x": 1})


# --------------------------------------------------- oversized lines


def test_an_oversized_request_and_answer_keep_their_ids(wire):
    w = wire(max_line=32)
    request = frame({"id": PREFIX + "9", "method": "turn/start", "params": {"pad": "x" * 64}}) + b"\n"
    w.router.from_client_fragment(Oversized(request[:60], False))  # a piece holds the head (> max_line)
    w.router.from_client_fragment(Oversized(request[60:], True))
    [sent] = loads(w.child.take())
    assert sent["id"] != PREFIX + "9" and w.router.pending.methods() == {"turn/start"}
    answer = frame({"id": sent["id"], "result": {"blob": "y" * 64}}) + b"\n"
    w.router.from_child_fragment(Oversized(answer, True))
    assert [a["id"] for a in loads(w.client.take())] == [PREFIX + "9"]
    assert len(w.router.pending) == 0 and w.router.s2c.oversized == 1


def test_an_oversized_answer_to_the_sidecar_fails_its_call_and_stays_away(wire):
    w = wire(max_line=32)
    call = w.router.call("thread/read")
    answer = frame({"id": call.id, "result": {"blob": "y" * 64}}) + b"\n"
    w.router.from_child_fragment(Oversized(answer[:60], False))
    w.router.from_child_fragment(Oversized(answer[60:], True))
    assert call.error is not None and "max line" in call.error.message
    assert w.client.take() == []


def test_an_oversized_request_codex_read_whole_is_answered_outcome_unknown_when_codex_dies(wire):
    """Codex may have run a request whose last byte it was handed: -32001
    (notDelivered) would have OpenClaw send it again and run the turn twice."""
    w = wire(max_line=32)
    request = frame({"id": 7, "method": "turn/start", "params": {"pad": "x" * 64}}) + b"\n"
    w.router.from_client_fragment(Oversized(request[:60], False))
    w.router.from_client_fragment(Oversized(request[60:], True))
    assert w.router.child_exited(-9) == 1
    [error] = loads(w.client.take())
    assert error["id"] == 7
    assert (error["error"]["code"], error["error"]["data"]["outcome"]) == (OUTCOME_UNKNOWN, "unknown")


def test_an_oversized_request_cut_off_by_codex_s_death_is_answered_not_delivered(wire):
    """Codex never had the end of the line, so it cannot have parsed it: safe to retry."""
    w = wire(max_line=32)
    request = frame({"id": 8, "method": "turn/start", "params": {"pad": "x" * 64}}) + b"\n"
    w.router.from_client_fragment(Oversized(request[:60], False))
    assert w.router.child_exited(-9) == 1
    [error] = loads(w.client.take())
    assert (error["id"], error["error"]["code"], error["error"]["data"]["outcome"]) == (8, CHILD_EXITED, "notDelivered")
    w.router.from_client_fragment(Oversized(request[60:], True))  # the rest of the line: nowhere to go
    assert w.client.take() == []


# ------------------------------------------------- decoded once, encoded once


class _MappingEdge(NoHolds):
    """An edge that moves thread ``t1`` to ``t9``, counting byte-level maps."""

    active = False
    maps_to_codex = True

    def __init__(self) -> None:
        self.byte_maps = 0

    def to_codex(self, line: bytes) -> bytes:
        self.byte_maps += 1
        return line.replace(b'"t1"', b'"t9"')

    def request_params(self, params):
        if isinstance(params, dict) and params.get("threadId") == "t1":
            return {**params, "threadId": "t9"}
        return params


def test_a_read_request_nobody_changes_goes_out_as_its_own_bytes(wire):
    """Decoded for the gate and the hooks, unchanged: never re-encoded,
    whatever its spacing and field order."""
    w = wire()
    w.router.hooks.on_client_request("turn/start", lambda msg: msg.params() and None)
    w.router.gate("elsewhere", "holder")  # the router now reads every request's thread
    line = b'{"params": {"input": [], "threadId": "t2", "zz": 1}, "method": "turn/start", "id": 3, "extra": true}'
    w.router.from_client(line)
    assert w.child.take() == [line]
    assert w.router.pending.find(3).thread_id == "t2"


def test_a_decoded_request_s_edits_alias_and_thread_id_go_out_in_one_encode(wire, monkeypatch):
    """The hook's params, the alias and the edge's thread id: one message
    encoded once, every field the sidecar does not know kept in its place."""
    import sidecar.relay.messages as messages

    encodes = []
    real = messages.encode
    monkeypatch.setattr(messages, "encode", lambda value: encodes.append(value) or real(value))
    w = wire(edge=(edge := _MappingEdge()))
    w.router.hooks.on_client_request("turn/start", lambda msg: msg.set_params({**msg.params(), "input": ["projected"]}))
    w.router.from_client(b'{"id":"' + PREFIX.encode() + b'1","method":"turn/start","params":{"threadId":"t1","input":[],"x":{"y":1}},"z":2}')
    [sent] = loads(w.child.take())
    assert len(encodes) == 1 and edge.byte_maps == 0, "mapped on the decoded params, encoded once"
    assert list(sent) == ["id", "method", "params", "z"] and sent["z"] == 2
    assert sent["id"] != PREFIX + "1" and sent["id"].startswith(PREFIX)
    assert sent["params"] == {"threadId": "t9", "input": ["projected"], "x": {"y": 1}}


def test_a_request_no_hook_decoded_is_mapped_on_its_bytes(wire):
    w = wire(edge=(edge := _MappingEdge()))
    w.router.from_client(b'{"id":1,"method":"thread/read","params":{"threadId":"t1"}}')
    assert w.child.take() == [b'{"id":1,"method":"thread/read","params":{"threadId":"t9"}}']
    assert edge.byte_maps == 1


def test_a_hook_that_fails_after_changing_the_params_leaves_the_request_as_it_was(wire):
    w = wire()

    def half_done(msg):
        msg.set_params({**msg.params(), "input": ["half"]})
        raise RuntimeError("engine state broke")

    w.router.hooks.on_client_request("turn/start", half_done)
    line = b'{"id":4,"method":"turn/start","params":{"threadId":"t1","input":[]}}'
    w.router.from_client(line)
    assert w.child.take() == [line]
