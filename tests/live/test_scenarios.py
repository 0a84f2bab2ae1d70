"""Each recorded-session scenario, run straight against the real codex app-server.

These pin what the real protocol does (approval requests, dynamic tool
calls, interrupts, compaction, resume, failures) so fixtures recorded from
the same scenarios, and proxy tests replaying them, rest on checked facts.
Assertions read both sides: the client's notifications and the exact
request bodies the fake model received.
"""

from __future__ import annotations

import json
import logging

import pytest
import trio

from tests.support.codex import CODEX_BIN, needs_codex
from tools.fake_model import FakeModel, input_texts, tool_names
from tools.scenarios import (
    APPROVED_FILE,
    APPROVED_TEXT,
    COMPACTION_SUMMARY,
    DEVELOPER_INSTRUCTIONS,
    MODEL_FAILURE,
    SCENARIOS,
    WEATHER_RESULT,
    codex_connector,
    prepare_codex_home,
    run_scenario,
)

pytestmark = needs_codex

log = logging.getLogger(__name__)

SCENARIO_DEADLINE = 45.0


@pytest.fixture
def model():
    with FakeModel() as m:
        yield m


async def _run(name: str, model: FakeModel, tmp_path):
    scenario = SCENARIOS[name]
    home = prepare_codex_home(scenario, tmp_path / "codex-home", model)
    workdir = tmp_path / "work"
    workdir.mkdir()
    clients: list = []
    try:
        with trio.fail_after(SCENARIO_DEADLINE):
            run = await run_scenario(
                scenario, codex_connector(CODEX_BIN, home, workdir), model, workdir, clients=clients
            )
    except BaseException:
        for i, c in enumerate(clients):
            log.error("codex #%d stderr tail:\n%s", i, c.stderr_text[-4000:])
        raise
    log.info("summary: %s", json.dumps(run.summary))
    return run, workdir


def _items_of(request: dict, item_type: str) -> list[dict]:
    return [i for i in request.get("input") or [] if i.get("type") == item_type]


async def test_conversation(model, tmp_path):
    run, _ = await _run("plain_conversation", model, tmp_path)
    s = run.summary
    assert [t["status"] for t in s["turns"]] == ["completed"] * 3
    assert [t["agent_text"] for t in s["turns"]] == [
        ["Noted: the codeword is PAPAYA."],
        ["Blue it is."],
        ["PAPAYA and blue."],
    ]
    reqs = model.requests
    assert len(reqs) == s["model_requests"] == 3
    users = ["Remember the codeword PAPAYA.", "My favourite colour is blue.", "What are the codeword and my colour?"]
    for i, req in enumerate(reqs):
        # the current user text is the last model input, after Codex's framing
        assert input_texts(req, "user")[-1] == users[i]
        assert DEVELOPER_INSTRUCTIONS in input_texts(req, "developer")
        assert req["prompt_cache_key"] == s["thread_id"]
    # the last request carries the whole conversation so far, in order
    last = input_texts(reqs[2])
    order = [last.index(t) for t in (users[0], "Noted: the codeword is PAPAYA.", users[1], "Blue it is.", users[2])]
    assert order == sorted(order)
    (client,) = run.clients
    assert client.returncode == 0
    assert len(client.notifications_for("turn/completed", threadId=s["thread_id"])) == 3


async def test_approval(model, tmp_path):
    run, workdir = await _run("shell_approval", model, tmp_path)
    s = run.summary
    assert s["approvals"] == [
        {
            "method": "item/commandExecution/requestApproval",
            "itemId": "call_approval_1",
            "command": s["approvals"][0]["command"],
        }
    ]
    assert APPROVED_FILE in s["approvals"][0]["command"]
    assert s["commands"] == [
        {"id": "call_approval_1", "status": "completed", "exitCode": 0, "output": APPROVED_TEXT}
    ]
    # the command really ran, outside the read-only sandbox
    assert (workdir / APPROVED_FILE).read_text() == APPROVED_TEXT
    assert s["turns"][0]["status"] == "completed"
    first, second = model.requests
    assert "exec_command" in tool_names(first)
    outputs = _items_of(second, "function_call_output")
    assert [o["call_id"] for o in outputs] == ["call_approval_1"]
    assert APPROVED_TEXT in outputs[0]["output"]
    (client,) = run.clients
    (request,) = client.server_requests
    assert request["method"] == "item/commandExecution/requestApproval"
    assert request["params"]["threadId"] == s["thread_id"]
    resolved = client.notifications_for("serverRequest/resolved", threadId=s["thread_id"])
    assert [r["requestId"] for r in resolved] == [request["id"]]


