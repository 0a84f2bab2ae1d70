"""The rules for a turn that overflowed Codex's context window
(``sidecar/session/overflow.py``): pure, no process (the lists of Codex
methods that name a turn are checked against codex's schema in
``tests/protocol/test_turn_naming_methods.py``)."""

from __future__ import annotations

import pytest

from sidecar.session.overflow import after_compaction, client_sees, overflowed, verdict

OVERFLOW = {"message": "Codex ran out of room in the model's context window.", "codexErrorInfo": "contextWindowExceeded"}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OVERFLOW, True),
        ({"message": "x", "codexErrorInfo": "other"}, False),
        ({"message": "x", "codexErrorInfo": "usageLimitExceeded"}, False),
        ({"message": "x", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 400}}}, False),
        ({"message": "x", "codexErrorInfo": None}, False),
        ({"message": "context_length_exceeded"}, False),  # the text is not read: only Codex's code
        (None, False),
    ],
)
def test_only_codex_s_context_window_code_is_an_overflow(error, expected):
    assert overflowed(error) is expected


RETRY = {"owns_compaction": True, "held": True, "attempt": 0, "item_types": ["userMessage"]}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, "retry"),
        ({"item_types": []}, "retry"),
        ({"owns_compaction": False}, "engine-does-not-own-compaction"),
        ({"held": False}, "not-a-held-turn"),
        ({"attempt": 1}, "already-retried"),
        ({"item_types": ["userMessage", "commandExecution"]}, "turn-has-output"),
        ({"item_types": ["agentMessage"]}, "turn-has-output"),
    ],
)
def test_a_turn_is_retried_once_and_only_when_nothing_of_it_would_repeat(change, reason):
    found = verdict(**{**RETRY, **change})
    assert found.reason == reason and found.retry is (reason == "retry")


@pytest.mark.parametrize(
    ("ok", "compacted", "reason"),
    [(True, True, "retry"), (True, False, "nothing-compacted"), (False, False, "compaction-failed"), (False, True, "compaction-failed")],
)
def test_the_retry_goes_only_when_the_engine_made_room(ok, compacted, reason):
    found = after_compaction(ok=ok, compacted=compacted)
    assert found.reason == reason and found.retry is (reason == "retry")


def test_the_client_sees_the_retry_without_its_second_start_and_second_copy_of_the_input():
    user = {"type": "userMessage", "id": "u2"}
    assert client_sees("turn/started", None, None) == ("drop", None)
    assert client_sees("item/started", user, None) == ("drop", "u2")
    assert client_sees("item/completed", user, "u2") == ("drop", "u2")
    # A later userMessage (a turn/start that joined the retry) is the client's: shown.
    assert client_sees("item/completed", {"type": "userMessage", "id": "u3"}, "u2") == ("rename", "u2")
    assert client_sees("item/completed", {"type": "agentMessage", "id": "a1"}, "u2") == ("rename", "u2")
    for method in ("error", "turn/completed", "item/agentMessage/delta", "item/tool/call"):
        assert client_sees(method, None, "u2") == ("rename", "u2")
