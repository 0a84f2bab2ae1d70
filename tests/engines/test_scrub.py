"""The shared secret scanner (``engines.scrub``): the shapes its own rules
add to detect-secrets', and what must stay (the recording suite,
``tests/relay/test_record_scanner.py``, plants every shape in frames)."""

from __future__ import annotations

import pytest

from engines.scrub import CREDENTIAL, redact_credentials, scrub

# (text, what must go, what must stay)
ADDED = {
    "Hugging Face token": ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567 set", "hf_AbCdEf", "token  set"),
    "Google API key": ("GOOGLE=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok", "AIzaSyD", "GOOGLE="),
    "Authorization token": ("Authorization: token 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef", "Authorization: token "),
    "Authorization basic": ('-H "authorization: Basic dXNlcjpodW50ZXIy"', "dXNlcjpodW50ZXIy", "authorization: Basic "),
    "password is": ("my password is hunter2.", "hunter2", "my password is "),
    "password was, quoted": ("the old passphrase was 'correct-horse-battery' ok", "correct-horse", "the old passphrase was "),
    "password set to": ("DB password set to Tr0ub4dor&3 yesterday", "Tr0ub4dor", "yesterday"),
}


@pytest.mark.parametrize("shape", list(ADDED))
def test_the_added_shapes_are_found_and_the_sentence_around_them_stays(shape):
    text, gone, kept = ADDED[shape]
    out = scrub(text)
    assert gone not in out
    assert CREDENTIAL in out
    assert kept in out.replace(CREDENTIAL, "")


@pytest.mark.parametrize(
    "text",
    [
        "the password is stored in vault",
        "password is required",
        "Your password is not strong enough",
        "the password was changed yesterday",
        "hf_hub_download(repo_id='gpt2')",
        "AIza is how Google keys begin",
        "Authorization: token <redacted>",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    ],
)
def test_prose_about_credentials_is_not_taken_for_one(text):
    assert scrub(text) == text


def test_a_scrubbed_text_is_not_scrubbed_again():
    once = scrub("my password is hunter2 and hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567")
    assert scrub(once) == once


def test_json_values_keep_their_shape_and_lose_their_credentials():
    value = {"env": {"DB_PASSWORD": "pw1", "PATH": "/bin"}, "headers": {"X": "y"}, "n": 3, "cmd": "echo hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"}
    assert redact_credentials(value) == {"env": {"DB_PASSWORD": CREDENTIAL, "PATH": "/bin"}, "headers": {"X": CREDENTIAL}, "n": 3, "cmd": f"echo {CREDENTIAL}"}
    clean = {"a": [1, "plain text"], "b": None}
    assert redact_credentials(clean) is clean  # nothing to change: the same object


def _every_shape_text() -> list[str]:
    from tests.relay.test_record_scanner import SHAPES

    texts: list[str] = [t for t, _, _ in ADDED.values()]

    def walk(value) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            texts.extend(f"{k}={v}" for k, v in value.items() if isinstance(v, str))
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for frame, _ in SHAPES.values():
        walk(frame)
    return texts


def test_a_rule_skipped_for_its_missing_literal_would_have_found_nothing(monkeypatch):
    """The gates (literals every match of a rule holds) change no result."""
    import engines.scrub as scrub_module

    texts = _every_shape_text()
    gated = [scrub_module.spans(t) for t in texts]
    monkeypatch.setattr(scrub_module, "_passes", lambda gates, text, low: True)
    assert [scrub_module.spans(t) for t in texts] == gated
    assert sum(map(len, gated)) >= 40


def test_the_slow_keyword_rules_are_gated_by_what_they_need():
    from engines.scrub import _rules

    whole, _, _, _, extra = _rules()
    cloudant = [gates for regex, gates in whole if "cloudant|cl|clou" in regex.pattern]
    assert cloudant and all(("key", "pass", "password", "pw", "pwd", "token") in gates[1] for gates in cloudant)
    assert extra[3] == (False, (("hf_",),))


def test_keyword_rules_read_lines_a_value_on_the_next_line_included():
    assert scrub("database:\n  password:\n    hunter2\n  host: db") == f"database:\n  password:\n    {CREDENTIAL}\n  host: db"
    out = scrub('secret = "abc123def"\nnext line stays\n"and this one"')
    assert out.endswith('next line stays\n"and this one"') and "abc123def" not in out


def test_an_unquoted_keyword_value_ends_with_its_line():
    """The keyword rules' values run to anything but ``\\v`` (they were
    written for one line): in a pasted file the next line stays."""
    text = "export OPENAI_API_KEY=opaque42 && ./run\n# next step\nDB_PASSWORD=cmdpw ./migrate\nPATH=/usr/bin\nAccountKey=" + "A" * 88 + ";\nhost: db"
    out = scrub(text)
    assert "opaque42" not in out and "cmdpw" not in out and "AAAA" not in out
    assert out.splitlines()[1::2] == ["# next step", "PATH=/usr/bin", "host: db"]


def test_a_urls_password_goes_and_its_host_stays():
    out = scrub("psql postgres://admin:hunter2pw@db.example.com/app")
    assert "hunter2pw" not in out and out.endswith("db.example.com/app")
