"""What the client negotiated, kept while the sidecar negotiates for its
engine (sidecar/relay/negotiation.py), driven through the router alone."""

from __future__ import annotations

import json

from sidecar import methods
from sidecar.relay.negotiation import Negotiation
from sidecar.rows import notifications_read

NEEDS = notifications_read(methods.METHODS)


def frame(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def initialize(caps: dict | None) -> bytes:
    params: dict = {"clientInfo": {"name": "c", "version": "1"}}
    if caps is not None:
        params["capabilities"] = caps
    return frame({"id": 0, "method": "initialize", "params": params})


def sent_caps(w) -> dict | None:
    (line,) = w.child.take()
    return json.loads(line)["params"].get("capabilities")


# ------------------------------------------------------------ initialize


def test_with_no_engine_the_client_s_initialize_passes_byte_for_byte(wire):
    w = wire()
    line = initialize({"optOutNotificationMethods": ["item/completed"]})
    w.router.from_client(line)
    assert w.child.take() == [line]
    assert not w.router.negotiation.screens


def test_for_an_engine_the_sidecar_declares_the_experimental_api_a_stable_client_did_not(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize(None))
    assert sent_caps(w) == {"experimentalApi": True}
    assert w.router.negotiation.screens


def test_notifications_the_lifecycle_reads_are_taken_out_of_the_client_s_opt_outs(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize({"experimentalApi": True, "optOutNotificationMethods": ["item/completed", "item/agentMessage/delta"]}))
    assert sent_caps(w) == {"experimentalApi": True, "optOutNotificationMethods": ["item/agentMessage/delta"]}
    assert not w.router.negotiation.screens  # the client may send what codex accepts


def test_an_experimental_client_that_opted_out_of_nothing_the_sidecar_reads_passes_unchanged(wire):
    w = wire(engine_reads=NEEDS)
    line = initialize({"experimentalApi": True, "optOutNotificationMethods": ["item/agentMessage/delta"]})
    w.router.from_client(line)
    assert w.child.take() == [line]


def test_only_the_first_initialize_is_negotiated(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize(None))
    w.child.take()
    second = frame({"id": 9, "method": "initialize", "params": {"clientInfo": {"name": "c"}, "capabilities": {"experimentalApi": True}}})
    w.router.from_client(second)
    assert w.child.take() == [second]
    assert w.router.negotiation.screens  # codex refuses the second one; the first stands


# ------------------------------------------------------- client requests


def stable(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize({"optOutNotificationMethods": ["item/completed"]}))
    w.child.take()
    return w


def test_a_request_the_client_s_connection_could_not_send_gets_codex_s_refusal_and_never_reaches_codex(wire, logs):
    w = stable(wire)
    w.router.from_client(frame({"id": 1, "method": "thread/start", "params": {"dynamicTools": [{"name": "x"}]}}))
    w.router.from_client(frame({"id": 2, "method": "collaborationMode/list", "params": {}}))
    assert w.child.take() == []
    answers = [json.loads(x) for x in w.client.take()]
    assert answers == [
        {"id": 1, "error": {"code": -32600, "message": "thread/start.dynamicTools requires experimentalApi capability"}},
        {"id": 2, "error": {"code": -32600, "message": "collaborationMode/list requires experimentalApi capability"}},
    ]
    assert w.router.pending.methods() == {"initialize"}  # (never answered here)


def test_a_stable_request_goes_to_codex_as_it_came(wire):
    w = stable(wire)
    line = frame({"id": 1, "method": "thread/start", "params": {"model": "m", "dynamicTools": None}})
    w.router.from_client(line)
    assert w.child.take() == [line]


def test_an_experimental_client_is_never_screened(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize({"experimentalApi": True}))
    w.child.take()
    line = frame({"id": 1, "method": "collaborationMode/list", "params": {}})
    w.router.from_client(line)
    assert w.child.take() == [line]


# ------------------------------------------------------ codex -> client


def test_a_notification_the_client_opted_out_of_is_read_by_the_hooks_but_not_delivered(wire):
    w = stable(wire)
    seen = []
    w.router.hooks.on_server_notification("item/completed", lambda msg: seen.append(msg.method))
    w.router.from_child(frame({"method": "item/completed", "params": {"threadId": "t", "item": {}}}))
    other = frame({"method": "item/started", "params": {"threadId": "t", "item": {}}})
    w.router.from_child(other)
    assert seen == ["item/completed"]
    assert w.client.take() == [other]


def test_a_server_request_only_experimental_clients_get_is_answered_by_the_sidecar(wire):
    w = stable(wire)
    w.router.negotiation.clock = lambda: 1_800_000_000.7
    w.router.from_child(frame({"id": 5, "method": "currentTime/read", "params": {"threadId": "t"}}))
    assert w.client.take() == []
    assert [json.loads(x) for x in w.child.take()] == [{"id": 5, "result": {"currentTimeAt": 1800000000}}]


def test_an_experimental_client_gets_its_server_requests(wire):
    w = wire(engine_reads=NEEDS)
    w.router.from_client(initialize({"experimentalApi": True}))
    w.child.take()
    line = frame({"id": 5, "method": "currentTime/read", "params": {"threadId": "t"}})
    w.router.from_child(line)
    assert w.client.take() == [line]


def test_status_says_what_each_side_declared():
    n = Negotiation(NEEDS)
    n.initialize({"capabilities": {"optOutNotificationMethods": ["turn/completed", "x/y"]}})
    assert n.status() == {
        "clientExperimentalApi": False,
        "sidecarExperimentalApi": True,
        "optedOut": ["turn/completed", "x/y"],
        "hiddenNotifications": ["thread/readState/changed", "turn/completed"],
    }


def test_the_sidecar_keeps_every_notification_a_hook_reads():
    """A new notification row is kept from the client's opt-outs with no other edit."""
    rows = (*methods.METHODS, methods.Row(method="thread/new/thing", source=methods.Sender.NOTIFICATION, request=lambda job, msg: None, part=methods.Part.ENGINE))
    assert "thread/new/thing" in notifications_read(rows)
    assert {"item/completed", "turn/completed", "turn/started", "thread/tokenUsage/updated"} <= set(NEEDS)


# ---------------------------------------- what codex refuses of a change


def changing(w, seen=None):
    """A hook that adds a member to every thread/start, and a response hook that notes fell_back."""

    def add(msg):
        msg.set_params({**(msg.params() or {}), "dynamicTools": [{"name": "engine_tool"}]})

    def answered(msg, pending):
        if seen is not None:
            seen.append(pending.fell_back)

    w.router.hooks.on_client_request("thread/start", add)
    w.router.hooks.on_response("thread/start", answered)


def test_a_change_codex_refuses_is_sent_again_as_the_client_s_own_request(wire, logs):
    w = wire()
    seen: list[bool] = []
    changing(w, seen)
    request = frame({"id": 7, "method": "thread/start", "params": {"model": "m"}})
    w.router.from_client(request)
    (changed,) = w.child.take()
    assert json.loads(changed)["params"]["dynamicTools"]
    w.router.from_child(frame({"id": 7, "error": {"code": -32600, "message": "thread/start.dynamicTools requires experimentalApi capability"}}))
    assert w.child.take() == [request]  # the client's bytes, once
    assert w.client.take() == []  # the refusal was the sidecar's, not the client's
    answer = frame({"id": 7, "result": {"thread": {"id": "t"}}})
    w.router.from_child(answer)
    assert w.client.take() == [answer]
    assert seen == [True]
    assert any("codex refused the sidecar's change" in r.getMessage() for r in logs.records)


def test_the_client_s_own_request_refused_too_gets_codex_s_answer(wire):
    w = wire()
    changing(w)
    w.router.from_client(frame({"id": 7, "method": "thread/start", "params": {}}))
    refusal = frame({"id": 7, "error": {"code": -32600, "message": "no"}})
    w.router.from_child(refusal)
    w.router.from_child(refusal)
    assert len(w.child.take()) == 2
    assert w.client.take() == [refusal]


def test_only_a_refusal_of_the_request_is_retried(wire):
    """An internal error is not the change's doing: it goes to the client."""
    w = wire()
    changing(w)
    w.router.from_client(frame({"id": 7, "method": "thread/start", "params": {}}))
    failure = frame({"id": 7, "error": {"code": -32603, "message": "internal"}})
    w.router.from_child(failure)
    assert len(w.child.take()) == 1
    assert w.client.take() == [failure]


def test_an_unchanged_request_s_refusal_passes_straight(wire):
    w = wire()
    request = frame({"id": 7, "method": "thread/start", "params": {}})
    w.router.from_client(request)
    refusal = frame({"id": 7, "error": {"code": -32600, "message": "no"}})
    w.router.from_child(refusal)
    assert w.child.take() == [request]
    assert w.client.take() == [refusal]


def test_a_notification_the_sidecar_sends_itself_is_dropped_when_the_client_opted_out(wire):
    """Held frames a job releases later (an overflow's error) obey the opt-outs too."""
    w = stable(wire)
    w.router.send_to_client(frame({"method": "item/completed", "params": {"threadId": "t", "item": {}}}))
    answer = frame({"id": 3, "result": {}})
    w.router.send_to_client(answer)
    assert w.client.take() == [answer]
