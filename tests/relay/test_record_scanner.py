"""Credentials in free text never reach a recording: the secret scanner's
rules (``engines.scrub``, Yelp's detect-secrets) applied to every string of
every frame, with or without --record-redact.

Each shape is planted in the place such a credential turns up: a command a
model runs, a tool call's JSON-string ``arguments``, a prompt, a process's
env map, a command's output. ``core`` is the part that must not survive.
"""

from __future__ import annotations

import json

import pytest

from sidecar.record import CREDENTIAL, Recorder, read_recording

RSA = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAPLANTEDrsaBODYline1\nPLANTEDrsaBODYline2==\n-----END RSA PRIVATE KEY-----"
OPENSSH = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUPLANTEDssh\n-----END OPENSSH PRIVATE KEY-----"
EC = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIPLANTEDecBODY\n-----END EC PRIVATE KEY-----"


def command(text: str) -> dict:
    return {"method": "item/started", "params": {"item": {"type": "commandExecution", "id": "c1", "command": text, "cwd": "/w"}}}


def arguments(text: str) -> dict:
    """A function call as Codex's raw items carry it: arguments as a JSON string."""
    return {"method": "rawResponseItem/completed", "params": {"item": {"type": "function_call", "name": "http", "arguments": text, "call_id": "k"}}}


def prompt(text: str) -> dict:
    return {"id": 5, "method": "turn/start", "params": {"threadId": "t1", "input": [{"type": "text", "text": text}]}}


def env(name: str, value: str) -> dict:
    return {"id": 6, "method": "command/exec", "params": {"command": ["make", "deploy"], "env": {name: value, "PATH": "/usr/bin"}}}


def output(text: str) -> dict:
    return {"method": "item/completed", "params": {"item": {"type": "commandExecution", "id": "c1", "aggregatedOutput": text}}}


