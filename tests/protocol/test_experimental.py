"""Codex's experimental API as the sidecar knows it: the table against
codex's own schema, and codex's rule for what a stable connection may send."""

from __future__ import annotations

import pytest

from protocol import experimental
from tests.support.codex import CODEX_BIN, MISSING
from tools import experimental_api


@pytest.mark.codex
@pytest.mark.skipif(CODEX_BIN is None, reason=MISSING)
def test_the_table_is_what_codex_s_own_schema_gates():
    """Generated at test time from the codex under test: a method or member
    codex newly gates fails here, by name (regenerate with
    ``python -m tools.experimental_api --codex-bin CODEX --write``)."""
    assert CODEX_BIN is not None
    table = experimental_api.table(CODEX_BIN)
    assert sorted(table.methods ^ experimental.METHODS) == []
    assert {m: sorted(p) for m, p in table.fields.items()} == {m: sorted(p) for m, p in experimental.FIELDS.items()}
    assert table.server_requests == experimental.SERVER_REQUESTS


def test_an_experimental_method_is_refused_whatever_its_params():
    assert experimental.refusal("collaborationMode/list", {}) == "collaborationMode/list"
    assert experimental.refusal("collaborationMode/list", None) == "collaborationMode/list"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"dynamicTools": []}, "thread/start.dynamicTools"),
        ({"dynamicTools": [{"name": "x"}]}, "thread/start.dynamicTools"),
        ({"experimentalRawEvents": True}, "thread/start.experimentalRawEvents"),
        ({"environments": {}}, "thread/start.environments"),
        ({"model": "m", "dynamicTools": None}, None),
        ({"experimentalRawEvents": False}, None),
        ({}, None),
        (None, None),
    ],
)
def test_a_member_counts_when_present_with_a_value_other_than_null_or_false(params, named):
    """As codex 0.169.0 answers (seen on the wire): an empty list or object is
    a use, ``null`` and ``false`` are not."""
    assert experimental.refusal("thread/start", params) == named


def test_a_nested_member_is_named_by_its_dotted_path():
    assert experimental.refusal("thread/items/list", {"threadId": "t", "deferOutput": {"commandExecution": True}}) == "thread/items/list.deferOutput.commandExecution"
    assert experimental.refusal("thread/items/list", {"threadId": "t", "deferOutput": {}}) is None


def test_the_error_is_codex_s_own():
    assert experimental.refusal_error("turn/start.additionalContext") == (-32600, "turn/start.additionalContext requires experimentalApi capability")


def test_stable_methods_need_no_look_at_their_params():
    assert not experimental.gated("thread/read")
    assert experimental.gated("turn/start") and experimental.gated("collaborationMode/list")
