"""No credential reaches a recording, with or without --record-redact.

A key is planted in every place the app-server protocol (codex 0.169.0's
schema) can carry one, in requests, responses and server requests, and the
recording's bytes are searched for it. Two keys: an opaque one, which only
the key-name rules can catch, and an OpenAI-shaped one in free text, which
only the value rule can.
"""

from __future__ import annotations

import json

import pytest

from sidecar.record import CREDENTIAL, Recorder, is_credential_key, read_recording

OPAQUE = "PLANTEDopaque7f3a9c0d"
SHAPED = "sk-proj-PLANTEDshaped0123456789"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJQTEFOVEVEIn0.c2lnbmF0dXJl"

FRAMES = [
    # account/login/start, every login type.
    {"id": 1, "method": "account/login/start", "params": {"type": "apiKey", "apiKey": OPAQUE}},
    {
        "id": 2,
        "method": "account/login/start",
        "params": {"type": "chatgptAuthTokens", "accessToken": OPAQUE, "chatgptAccountId": "acct", "chatgptPlanType": "pro"},
    },
    # Codex asking the client for fresh tokens, and the answer.
    {"id": 0, "method": "account/chatgptAuthTokens/refresh", "params": {"reason": "unauthorized", "previousAccountId": "acct"}},
    {"id": 0, "result": {"accessToken": OPAQUE, "chatgptAccountId": "acct", "idToken": OPAQUE, "refreshToken": OPAQUE}},
    # Config overrides carried by thread/start and config writes.
    {
        "id": 3,
        "method": "thread/start",
        "params": {
            "config": {
                "model_providers.corp.experimental_bearer_token": OPAQUE,
                "model_providers.corp.http_headers": {"Authorization": "Basic " + OPAQUE, "X-Api-Key": OPAQUE},
                "mcp_servers.gh.env": {"GITHUB_TOKEN": OPAQUE, "PATH": "/usr/bin"},
                "otel.exporter": {"otlp-http": {"endpoint": "http://x", "headers": {"x-honeycomb-team": OPAQUE, "cookie": OPAQUE}}},
            },
            "developerInstructions": "be brief",
        },
    },
    {"id": 4, "method": "config/value/write", "params": {"keyPath": "model_providers.corp.experimental_bearer_token", "value": OPAQUE}},
    {"id": 5, "method": "config/batchWrite", "params": {"edits": [{"keyPath": "mcp_servers.gh.env.GITHUB_TOKEN", "value": OPAQUE}]}},
    # Environment maps of processes the client asks codex to run.
    {"id": 6, "method": "command/exec", "params": {"command": ["env"], "env": {"OPENAI_API_KEY": OPAQUE, "AWS_SECRET_ACCESS_KEY": OPAQUE}}},
    {"id": 7, "method": "process/spawn", "params": {"command": ["x"], "env": {"DB_PASSWORD": OPAQUE}}},
    # Remote executors, attestation, cloud credentials, request headers.
    {"id": 8, "method": "environment/add", "params": {"url": "wss://exec", "authBearerToken": OPAQUE}},
    {"id": 9, "result": {"token": OPAQUE}},
    {"id": 10, "result": {"environmentCredentials": [{"accessKeyId": OPAQUE, "secretAccessKey": OPAQUE, "sessionToken": OPAQUE}]}},
    {"id": 11, "result": {"requirements": {"requestHeaders": [{"name": "Authorization", "value": OPAQUE}]}}},
    # Key-shaped values where no key name says so: pasted into a prompt, in tool output.
    {"id": 12, "method": "turn/start", "params": {"threadId": "t1", "input": [{"type": "text", "text": f"my key is {SHAPED} ok"}]}},
    {"method": "item/completed", "params": {"item": {"type": "commandExecution", "aggregatedOutput": f"Authorization: Bearer {OPAQUE}\n{JWT}"}}},
]


def _record(path, redact: bool, frames=FRAMES) -> bytes:
    rec = Recorder(path, redact=redact)
    for n, frame in enumerate(frames):
        rec.record("client>codex" if n % 2 else "codex>client", json.dumps(frame).encode())
    # A frame that is not JSON still goes to the file (base64): blank it there too.
    rec.record("client>codex", b'{"apiKey": "' + OPAQUE.encode() + b'", broken')
    rec.note("sidecar", f"login with {SHAPED}")
    rec.close()
    return path.read_bytes()


@pytest.mark.parametrize("redact", [False, True], ids=["plain", "record-redact"])
def test_no_planted_credential_reaches_any_recording_byte(tmp_path, redact):
    data = _record(tmp_path / "rec.jsonl", redact)
    decoded = b"".join(e.line() or b"" for e in read_recording(tmp_path / "rec.jsonl"))
    for secret in (OPAQUE, SHAPED, JWT, "PLANTED"):
        assert secret.encode() not in data
        assert secret.encode() not in decoded, "not in the base64 of a raw frame either"
    assert data.count(CREDENTIAL.encode()) >= 20


def test_credential_redaction_keeps_what_is_not_a_credential(tmp_path):
    _record(tmp_path / "rec.jsonl", redact=False)
    frames = [json.loads(e.line()) for e in read_recording(tmp_path / "rec.jsonl") if e.frame]
    assert frames[0]["params"] == {"type": "apiKey", "apiKey": CREDENTIAL}
    config = frames[4]["params"]["config"]
    assert config["mcp_servers.gh.env"] == {"GITHUB_TOKEN": CREDENTIAL, "PATH": "/usr/bin"}
    assert frames[4]["params"]["developerInstructions"] == "be brief"
    assert frames[13]["params"]["input"][0]["text"] == f"my key is {CREDENTIAL} ok"
    assert frames[3]["result"]["chatgptAccountId"] == "acct"


def test_a_frame_without_credentials_is_recorded_byte_for_byte(tmp_path):
    line = b'{"method":"thread/tokenUsage/updated","params":{"threadId":"t1","tokenUsage":{"total":{"inputTokens":5}}, "x" : 1}}'
    rec = Recorder(tmp_path / "rec.jsonl")
    rec.record("codex>client", line)
    rec.close()
    assert next(read_recording(tmp_path / "rec.jsonl")).line() == line


@pytest.mark.parametrize(
    "key,expected",
    [
        ("apiKey", True),
        ("OPENAI_API_KEY", True),
        ("x-api-key", True),
        ("Authorization", True),
        ("clientSecret", True),
        ("sessionToken", True),
        ("threadId", False),
        ("sortKey", False),
        ("idempotencyKey", False),
        ("text", False),
    ],
)
def test_credential_key_names(key, expected):
    assert is_credential_key(key) is expected
