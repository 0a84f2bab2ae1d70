"""The fake model's context window (``tools/fake_model.py`` ``context_window``):
an oversized input is rejected as the Responses API rejects it, a smaller one
is answered. (The real codex's reading of it: ``tests/live/test_overflow.py``.)"""

from __future__ import annotations

import http.client
import json

from tools.fake_model import CONTEXT_LENGTH_EXCEEDED, FakeModel, Text, context_window, input_chars


def _post(model: FakeModel, text: str) -> tuple[int, bytes]:
    body = {"model": "mock-model", "stream": True, "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    conn.request("POST", "/v1/responses", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, raw


def test_an_input_over_the_window_gets_context_length_exceeded_and_a_smaller_one_the_reply():
    with FakeModel() as model:
        model.script(context_window(100, Text("fits")), context_window(100, Text("fits")))
        status, raw = _post(model, "x" * 101)
        assert status == 400 and json.loads(raw) == CONTEXT_LENGTH_EXCEEDED
        assert json.loads(raw)["error"]["code"] == "context_length_exceeded"
        status, raw = _post(model, "x" * 100)
        assert status == 200 and b'"text":"fits"' in raw
        assert [input_chars(r) for r in model.requests] == [101, 100]
