"""``sidecar/...`` control methods: one dispatcher (jsonrpcserver) for the
sync and the async ones, answering in the shapes clients already get."""

from __future__ import annotations

import pytest

from sidecar.relay import ControlMethods, RpcError
from sidecar.relay.control import Later


def controls() -> ControlMethods:
    c = ControlMethods()
    c.add("sidecar/status", lambda: {"ok": True})
    c.add("sidecar/echo", lambda q: {"q": q})

    def broken():
        raise ValueError("PROMPT-TEXT")

    c.add("sidecar/broken", broken)

    async def inspect(params):
        return {"got": params}

    async def refuse(params):
        raise RpcError(-32602, "threadId is required", {"d": 1})

    async def crash(params):
        raise ValueError("PROMPT-TEXT")

    c.add_async("sidecar/inspect", inspect)
    c.add_async("sidecar/refuse", refuse)
    c.add_async("sidecar/crash", crash)
    return c


SYNC = [
    (b'{"id":1,"method":"sidecar/nope"}', b'{"error":{"code":-32601,"message":"Method not found","data":"sidecar/nope"},"id":1}'),
    (b'{"id":2,"method":"sidecar/status","params":{"x":1}}', b'{"error":{"code":-32602,"message":"invalid params","data":"TypeError"},"id":2}'),
    (b'{"id":3,"method":"sidecar/status","params":[1]}', b'{"error":{"code":-32602,"message":"Invalid params","data":"too many positional arguments"},"id":3}'),
    (b'{"id":4,"method":"sidecar/status","params":null}', b'{"result":{"ok":true},"id":4}'),
    (b'{"id":"s","method":"sidecar/echo","params":{"q":"x"}}', b'{"result":{"q":"x"},"id":"s"}'),
    (b'{"id":5,"jsonrpc":"2.0","method":"sidecar/echo","params":{"q":1}}', b'{"result":{"q":1},"id":5}'),
    (b'{"id":6,"method":"sidecar/broken","params":{}}', b'{"error":{"code":-32603,"message":"sidecar/broken failed","data":"ValueError"},"id":6}'),
]


@pytest.mark.parametrize("request_line, reply", SYNC)
def test_sync_methods_answer_at_once_in_jsonrpcserver_s_shape(request_line, reply):
    assert controls().dispatch(request_line) == reply


ASYNC = [
    (b'{"id":7,"method":"sidecar/inspect","params":{"threadId":"t"}}', b'{"id":7,"result":{"got":{"threadId":"t"}}}'),
    (b'{"id":8,"method":"sidecar/inspect","params":[1]}', b'{"id":8,"result":{"got":{}}}'),
    (b'{"id":9,"method":"sidecar/inspect"}', b'{"id":9,"result":{"got":{}}}'),
    (b'{"id":10,"method":"sidecar/inspect","params":"text"}', b'{"id":10,"result":{"got":{}}}'),
    (b'{"id":null,"method":"sidecar/inspect","params":{}}', b'{"id":null,"result":{"got":{}}}'),
    (b'{"id":11,"method":"sidecar/refuse","params":{}}', b'{"id":11,"error":{"code":-32602,"message":"threadId is required","data":{"d":1}}}'),
    (b'{"id":12,"method":"sidecar/crash","params":{}}', b'{"id":12,"error":{"code":-32603,"message":"control method failed","data":"ValueError"}}'),
]


@pytest.mark.parametrize("request_line, reply", ASYNC)
async def test_async_methods_are_routed_by_the_dispatcher_and_awaited_by_the_relay(request_line, reply):
    later = controls().dispatch(request_line)
    assert isinstance(later, Later), "routed and validated, not yet run"
    assert await later.reply() == reply


async def test_a_failing_method_is_logged_without_its_text(logs):
    c = controls()
    c.dispatch(b'{"id":1,"method":"sidecar/broken","params":{}}')
    later = c.dispatch(b'{"id":2,"method":"sidecar/crash","params":{}}')
    await later.reply()
    records = [r for r in logs.records if r.name == "codex_sidecar.control"]
    assert [r.fields["method"] for r in records] == ["sidecar/broken", "sidecar/crash"]
    assert all("PROMPT-TEXT" not in r.getMessage() for r in records)


def test_every_registered_method_is_listed_once():
    assert controls().names == ["sidecar/broken", "sidecar/crash", "sidecar/echo", "sidecar/inspect", "sidecar/refuse", "sidecar/status"]
