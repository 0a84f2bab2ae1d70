"""The engine's host: bind, state folder, token counts, and the pure parts
of ``complete`` (what a completion thread is started with, what its frames
say, how the edge hides it)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engines import CompleteParams, EngineHostError
from engines.tokens import count_tokens
from protocol import encode_notification, encode_response
from sidecar.history.backing import BackingThreads
from sidecar.host import SidecarHost, bind_engine, engine_state_dir
from sidecar.host.completion import LEAN_BASE_INSTRUCTIONS, LEAN_CONFIG, Collector, Completions, start_params, turn_params
from sidecar.methods import METHODS
from sidecar.relay import RpcError
from sidecar.rows import thread_id_keys

ROOT = Path(__file__).resolve().parents[2]
OWNED = "01a20132-6799-70b2-9e11-b6afa40528ac"
CLIENT = "01a20132-7ebc-77b0-b0eb-acc03048d214"


def fixture_lines(name: str) -> list[bytes]:
    """The fixture's codex>client frames, as Codex wrote them."""
    out = []
    for raw in (ROOT / "fixtures" / name).read_text().splitlines():
        record = json.loads(raw)
        if record["dir"] == "codex>client":
            out.append(json.dumps(record["frame"]).encode())
    return out


def test_the_state_folder_is_the_engines_own_and_private(tmp_path):
    folder = engine_state_dir(tmp_path, "lossless")
    assert folder == tmp_path / "engines" / "lossless"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    os.chmod(folder, 0o755)
    assert stat.S_IMODE(os.stat(engine_state_dir(tmp_path, "lossless")).st_mode) == 0o700
    assert engine_state_dir(tmp_path, "../up").parent == tmp_path / "engines"


def test_token_counts_are_exact_o200k():
    host = SidecarHost("/nowhere")
    text = "The quick brown fox jumps over the lazy dog, twice: 12345."
    assert host.count_tokens(text) == count_tokens(text)
    assert host.count_tokens(text, model="gpt-5.5") == count_tokens(text)
    assert host.count_tokens(text) != len(text) // 4


async def test_complete_before_the_relay_runs_raises_the_hosts_error():
    with pytest.raises(EngineHostError):
        await SidecarHost("/nowhere").complete(CompleteParams(system="s", prompt="p"))


class _Binds:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.hosts: list[object] = []

    async def bind(self, host: object) -> None:
        self.hosts.append(host)
        if self.fail:
            raise RuntimeError("cannot open my store")


async def test_bind_gives_the_engine_its_host_once():
    engine, host = _Binds(), SidecarHost("/state")
    assert await bind_engine(engine, host, 5.0)
    assert engine.hosts == [host]


async def test_an_engine_whose_bind_raises_is_not_bound(logs):
    engine = _Binds(fail=True)
    assert not await bind_engine(engine, SidecarHost("/state"), 5.0)
    assert any("bind failed" in r.getMessage() for r in logs.records)
    assert not any("cannot open my store" in r.getMessage() for r in logs.records)


async def test_an_engine_without_bind_needs_none():
    assert await bind_engine(object(), SidecarHost("/state"), 5.0)


def test_a_completion_thread_is_ephemeral_with_the_engines_instructions_and_the_clients_model():
    client = {"cwd": "/work", "model": "gpt-5.5", "modelProvider": "openai", "sandbox": "danger-full-access"}
    plain = start_params(client, CompleteParams(system="You summarise.", prompt="text"), lean=False)
    assert plain == {
        "cwd": "/work",
        "model": "gpt-5.5",
        "modelProvider": "openai",
        "ephemeral": True,
        "developerInstructions": "You summarise.",
        "approvalPolicy": "never",
        "sandbox": "read-only",
    }
    lean = start_params(client, CompleteParams(system="You summarise.", prompt="text"))
    assert lean == {**plain, "baseInstructions": LEAN_BASE_INSTRUCTIONS, "config": LEAN_CONFIG}
    assert "dynamicTools" not in lean
    assert start_params(client, CompleteParams(system="s", prompt="p", model="small"))["model"] == "small"
    assert start_params({}, CompleteParams(system="s", prompt="p"), lean=False).keys() == {"ephemeral", "developerInstructions", "approvalPolicy", "sandbox"}
    assert turn_params(OWNED, CompleteParams(system="s", prompt="Summarise this.")) == {
        "threadId": OWNED,
        "input": [{"type": "text", "text": "Summarise this.", "text_elements": []}],
    }


