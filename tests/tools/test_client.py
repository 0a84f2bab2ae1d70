"""The test client against a tiny scripted app-server (no codex needed).

The client is the measuring instrument for every live and proxy test, so
its own edge cases (huge lines, server requests, errors, a dying server)
are pinned against a peer whose behaviour is fully known.
"""

from __future__ import annotations

import json
import sys

import pytest
import trio

from tools.client import AppServerClient, RpcError, ServerGone

# A minimal app-server: newline-delimited JSON on stdio, no "jsonrpc" field.
STUB = r"""
import json, sys
out = sys.stdout.buffer
def send(obj):
    out.write(json.dumps(obj).encode() + b"\n"); out.flush()
def read():
    line = sys.stdin.buffer.readline()
    return json.loads(line) if line else None
def ask(method, params):
    send({"id": "srv-1", "method": method, "params": params})
    while True:
        msg = read()
        if msg is None:
            sys.exit(0)
        if msg.get("id") == "srv-1" and "method" not in msg:
            return msg
seen = []
while True:
    msg = read()
    if msg is None:
        break
    if "id" not in msg:
        seen.append(msg)
        continue
    m, p, i = msg["method"], msg.get("params"), msg["id"]
    if m == "initialize":
        send({"method": "configWarning", "params": {"summary": "early"}})
        send({"id": i, "result": {"userAgent": "stub/0.169.0", "echo": p}})
    elif m == "echo":
        send({"id": i, "result": p})
    elif m == "seen":
        send({"id": i, "result": seen})
    elif m == "big":
        send({"id": i, "result": {"data": "x" * p["n"]}})
    elif m == "fail":
        send({"id": i, "error": {"code": -32600, "message": "nope", "data": {"why": "because"}}})
    elif m == "ask":
        reply = ask(p["method"], p.get("params"))
        send({"id": i, "result": reply})
    elif m == "notify_then_answer":
        for k in range(p["n"]):
            send({"method": "tick", "params": {"k": k}})
        send({"id": i, "result": {}})
    elif m == "answer_then_notify":
        send({"id": i, "result": {}})
        send({"method": "late", "params": {"ok": True}})
    elif m == "garbage":
        out.write(b"not json\n\n[1,2]\n"); out.flush()
        send({"id": i, "result": "after garbage"})
    elif m == "die":
        sys.exit(3)
    elif m == "silence":
        pass
sys.exit(0)
"""


def spawn(**kw):
    return AppServerClient.spawn([sys.executable, "-c", STUB], **kw)


async def test_initialize_sends_client_info_experimental_flag_and_initialized():
    async with spawn() as c:
        result = await c.initialize()
        assert result["userAgent"] == "stub/0.169.0"
        sent_params = result["echo"]
        assert sent_params["clientInfo"]["name"]
        assert sent_params["capabilities"] == {"experimentalApi": True}
        assert await c.request("seen") == [{"method": "initialized"}]
        # a notification that came before the response was still recorded
        assert c.notifications[0]["method"] == "configWarning"
    assert c.returncode == 0


async def test_wire_format_has_no_jsonrpc_field_and_raw_lines_are_kept():
    async with spawn() as c:
        await c.request("echo", {"a": 1})
        await c.notify("hello")
    sent = [json.loads(line) for line in c.sent]
    assert sent == [{"id": 1, "method": "echo", "params": {"a": 1}}, {"method": "hello"}]
    assert all(b"jsonrpc" not in line and not line.endswith(b"\n") for line in c.sent)
    assert json.loads(c.received[0]) == {"id": 1, "result": {"a": 1}}


async def test_error_responses_raise_rpc_error_with_code_and_data():
    async with spawn() as c:
        with pytest.raises(RpcError) as info:
            await c.request("fail")
        assert (info.value.code, info.value.message, info.value.data) == (-32600, "nope", {"why": "because"})
        # the session is still usable afterwards
        assert await c.request("echo", [1]) == [1]


async def test_lines_of_tens_of_megabytes_round_trip():
    big = "y" * (24 * 1024 * 1024)
    async with spawn() as c:
        assert (await c.request("echo", {"s": big}, timeout=60))["s"] == big
        result = await c.request("big", {"n": 30 * 1024 * 1024}, timeout=60)
        assert len(result["data"]) == 30 * 1024 * 1024
    assert len(c.received[-1]) > 30 * 1024 * 1024