SHAPES = {
    "curl X-Api-Key header": (command("curl -H 'X-Api-Key: PLANTEDapikey9f8e7d6c' https://api.example.com"), "PLANTEDapikey"),
    "curl bearer header": (command('curl -H "Authorization: Bearer PLANTEDbearer0a1b2c3d" https://x'), "PLANTEDbearer"),
    "export OPENAI_API_KEY sk-proj": (prompt("run it\nexport OPENAI_API_KEY=sk-proj-PLANTEDopenaiAbCdEf0123456789"), "PLANTEDopenai"),
    "export OPENAI_API_KEY opaque": (prompt("export OPENAI_API_KEY=PLANTEDopaque42 && ./run"), "PLANTEDopaque"),
    "legacy OpenAI key": (output("sk-PLANTEDabcdefghijklmT3BlbkFJabcdefghijklmnopqrst"), "PLANTEDabcdefghijklm"),
    "GitHub ghp_ token": (prompt("use ghp_PLANTEDghpAbCdEfGhIjKlMnOpQrStUvWx01 to push"), "PLANTEDghp"),
    "GitHub gho_ token": (output("token: gho_PLANTEDghoAbCdEfGhIjKlMnOpQrStUvWx01"), "PLANTEDgho"),
    "GitLab token": (command("git clone https://oauth2:glpat-PLANTEDgitlab0123456789@gitlab.com/x.git"), "PLANTEDgitlab"),
    "AWS access key id": (command("aws configure set aws_access_key_id AKIAPLANTEDAWSKEY012"), "AKIAPLANTEDAWSKEY012"),
    "AWS secret access key": (output("aws_secret_access_key = 'PLANTEDwJalrXUtnFEMIK7MDENGbPxRfiCYEXAMP'"), "PLANTEDwJalrXUtnFEMI"),
    "Slack bot token": (output("SLACK=xoxb-123456789012-1234567890123-PLANTEDslackbot0123"), "PLANTEDslackbot"),
    "Slack webhook": (command("curl -X POST https://hooks.slack.com/services/T000PLANTED/B000PLANTED/PLANTEDhookXYZ"), "PLANTEDhook"),
    "Stripe live secret key": (arguments('{"stripe": "sk_live_PLANTEDstripe0123456789ab"}'), "PLANTEDstripe"),
    "Stripe restricted key": (output("rk_live_PLANTEDrestrict012345678a"), "PLANTEDrestrict"),
    "JWT": (output("id_token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJQTEFOVEVEand0In0.PLANTEDjwtSignature0123"), "PLANTEDjwtSignature"),
    "RSA private key block": (output(f"cat id_rsa\n{RSA}\ndone"), "PLANTEDrsaBODY"),
    "OpenSSH private key block": (prompt(f"here is my key:\n{OPENSSH}"), "PLANTEDssh"),
    "EC private key block": (arguments(json.dumps({"pem": EC})), "PLANTEDecBODY"),
    "SendGrid key": (output("SG.PLANTEDsendgrid0123456.PLANTEDsendgridSecret0123456789abcdefghijklmn"), "PLANTEDsendgrid"),
    "Twilio API key": (output("twilio SKplanted0123456789abcdef012345678"), "SKplanted0123456789"),
    "npm auth token": (command("echo //registry.npmjs.org/:_authToken=npm_PLANTEDnpm0123456789abcdef > .npmrc"), "PLANTEDnpm"),
    "PyPI token": (command("twine upload -p pypi-AgEIcHlwaS5vcmcPLANTEDpypi0123456789012345678901234567890123456789012345678901234567890123456789"), "PLANTEDpypi"),
    "basic auth in a URL": (command("psql postgres://admin:PLANTEDdbpass@db.example.com/app"), "PLANTEDdbpass"),
    "password in YAML output": (output("database:\n  password: PLANTEDyamlpw\n  host: db"), "PLANTEDyamlpw"),
    "DB_PASSWORD in a command": (command("DB_PASSWORD=PLANTEDcmdpw ./migrate"), "PLANTEDcmdpw"),
    "apiKey in JSON-string arguments": (arguments('{"url": "https://api.example.com", "apiKey": "PLANTEDargkey01"}'), "PLANTEDargkey"),
    "password in JSON-string arguments": (arguments('{"user": "bob", "password": "PLANTEDargpw"}'), "PLANTEDargpw"),
    "client_secret in code": (output('client_secret = "PLANTEDclientsecret"'), "PLANTEDclientsecret"),
    "Azure storage key": (output("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "PLANTEDazure" + "A" * 76 + ";"), "PLANTEDazure"),
    "Discord bot token": (output("MTPLANTEDdiscord012345678.GhIjKl.PLANTEDdiscordSecret0123456789"), "PLANTEDdiscordSecret"),
    "Telegram bot token": (prompt("bot 123456789:PLANTEDtelegramAbCdEfGhIjKlMnOpQrStU"), "PLANTEDtelegram"),
    "Mailchimp key": (output("0123456789abcdefplanted012345678-us12"), "plant"),
    "Square OAuth secret": (output("sq0csp-PLANTEDsquare0123456789abcdefghijklmnopqrstu"), "PLANTEDsquare"),
    "GH_PAT in an env map": (env("GH_PAT", "ghp_PLANTEDenvpat0AbCdEfGhIjKlMnOpQrStUvW"), "PLANTEDenvpat"),
    "DB_PASSWORD in an env map": (env("DB_PASSWORD", "PLANTEDenvpw"), "PLANTEDenvpw"),
    "X-Api-Key in an env map": (env("X-Api-Key", "PLANTEDenvkey"), "PLANTEDenvkey"),
    # Shapes detect-secrets' own rules miss (engines.scrub.EXTRA_RULES).
    "Hugging Face token": (prompt("log in with hf_PLANTEDhfAbCdEfGhIjKlMnOpQrStUvWx0 then pull"), "PLANTEDhf"),
    "Google API key": (command("curl 'https://maps.googleapis.com/api?key=AIzaSyPLANTEDgoogle0123456789abcdefghij'"), "PLANTEDgoogle"),
    "Authorization token header": (command("curl -H 'Authorization: token d3adbeefd3adbeefd3adbeefd3adbeefd3adbeef' https://api.github.com"), "d3adbeefd3adbeef"),
    "password in words": (prompt("the staging box: my password is PLANTEDwords9! so log in"), "PLANTEDwords9"),
}


def _record(path, redact: bool, frames: list[dict]) -> bytes:
    rec = Recorder(path, redact=redact)
    for frame in frames:
        rec.record("codex>client", json.dumps(frame).encode())
    rec.close()
    return path.read_bytes()


@pytest.mark.parametrize("redact", [False, True], ids=["plain", "record-redact"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_credential_never_reaches_the_recording(tmp_path, shape, redact):
    frame, core = SHAPES[shape]
    data = _record(tmp_path / "rec.jsonl", redact, [frame])
    (entry,) = read_recording(tmp_path / "rec.jsonl")
    text = (entry.line() or b"").decode()
    assert core.encode() not in data, shape
    assert core not in json.dumps(json.loads(text)), "not even escaped"
    assert CREDENTIAL in json.dumps(json.loads(text)) or redact


def test_at_least_thirty_shapes_in_every_place():
    assert len(SHAPES) >= 40
    methods = {frame.get("method") for frame, _ in SHAPES.values()}
    assert {"item/started", "rawResponseItem/completed", "turn/start", "command/exec", "item/completed"} <= methods


def test_what_is_around_a_credential_stays(tmp_path):
    frames = [SHAPES["curl X-Api-Key header"][0], SHAPES["export OPENAI_API_KEY sk-proj"][0], SHAPES["GH_PAT in an env map"][0], SHAPES["apiKey in JSON-string arguments"][0]]
    _record(tmp_path / "rec.jsonl", False, frames)
    got = [json.loads(e.line()) for e in read_recording(tmp_path / "rec.jsonl")]
    assert got[0]["params"]["item"]["command"] == f"curl -H 'X-Api-Key: {CREDENTIAL}' https://api.example.com"
    assert got[1]["params"]["input"][0]["text"] == f"run it\nexport OPENAI_API_KEY={CREDENTIAL}"
    assert got[2]["params"]["env"] == {"GH_PAT": CREDENTIAL, "PATH": "/usr/bin"}
    assert json.loads(got[3]["params"]["item"]["arguments"]) == {"url": "https://api.example.com", "apiKey": CREDENTIAL}


def test_ids_hashes_and_ordinary_text_are_not_taken_for_credentials(tmp_path):
    line = json.dumps(
        {
            "method": "item/completed",
            "params": {
                "threadId": "01a20132-6799-70b2-9e11-b6afa40528ac",
                "item": {"type": "commandExecution", "aggregatedOutput": "commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: A <a@b.c>\n10.0.0.1 ok", "command": "git log -1"},
            },
        }
    ).encode()
    rec = Recorder(tmp_path / "rec.jsonl")
    rec.record("codex>client", line)
    rec.close()
    assert next(read_recording(tmp_path / "rec.jsonl")).line() == line  # byte for byte


def test_recordings_stay_deterministic(tmp_path):
    frames = [frame for frame, _ in SHAPES.values()]

    def frames_of(name: str) -> list[bytes]:
        _record(tmp_path / name, False, frames)
        return [e.line() or b"" for e in read_recording(tmp_path / name)]

    assert frames_of("a.jsonl") == frames_of("b.jsonl")
