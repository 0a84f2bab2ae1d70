"""Unit behaviour of the fake Responses API server (no codex needed).

Every live test trusts this server to speak the SSE shape Codex expects and
to record exactly what it was sent, so its behaviour is pinned here.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support.harness import ROOT
from tools.fake_model import (
    SHELL_TOOL_NAME,
    Delay,
    Failed,
    FakeModel,
    FunctionCall,
    Gate,
    Hang,
    HttpError,
    ShellCall,
    Text,
    estimate_tokens,
    input_texts,
    tool_names,
)


def _body(text: str = "hello", **extra) -> dict:
    body = {
        "model": "mock-model",
        "stream": True,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
        "tools": [],
    }
    body.update(extra)
    return body


def _post(model: FakeModel, body, path: str = "/v1/responses", headers: dict | None = None):
    """POST and return (status, content-type, raw body)."""
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request("POST", path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), raw


def _events(raw: bytes) -> list[dict]:
    """Parse an SSE body, checking each `event:` line names its payload type."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        payload = json.loads(lines["data"])
        assert lines["event"] == payload["type"]
        events.append(payload)
    return events


@pytest.fixture
def model():
    with FakeModel() as m:
        yield m


def test_base_url_points_at_a_listening_loopback_port(model):
    assert model.base_url == f"http://127.0.0.1:{model.port}/v1"
    with socket.create_connection(("127.0.0.1", model.port), timeout=5):
        pass


