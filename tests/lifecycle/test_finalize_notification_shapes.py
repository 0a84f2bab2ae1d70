"""What the finalizer takes from ``item/completed``, ``turn/completed`` and
``thread/tokenUsage/updated``, read through their typed views: a frame that
names no thread the sidecar follows (no string threadId, no string turnId)
teaches nothing; a wrong-typed stamp never costs an item, a wrong-typed turn
field never costs the turn; usage and the context window are learnt from the
counts Codex sends."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from protocol import parse
from sidecar.lifecycle.finalize import Finalizer
from sidecar.relay import Message
from sidecar.session.state import ThreadSession, WindowReported, new_session

T = "thr_1"


class _Calls:
    def __init__(self) -> None:
        self.learnt: list[Any] = []

    def learn(self, session: ThreadSession, fact: Any) -> None:
        self.learnt.append(fact)


class _Proxy:
    def __init__(self) -> None:
        self.spawned: list[tuple[Any, ...]] = []

    def spawn(self, fn: Any, *args: Any) -> None:
        self.spawned.append(args)


def _finalizer() -> tuple[Finalizer, ThreadSession, _Calls]:
    session = new_session(T, "key", Path("/dev/null"))
    calls = _Calls()
    ctx = SimpleNamespace(proxy=_Proxy(), sessions={T: session}, state_dir=Path("/dev/null"))
    return Finalizer(ctx, calls, None), session, calls  # type: ignore[arg-type]


def _msg(method: str, params: Any) -> Message:
    body: dict[str, Any] = {"method": method}
    if params is not ...:
        body["params"] = params
    line = json.dumps(body).encode()
    return Message(parse(line), line)


ITEM = {"type": "agentMessage", "id": "it_1", "text": "hi", "newField": {"kept": True}}


async def test_an_item_is_kept_as_codex_sent_it_with_its_stamp():
    fin, session, _ = _finalizer()
    fin.on_item_completed(_msg("item/completed", {"threadId": T, "turnId": "tu_1", "item": ITEM, "completedAtMs": 7}))
    state = session.turns["tu_1"]
    assert state.items == {"it_1": ITEM}
    assert state.item_times == {"it_1": 7}


@pytest.mark.parametrize("stamp", ["7", 7.5, None, [7]], ids=["str", "float", "null", "list"])
async def test_a_wrong_typed_stamp_never_costs_the_item(stamp):
    fin, session, _ = _finalizer()
    fin.on_item_completed(_msg("item/completed", {"threadId": T, "turnId": "tu_1", "item": ITEM, "completedAtMs": stamp}))
    assert session.turns["tu_1"].items == {"it_1": ITEM}
    assert session.turns["tu_1"].item_times == {}


@pytest.mark.parametrize(
    "params",
    [
        ...,
        [],
        {"turnId": "tu_1", "item": ITEM},
        {"threadId": 5, "turnId": "tu_1", "item": ITEM},
        {"threadId": ["x"], "turnId": "tu_1", "item": ITEM},
        {"threadId": "thr_other", "turnId": "tu_1", "item": ITEM},
        {"threadId": T, "item": ITEM},
        {"threadId": T, "turnId": 3, "item": ITEM},
        {"threadId": T, "turnId": "tu_1"},
        {"threadId": T, "turnId": "tu_1", "item": "x"},
        {"threadId": T, "turnId": "tu_1", "item": {"type": "agentMessage"}},
    ],
    ids=["no-params", "list", "no-thread", "int-thread", "list-thread", "other-thread", "no-turn", "int-turn", "no-item", "str-item", "no-item-id"],
)
def test_an_item_frame_naming_no_followed_turn_teaches_nothing(params):
    fin, session, _ = _finalizer()
    assert fin.on_item_completed(_msg("item/completed", params)) is None
    assert session.turns == {}


LAST = {"inputTokens": 100, "cachedInputTokens": 40, "cacheWriteInputTokens": 3, "outputTokens": 20, "reasoningOutputTokens": 0, "totalTokens": 120}


def test_usage_and_window_are_learnt():
    fin, session, calls = _finalizer()
    usage = {"total": LAST, "last": LAST, "modelContextWindow": 2000}
    fin.on_token_usage(_msg("thread/tokenUsage/updated", {"threadId": T, "turnId": "tu_1", "tokenUsage": usage}))
    assert session.last_usage is not None
    assert (session.last_usage.input, session.last_usage.cache_read, session.last_usage.output) == (60, 40, 20)
    assert (session.last_usage.cache_write, session.last_usage.total_tokens) == (3, 120)
    assert session.current_token_count == 100
    assert session.prompt_cache is not None and session.prompt_cache.cached_input_tokens == 40
    assert calls.learnt == [WindowReported(2000)]


def test_a_window_without_last_counts_is_learnt_alone():
    fin, session, calls = _finalizer()
    fin.on_token_usage(_msg("thread/tokenUsage/updated", {"threadId": T, "tokenUsage": {"modelContextWindow": 2000}}))
    assert session.last_usage is None
    assert calls.learnt == [WindowReported(2000)]


@pytest.mark.parametrize(
    "params",
    [..., {"tokenUsage": {"last": LAST}}, {"threadId": 5, "tokenUsage": {"last": LAST}}, {"threadId": T}, {"threadId": T, "tokenUsage": None}, {"threadId": T, "tokenUsage": "x"}],
    ids=["no-params", "no-thread", "int-thread", "no-usage", "null-usage", "str-usage"],
)
def test_a_usage_frame_without_a_followed_thread_or_usage_teaches_nothing(params):
    fin, session, calls = _finalizer()
    fin.on_token_usage(_msg("thread/tokenUsage/updated", params))
    assert session.last_usage is None and calls.learnt == []


TURN = {"id": "tu_1", "status": "completed", "items": [], "durationMs": "soon", "newField": 1}


def test_a_completed_turn_is_finalized_as_codex_sent_it_even_with_a_field_of_an_odd_shape():
    fin, session, _ = _finalizer()
    fin.on_turn_completed(_msg("turn/completed", {"threadId": T, "turn": TURN}))
    assert fin.proxy.spawned == [(session, TURN)]
    assert session.completed_turns == {"tu_1"}


@pytest.mark.parametrize(
    "params",
    [..., {"turn": TURN}, {"threadId": 5, "turn": TURN}, {"threadId": "thr_other", "turn": TURN}, {"threadId": T}, {"threadId": T, "turn": "x"}, {"threadId": T, "turn": {"id": 5}}],
    ids=["no-params", "no-thread", "int-thread", "other-thread", "no-turn", "str-turn", "int-turn-id"],
)
def test_a_turn_frame_naming_no_followed_turn_finalizes_nothing(params):
    fin, session, _ = _finalizer()
    assert fin.on_turn_completed(_msg("turn/completed", params)) is None
    assert fin.proxy.spawned == [] and session.completed_turns == set()