def test_a_completions_model_goes_to_its_thread_and_its_effort_to_its_turn():
    client = {"cwd": "/work", "model": "gpt-5.5", "modelProvider": "openai"}
    ask = CompleteParams(system="s", prompt="Summarise this.", model="gpt-5.4-mini", effort="low")
    assert start_params(client, ask)["model"] == "gpt-5.4-mini"
    assert "effort" not in start_params(client, ask)
    assert turn_params(OWNED, ask) == {
        "threadId": OWNED,
        "input": [{"type": "text", "text": "Summarise this.", "text_elements": []}],
        "effort": "low",
    }
    assert "effort" not in turn_params(OWNED, CompleteParams(system="s", prompt="p", effort=""))


async def test_a_codex_that_refuses_a_lean_completion_thread_gets_plain_ones_from_then_on():
    starts: list[dict] = []

    class Refusing:
        async def request(self, method, params, raw=False, on_result=None):
            starts.append(params)
            if "baseInstructions" in params:
                raise RpcError(-32602, "unknown field baseInstructions")
            on_result({"thread": {"id": OWNED}})

    completions = Completions(Refusing(), None, 5.0)
    completions.client_thread = {"cwd": "/work"}
    got: list = []
    await completions._start(CompleteParams(system="s", prompt="p"), got.append)
    await completions._start(CompleteParams(system="s", prompt="p"), got.append)
    assert ["baseInstructions" in s for s in starts] == [True, False, False]
    assert got == [{"thread": {"id": OWNED}}] * 2 and completions.lean is False


def test_the_answer_is_the_turns_last_agent_message():
    collector = Collector(OWNED)
    for line in fixture_lines("dynamic_tool_call.jsonl"):
        collector.feed(line)
    assert collector.finished
    result = collector.result()
    assert result.text == "It is 21C and sunny in Paris."
    assert result.usage is not None and result.usage.output == 8 and result.usage.total_tokens == 5290
    assert collector.requests == [0]  # Codex's item/tool/call: refused by the caller


def test_a_failed_turn_raises_the_hosts_error():
    collector = Collector(OWNED)
    for line in fixture_lines("model_error.jsonl"):
        collector.feed(line)
    assert collector.finished
    with pytest.raises(EngineHostError):
        collector.result()


def test_an_owned_threads_frames_go_to_its_listener_and_never_to_the_client():
    backing = BackingThreads("/nonexistent-state", thread_id_keys(METHODS))
    heard: list[bytes] = []
    backing.own(OWNED, heard.append)
    mine = encode_notification("item/completed", {"threadId": OWNED, "turnId": "t", "item": {"type": "agentMessage", "id": "m", "text": "x"}})
    theirs = encode_notification("item/completed", {"threadId": CLIENT, "turnId": "t", "item": {"type": "agentMessage", "id": "m", "text": OWNED}})
    started = encode_notification("thread/started", {"thread": {"id": OWNED}})
    assert backing.notification(mine) is None
    assert backing.notification(started) is None
    assert backing.notification(theirs) is theirs  # an id in text is not routing
    assert heard == [mine, started]
    loaded = encode_response(3, {"data": [CLIENT, OWNED], "nextCursor": None})
    assert json.loads(backing.response(loaded, "thread/loaded/list"))["result"]["data"] == [CLIENT]
    backing.disown(OWNED)
    assert backing.notification(mine) is None  # still hidden
    assert len(heard) == 2