def test_a_websocket_upgrade_gets_http_1_1_426_and_consumes_no_step(model):
    """Codex tries a Responses WebSocket first under OpenClaw's openai provider;
    a 426 in an HTTP/1.1 status line makes it fall back to HTTP at once (any
    other status, or HTTP/1.0, and it retries five times)."""
    model.script(Text("for the POST"))
    with socket.create_connection(("127.0.0.1", model.port), timeout=10) as sock:
        sock.sendall(
            b"GET /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        head = sock.recv(4096).split(b"\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 426")
    assert model.requests == [] and model.pending_steps == 1
    status, _, raw = _post(model, _body())
    assert status == 200 and "for the POST" in raw.decode()


def test_text_reply_is_a_complete_responses_stream(model):
    model.script(Text("hi there"))
    status, ctype, raw = _post(model, _body("hello"))
    assert status == 200
    assert ctype.startswith("text/event-stream")
    events = _events(raw)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added",
        "response.output_text.delta",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[2]["delta"] == "hi there"
    item = events[3]["item"]
    assert item["type"] == "message" and item["role"] == "assistant"
    assert item["content"] == [{"type": "output_text", "text": "hi there", "annotations": []}]
    usage = events[4]["response"]["usage"]
    assert usage["input_tokens_details"] == {"cached_tokens": 0}
    assert usage["input_tokens"] == estimate_tokens(_body("hello")["input"])
    assert usage["output_tokens"] == estimate_tokens("hi there")
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert events[4]["response"]["output"] == [item]


def test_input_tokens_grow_with_the_request_input(model):
    small = _events(_post(model, _body("x"))[2])[-1]["response"]["usage"]["input_tokens"]
    big = _events(_post(model, _body("x" * 4000))[2])[-1]["response"]["usage"]["input_tokens"]
    assert big > small + 900


def test_requests_are_recorded_in_order_and_defaults_are_numbered(model):
    model.script(Text("first"))
    replies = []
    for text in ("a", "b", "c"):
        events = _events(_post(model, _body(text))[2])
        replies.append(events[3]["item"]["content"][0]["text"])
    assert replies == ["first", "ack 2", "ack 3"]
    assert [input_texts(r) for r in model.requests] == [["a"], ["b"], ["c"]]
    assert model.pending_steps == 0


def test_function_call_step_emits_a_function_call_item(model):
    model.script(FunctionCall("get_weather", {"city": "Paris"}, call_id="call_1"), FunctionCall("t", "{bad"))
    item = _events(_post(model, _body())[2])[-2]["item"]
    assert item["type"] == "function_call"
    assert item["name"] == "get_weather"
    assert json.loads(item["arguments"]) == {"city": "Paris"}
    assert item["call_id"] == "call_1"
    second = _events(_post(model, _body())[2])[-2]["item"]
    assert second["arguments"] == "{bad"  # strings go out unchanged
    assert second["call_id"] == "call_fake_2"  # a fresh id per request when none is given


def test_shell_call_targets_codex_exec_command_tool():
    call = ShellCall("ls -la", sandbox_permissions="require_escalated", justification="why", login=False)
    assert call.name == SHELL_TOOL_NAME == "exec_command"
    assert json.loads(call.encoded_arguments()) == {
        "cmd": "ls -la",
        "sandbox_permissions": "require_escalated",
        "justification": "why",
        "login": False,
    }


def test_http_error_step_returns_the_status_and_body(model):
    model.script(HttpError(429, {"error": {"message": "slow down"}}), HttpError(503, "plain"))
    status, _, raw = _post(model, _body())
    assert status == 429
    assert json.loads(raw) == {"error": {"message": "slow down"}}
    status, _, raw = _post(model, _body())
    assert (status, raw) == (503, b"plain")


def test_failed_step_reports_response_failed(model):
    model.script(Failed("kaput", code="server_error"))
    status, _, raw = _post(model, _body())
    assert status == 200
    events = _events(raw)
    assert [e["type"] for e in events] == ["response.created", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "kaput"}


def test_delay_then_step_replies_with_the_inner_step(model):
    model.script(Delay(0.05, then=Text("late")), Delay(0.01))
    assert _events(_post(model, _body())[2])[3]["item"]["content"][0]["text"] == "late"
    # A bare Delay falls back to the default reply for that request number.
    assert _events(_post(model, _body())[2])[3]["item"]["content"][0]["text"] == "ack 2"


def test_callable_step_sees_the_request_body(model):
    model.script(lambda body: Text("echo " + input_texts(body)[0]), lambda body: None)
    assert _events(_post(model, _body("ping"))[2])[3]["item"]["content"][0]["text"] == "echo ping"
    assert _events(_post(model, _body("x"))[2])[3]["item"]["content"][0]["text"] == "ack 2"


def _start_hanging_request(model: FakeModel) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", model.port), timeout=10)
    data = json.dumps(_body()).encode()
    sock.sendall(
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    received = b""
    while b"response.created" not in received:
        chunk = sock.recv(65536)
        assert chunk, "server closed before response.created"
        received += chunk
    return sock


def _wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_hang_is_released_when_the_client_disconnects(model):
    model.script(Hang())
    sock = _start_hanging_request(model)
    assert model.in_flight == 1
    sock.close()
    assert _wait_until(lambda: model.in_flight == 0), "hanging handler kept running after disconnect"
    # The server still answers afterwards.
    assert _post(model, _body())[0] == 200


def test_hang_does_not_block_shutdown():
    model = FakeModel().start()
    model.script(Hang(), Delay(3600, then=Text("never")))
    hung = _start_hanging_request(model)
    delayed = threading.Thread(target=lambda: _post_quietly(model), daemon=True)
    delayed.start()
    assert _wait_until(lambda: model.in_flight == 2)
    closer = threading.Thread(target=model.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    try:
        assert not closer.is_alive(), "close() blocked on a hanging reply"
        assert _wait_until(lambda: model.in_flight == 0)
    finally:
        hung.close()


def test_a_gate_answers_only_once_opened_and_never_blocks_shutdown():
    model = FakeModel().start()
    opened, never = threading.Event(), threading.Event()
    model.script(Gate(opened, Text("after")), Gate(never))
    answers: list[bytes] = []
    first = threading.Thread(target=lambda: answers.append(_post(model, _body())[2]), daemon=True)
    first.start()
    assert _wait_until(lambda: model.in_flight == 1)
    first.join(timeout=0.3)
    assert answers == []  # held: not even the stream's start
    opened.set()
    first.join(timeout=10)
    assert _events(answers[0])[3]["item"]["content"][0]["text"] == "after"
    held = threading.Thread(target=lambda: _post_quietly(model), daemon=True)
    held.start()
    assert _wait_until(lambda: model.in_flight == 1)
    closer = threading.Thread(target=model.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive(), "close() blocked on a gate never opened"
    assert _wait_until(lambda: model.in_flight == 0)


def _post_quietly(model: FakeModel) -> None:
    try:
        _post(model, _body())
    except Exception:
        pass


def test_wait_for_requests_returns_or_times_out(model):
    with pytest.raises(TimeoutError):
        model.wait_for_requests(1, timeout=0.05)
    t = threading.Thread(target=lambda: _post(model, _body("later")))
    t.start()
    got = model.wait_for_requests(1, timeout=10)
    t.join()
    assert input_texts(got[0]) == ["later"]


async def test_wait_for_requests_async_does_not_block_the_event_loop(model):
    import trio

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, lambda: _post(model, _body("async")))
        got = await model.wait_for_requests_async(1, timeout=10)
    assert input_texts(got[0]) == ["async"]


def test_concurrent_requests_each_consume_one_step(model):
    n = 12
    model.script(*[Text(f"r{i}") for i in range(n)])
    results: list[str] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        text = _events(_post(model, _body(f"q{i}"))[2])[3]["item"]["content"][0]["text"]
        with lock:
            results.append(text)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == sorted(f"r{i}" for i in range(n))
    assert sorted(input_texts(r)[0] for r in model.requests) == sorted(f"q{i}" for i in range(n))


def test_gzip_request_bodies_are_decoded(model):
    raw = gzip.compress(json.dumps(_body("zipped")).encode())
    assert _post(model, raw, headers={"Content-Encoding": "gzip"})[0] == 200
    assert input_texts(model.requests[0]) == ["zipped"]


def test_unknown_routes_and_bad_bodies_are_rejected_without_consuming_steps(model):
    model.script(Text("kept"))
    assert _post(model, _body(), path="/v1/chat/completions")[0] == 404
    assert _post(model, b"{not json")[0] == 400
    assert model.requests == []
    assert _events(_post(model, _body())[2])[3]["item"]["content"][0]["text"] == "kept"
    assert model.http_log[0] == ("POST", "/v1/chat/completions")


def test_request_helpers_read_roles_and_namespaced_tools():
    body = {
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u1"}]},
            {"type": "function_call", "name": "x", "arguments": "{}", "call_id": "c"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a1"}]},
        ],
        "tools": [
            {"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "inner"}]},
            {"type": "web_search"},
        ],
    }
    assert input_texts(body) == ["dev", "u1", "a1"]
    assert input_texts(body, role="user") == ["u1"]
    assert tool_names(body) == ["exec_command", "ns", "inner"]


def test_module_runs_as_a_server_and_keeps_stdout_clean():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.fake_model", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        def answered() -> bool:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("POST", "/v1/responses", body=json.dumps(_body()), headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                ok = resp.status == 200 and b"ack 1" in resp.read()
                conn.close()
                return ok
            except OSError:
                return False

        assert _wait_until(answered, timeout=15), "python -m tools.fake_model never answered"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert out == b""
    assert b"listening on" in err


def test_the_model_and_reasoning_effort_of_each_request_are_logged_in_order(model):
    _post(model, _body(model="gpt-main"))
    _post(model, _body(model="summariser-mini", reasoning={"effort": "low", "summary": "auto"}))
    assert model.models == [("gpt-main", None), ("summariser-mini", "low")]


def test_requests_matched_by_slow_wait_while_the_others_answer():
    model = FakeModel().start()
    try:
        model.slow(600, when=lambda body: body.get("model") == "slow-mini")
        late: list = []
        waiting = threading.Thread(target=lambda: late.append(_post(model, _body(model="slow-mini"))), daemon=True)
        waiting.start()
        model.wait_for_requests(1)
        status, _, raw = _post(model, _body("quick", model="gpt-main"))
        assert status == 200 and _events(raw)[-1]["type"] == "response.completed"
        assert model.in_flight == 1 and not late  # the slow one is still thinking
    finally:
        model.close()  # releases it
    waiting.join(timeout=10)
    assert not waiting.is_alive()