async def test_server_requests_go_to_the_registered_handler():
    async with spawn() as c:
        seen = []

        async def on_tool(params):
            seen.append(params)
            await trio.sleep(0)
            return {"contentItems": [], "success": True}

        c.on_server_request("item/tool/call", on_tool)
        reply = await c.request("ask", {"method": "item/tool/call", "params": {"tool": "t"}})
        assert reply == {"id": "srv-1", "result": {"contentItems": [], "success": True}}
        assert seen == [{"tool": "t"}]
        assert c.server_requests[0]["method"] == "item/tool/call"
        assert (await c.wait_server_request("item/tool/call", timeout=1))["id"] == "srv-1"


async def test_unknown_server_requests_and_failing_handlers_get_error_replies():
    async with spawn() as c:
        reply = await c.request("ask", {"method": "weird/thing", "params": {}})
        assert reply["error"]["code"] == -32601

        async def broken(params):
            raise ValueError("boom")

        async def refusing(params):
            raise RpcError(-32000, "refused", {"x": 1})

        c.on_server_request("a/broken", broken)
        c.on_server_request("a/refusing", refusing)
        reply = await c.request("ask", {"method": "a/broken"})
        assert reply["error"]["code"] == -32603 and "boom" in reply["error"]["message"]
        reply = await c.request("ask", {"method": "a/refusing"})
        assert reply["error"] == {"code": -32000, "message": "refused", "data": {"x": 1}}


async def test_wait_notification_sees_past_and_future_notifications():
    async with spawn() as c:
        await c.request("notify_then_answer", {"n": 3})
        # already received before we asked
        assert await c.wait_notification("tick", lambda p: p["k"] == 2, timeout=1) == {"k": 2}
        mark = c.mark()
        with pytest.raises(TimeoutError):
            await c.wait_notification("tick", timeout=0.2, since=mark)
        await c.request("answer_then_notify")
        assert await c.wait_notification("late", timeout=5, since=mark) == {"ok": True}
        assert len(c.notifications_for("tick")) == 3


async def test_non_json_lines_are_recorded_and_skipped():
    async with spawn() as c:
        assert await c.request("garbage") == "after garbage"
    assert b"not json" in c.received
    assert b"[1,2]" in c.received


async def test_a_dying_server_fails_pending_requests_instead_of_hanging():
    async with spawn() as c:
        with pytest.raises(ServerGone):
            await c.request("die", timeout=10)
        with pytest.raises(ServerGone):
            await c.wait_notification("never", timeout=10)
    assert c.returncode == 3


async def test_request_timeout_raises_timeout_error():
    async with spawn() as c:
        with pytest.raises(TimeoutError):
            await c.request("silence", timeout=0.2)


async def test_body_exceptions_come_out_unwrapped_and_the_child_is_reaped():
    with pytest.raises(KeyError):
        async with spawn() as c:
            await c.request("echo", {})
            raise KeyError("from the test body")
    assert c.returncode is not None


async def test_stderr_is_captured_by_default():
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('to stderr\\n'); sys.stdin.read()"]
    async with AppServerClient.spawn(argv) as c:
        pass
    assert "to stderr" in c.stderr_text


async def test_outer_cancellation_tears_the_session_down():
    with trio.move_on_after(0.3) as scope:
        async with spawn() as c:
            await c.request("silence", timeout=30)
    assert scope.cancelled_caught
    assert c.returncode is not None


async def test_requests_after_the_server_exited_fail_fast():
    async with spawn() as c:
        with pytest.raises(ServerGone):
            await c.request("die")
        with pytest.raises(ServerGone):
            await c.request("echo", {}, timeout=30)


async def test_teardown_of_a_child_that_never_reads_stdin_does_not_hang():
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]  # never reads stdin
    with trio.move_on_after(5) as scope:
        async with AppServerClient.spawn(argv, close_timeout=0.5) as c:
            with trio.move_on_after(0.3):
                await c.notify("flood", {"x": "z" * (8 * 1024 * 1024)})
    assert not scope.cancelled_caught, "teardown hung on a blocked send"
    assert c.returncode is not None
