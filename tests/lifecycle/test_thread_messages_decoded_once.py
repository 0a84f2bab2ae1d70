"""The thread methods the sidecar intercepts, and their answers, are each
decoded at most once and encoded at most once.

Through a real ``Proxy`` with the lifecycle (an engine with a tool of its
own) in front of the fake app-server: a ``thread/start`` whose params get the
engine's tool joined to the client's, and its answer (read by the relay's
observer, the lifecycle's opening, the archive, the tools); then the answers
to ``thread/resume``, ``thread/fork``, ``thread/read`` and a client's
``thread/revert`` (whose result the revert's cursors are wrapped into). A
marker in the thread's ``cwd`` (echoed in every answer about it) attributes
the decodes and encodes to the one message (``tests.support.codec_count``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engines import ToolCallResult, ToolSpec
from engines.api import EngineInfo
from engines.testkit import RecordingEngine
from tests.support.codec_count import Counts, counted
from tests.support.lifecycle import frame, sidecar, wait_until

MARKER = "traced-5d1e0b"
CWD = f"/tmp/{MARKER}"


class ToolEngine(RecordingEngine):
    def tools(self) -> list[ToolSpec]:
        return [ToolSpec(name="lcm_grep", description="search", input_schema={"type": "object"})]

    async def call_tool(self, params: Any) -> Any:
        return ToolCallResult(text="none")


def engine() -> ToolEngine:
    return ToolEngine(info=EngineInfo(id="t", name="t", version="1"))


def at_most_once(counts: Counts) -> None:
    assert len(counts.decodes) <= 1, str(counts)
    assert len(counts.encodes) <= 1, str(counts)


async def test_a_thread_start_with_engine_tools_and_its_answer_are_each_decoded_once_and_encoded_once(tmp_path):
    async with sidecar(tmp_path, engine()) as run:
        rid = run.new_id()
        client_tool = {"type": "function", "name": "get_weather", "description": "", "inputSchema": {}}
        line = frame({"id": rid, "method": "thread/start", "params": {"cwd": CWD, "dynamicTools": [client_tool], "clientOnlyField": 1}})
        with counted(MARKER.encode(), legs=2) as counts:
            await run.send(line)
            answer = await run.wait_response(rid)
        request, response = counts.legs
        assert len(request.decodes) == 1 and len(request.encodes) == 1 and len(request.parses) == 1, str(request)
        assert len(response.decodes) == 1 and len(response.parses) == 1 and not response.encodes, str(response)
        [sent] = run.received("thread/start")
        assert [t["name"] for t in sent["params"]["dynamicTools"]] == ["get_weather", "lcm_grep"], "the engine's tool joined the client's"
        assert sent["params"]["clientOnlyField"] == 1
        thread_id = answer["result"]["thread"]["id"]
        await wait_until(lambda: thread_id in run.lifecycle.sessions, what="the session")


async def opened(run: Any) -> str:
    thread_id = await run.start_thread(cwd=CWD)
    await run.turn(thread_id, "the first turn")
    await run.turn(thread_id, "the second turn")
    return thread_id


async def answer_counted(run: Any, method: str, params: dict[str, Any]) -> tuple[Counts, dict[str, Any]]:
    """The answer to one request (its params do not hold the marker: the
    answer's ``cwd`` does), counted until it reaches the client."""
    rid = run.new_id()
    with counted(MARKER.encode()) as counts:
        await run.send(frame({"id": rid, "method": method, "params": params}))
        answer = await run.wait_response(rid)
    assert "result" in answer, answer
    return counts, answer


MODES = ["per_turn", "delta"]
"""(delta: the archive may wrap the cursors of reads and reverts, the lifecycle's modes that rebuild.)"""


@pytest.mark.parametrize("mode", MODES)
async def test_the_answers_to_resume_fork_and_read_are_each_decoded_once(tmp_path, mode):
    async with sidecar(tmp_path, engine(), mode=mode) as run:
        thread_id = await opened(run)
        for method in ("thread/read", "thread/resume", "thread/fork"):
            params = {"threadId": thread_id, "includeTurns": True} if method == "thread/read" else {"threadId": thread_id}
            counts, answer = await answer_counted(run, method, params)
            assert len(counts.decodes) <= 1 and len(counts.encodes) <= 1, f"{method}: {counts}"
            assert answer["result"]["thread"]["cwd"] == CWD


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_revert_s_answer_is_decoded_once_and_encoded_once(tmp_path, mode):
    async with sidecar(tmp_path, engine(), mode=mode) as run:
        thread_id = await opened(run)
        turns = (await run.request("thread/read", {"threadId": thread_id, "includeTurns": True}))["result"]["thread"]["turns"]
        counts, answer = await answer_counted(run, "thread/revert", {"threadId": thread_id, "beforeTurnId": turns[-1]["id"]})
        at_most_once(counts)
        assert json.dumps(answer["result"]).count(MARKER) >= 1