async def test_dynamic_tool(model, tmp_path):
    run, _ = await _run("dynamic_tool_call", model, tmp_path)
    s = run.summary
    assert s["tool_calls"] == [{"tool": "get_weather", "callId": "call_weather_1", "arguments": {"city": "Paris"}}]
    assert s["tool_items"] == [{"id": "call_weather_1", "tool": "get_weather", "status": "completed", "success": True}]
    assert s["turns"][0]["status"] == "completed"
    assert s["turns"][0]["agent_text"] == ["It is 21C and sunny in Paris."]
    first, second = model.requests
    assert "get_weather" in tool_names(first)
    outputs = _items_of(second, "function_call_output")
    assert outputs and outputs[0]["call_id"] == "call_weather_1"
    assert WEATHER_RESULT in json.dumps(outputs[0]["output"])
    (client,) = run.clients
    assert [r["method"] for r in client.server_requests] == ["item/tool/call"]


async def test_interrupt(model, tmp_path):
    run, _ = await _run("interrupted_turn", model, tmp_path)
    s = run.summary
    assert s["interrupt_result"] == {}
    assert [t["status"] for t in s["turns"]] == ["interrupted", "completed"]
    assert s["turns"][0]["agent_text"] == []
    assert s["turns"][1]["agent_text"] == ["Back after the interrupt."]
    hung, after = model.requests
    assert input_texts(hung, "user")[-1] == "Think about this for a very long time."
    later_users = input_texts(after, "user")
    # the interrupted input stays in history, followed by Codex's abort marker
    assert "Think about this for a very long time." in later_users
    assert any("<turn_aborted>" in t for t in later_users)
    assert later_users[-1] == "Never mind, just say hi."
    # Codex dropped the hanging HTTP stream, so no reply is still in flight
    with trio.fail_after(10):
        while model.in_flight:
            await trio.sleep(0.02)


async def test_compaction(model, tmp_path):
    run, _ = await _run("native_compaction", model, tmp_path)
    s = run.summary
    assert s["compact_result"] == {}
    assert len(s["compaction_items"]) == 1
    assert [t["status"] for t in s["turns"]] == ["completed"] * 4
    reqs = model.requests
    assert len(reqs) == 4
    compact_req, after = reqs[2], reqs[3]
    # the compaction call asks for a summary of the history so far, with no tools
    assert "Noted blue." in input_texts(compact_req)
    assert not compact_req.get("tools")
    # afterwards the summary replaces the model's replies in the history
    after_texts = input_texts(after)
    assert any(COMPACTION_SUMMARY in t for t in after_texts)
    assert "Noted PAPAYA." not in after_texts and "Noted blue." not in after_texts
    assert input_texts(after, "user")[-1] == "What was the codeword?"
    (client,) = run.clients
    started = [
        p["item"]["type"]
        for p in client.notifications_for("item/started", turnId=s["compaction_turn_id"])
    ]
    assert started == ["contextCompaction"]


async def test_resume(model, tmp_path):
    run, _ = await _run("resume_fresh_process", model, tmp_path)
    s = run.summary
    assert s["resumed_thread_id"] == s["thread_id"]
    assert s["resumed_turn_ids"] == [t["turn_id"] for t in s["turns"][:2]]
    assert [t["status"] for t in s["turns"]] == ["completed"] * 3
    assert s["first_process_exit"] == 0
    first, second = run.clients
    assert first is not second
    assert (first.returncode, second.returncode) == (0, 0)
    # the second process's first model call carries the first process's history
    last = model.requests[-1]
    texts = input_texts(last)
    for expected in ("Remember the word PAPAYA.", "Noted PAPAYA.", "Also remember MANGO.", "Noted MANGO."):
        assert expected in texts
    assert input_texts(last, "user")[-1] == "Which two words did I ask you to remember?"
    assert DEVELOPER_INSTRUCTIONS in input_texts(last, "developer")
    assert last["prompt_cache_key"] == s["thread_id"]
    # the resumed session ran its turn on the same thread id
    assert second.notifications_for("turn/completed", threadId=s["thread_id"])


async def test_model_error(model, tmp_path):
    run, _ = await _run("model_error", model, tmp_path)
    s = run.summary
    failed, after = s["turns"]
    assert failed["status"] == "failed"
    assert MODEL_FAILURE in failed["error"]
    assert s["error_notifications"] == [{"message": failed["error"], "willRetry": False}]
    assert after["status"] == "completed"
    assert after["agent_text"] == ["Recovered."]
    assert len(model.requests) == 2  # retries are off: one call per turn
    # the failed turn's input stays in history for the next turn
    assert "This turn will fail." in input_texts(model.requests[1], "user")
