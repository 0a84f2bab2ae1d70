"""The engine's host, live: real codex 0.169.0, the fake model, the sidecar
as a process.

* An engine's tools are offered to the model as Codex dynamic tools, the
  sidecar answers the model's calls to them through ``call_tool`` (an error
  becomes a result the model reads), and the client sees no frame of them:
  no server request, no item notification, nothing in its reads, before and
  after a restart. A name the client declares itself stays the client's.
* ``host.complete`` from an engine's ``maintain`` runs on a Codex thread the
  client never hears of (no frame names it, no listing shows it: not even
  a ``thread/loaded/list`` the client keeps asking while the thread starts).
* ``lossless``: with the summariser failing, compaction still happens
  (extractive summaries), and the model's ``lcm_grep`` finds a fact the
  assembly no longer holds verbatim.

Engines load by entry point like any third-party engine (a module next to a
``*.dist-info`` on the sidecar's ``PYTHONPATH``). No assertion depends on timing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

from engines.lossless import status as lossless_status
from engines.lossless.summarize import SYSTEM_PROMPT
from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.live import TURN_TIMEOUT, finalized, sidecar, thread_ids_in
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import Failed, FakeModel, FunctionCall, Text, input_texts, tool_names, tool_outputs

pytestmark = needs_codex

DIST = "live-host-engines"
TOOLS_ID = "live-host-tools"
COMPLETE_ID = "live-host-complete"
UNBOUND_ID = "live-host-unbindable"
SLOW_ID = "live-host-slow"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

ENGINES = f'''\
import json, os

from engines import CompleteParams, EngineHostError, EngineInfo, MaintainResult, ToolCallResult, ToolSpec
from engines.testkit import RecordingEngine


class Tools(RecordingEngine):
    """Two tools: note_lookup answers from its arguments, broken_tool raises."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{TOOLS_ID}", name="tools", version="0"))

    def tools(self):
        return [
            ToolSpec(name="note_lookup", description="Look up a note by key.",
                     input_schema={{"type": "object", "properties": {{"key": {{"type": "string"}}}}, "required": ["key"]}}),
            ToolSpec(name="broken_tool", description="Always fails.", input_schema={{"type": "object", "properties": {{}}}}),
        ]

    async def call_tool(self, params):
        if params.name == "broken_tool":
            raise RuntimeError("SECRET-DETAIL")
        return ToolCallResult(text="NOTE[" + str(params.arguments.get("key")) + "] on " + params.session_id)


class Complete(RecordingEngine):
    """Each maintenance asks the host for one completion and keeps its answer
    (or the error's type) in its state folder."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{COMPLETE_ID}", name="complete", version="0"))
        self.host = None

    async def bind(self, host):
        self.host = host

    async def handle_maintain(self, params):
        try:
            result = await self.host.complete(CompleteParams(system="SYS-MARK summarise", prompt="PROMPT-MARK " + params.reason))
            record = {{"text": result.text, "usage": result.usage is not None}}
        except EngineHostError as exc:
            record = {{"error": type(exc).__name__}}
        with open(os.path.join(self.host.state_dir, "answers.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\\n")
        return MaintainResult(changed=False)


class Unbindable(Tools):
    """Its bind fails: the sidecar must run legacy, offering no tools."""

    def __init__(self, config=None):
        RecordingEngine.__init__(self, config, info=EngineInfo(id="{UNBOUND_ID}", name="unbindable", version="0"))

    async def bind(self, host):
        raise OSError("cannot open my store")


class Slow(Tools):
    """Its tool never answers."""

    def __init__(self, config=None):
        RecordingEngine.__init__(self, config, info=EngineInfo(id="{SLOW_ID}", name="slow", version="0"))

    async def call_tool(self, params):
        import trio

        await trio.sleep_forever()
'''


def install(site: Path) -> None:
    site.mkdir(parents=True)
    (site / "live_host_engines.py").write_text(ENGINES)
    info = site / "live_host_engines-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        f"[openclaw.context_engines]\n{TOOLS_ID} = live_host_engines:Tools\n{COMPLETE_ID} = live_host_engines:Complete\n"
        f"{UNBOUND_ID} = live_host_engines:Unbindable\n{SLOW_ID} = live_host_engines:Slow\n"
    )


def env_for(tmp: Path, home: Path, engine: str, config: str = "") -> dict[str, str]:
    (tmp / "sidecar.toml").write_text(config)
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
            "CODEX_SIDECAR_ENGINE": engine,
            "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST,
            "CODEX_SIDECAR_STATE_DIR": str(tmp / "state"),
            "CODEX_SIDECAR_CONFIG": str(tmp / "sidecar.toml"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(tmp / "site"), str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return codex_env(home, base)


def dynamic_items(value: object) -> list[dict]:
    """Every dynamicToolCall item anywhere in a read's answer."""
    found: list[dict] = []
    if isinstance(value, dict):
        if value.get("type") == "dynamicToolCall":
            found.append(value)
        for child in value.values():
            found += dynamic_items(child)
    elif isinstance(value, list):
        for child in value:
            found += dynamic_items(child)
    return found


async def reads(client, thread_id: str) -> list[dict]:
    return [
        await client.request("thread/read", {"threadId": thread_id, "includeTurns": True}),
        await client.request("thread/turns/list", {"threadId": thread_id, "itemsView": "full"}),
        await client.request("thread/items/list", {"threadId": thread_id}),
    ]


def client_lines(client) -> list[bytes]:
    """What the client got from Codex's side: everything but the answers to
    its own ``sidecar/...`` requests (whose status names the engine's tools)."""
    own = {json.loads(line).get("id") for line in client.sent if b'"sidecar/' in line}
    return [line for line in client.received if json.loads(line).get("id") not in own or b'"method"' in line]


async def test_engine_tool_calls_are_answered_by_the_sidecar_and_never_reach_the_client(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    install(tmp_path / "site")
    client_calls: list[dict] = []

    async def weather(params: dict) -> dict:
        client_calls.append(params)
        return {"contentItems": [{"type": "inputText", "text": f"{params['tool']}: the client's answer"}], "success": True}

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, TOOLS_ID)
        model.script(
            FunctionCall("note_lookup", {"key": "k1"}, call_id="call_note"),
            FunctionCall("broken_tool", {}, call_id="call_broken"),
            FunctionCall("get_weather", {"city": "Paris"}, call_id="call_weather"),
            Text("first done"),
            # Thread B declares note_lookup itself: the call is the client's.
            FunctionCall("note_lookup", {"key": "k2"}, call_id="call_theirs"),
            Text("second done"),
        )
        async with sidecar(env, work) as client:
            client.on_server_request("item/tool/call", weather)
            tid = await client.start_thread(cwd=str(work), dynamicTools=[WEATHER])
            done = await client.run_turn(tid, "look things up", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            await finalized(client, tid, done["turn"]["id"])
            own_tool = {**WEATHER, "name": "note_lookup", "description": "The client's own note lookup."}
            other = await client.start_thread(cwd=str(work), dynamicTools=[own_tool])
            done_b = await client.run_turn(other, "use my tool", timeout=TURN_TIMEOUT)
            assert done_b["turn"]["status"] == "completed", done_b
            answers = await reads(client, tid)
            status = await client.request("sidecar/status")
            lines = client_lines(client)
        requests = model.requests

        # The model was offered the engine's tools next to the client's, and read the engine's answers.
        assert {"note_lookup", "broken_tool", "get_weather"} <= set(tool_names(requests[0]))
        assert tool_names(requests[4]).count("note_lookup") == 1  # thread B: the client's, once
        got = tool_outputs(requests[3])
        assert got["call_note"] == f"NOTE[k1] on {tid}"
        assert "broken_tool" in got["call_broken"] and "RuntimeError" in got["call_broken"]
        assert "SECRET-DETAIL" not in got["call_broken"]
        assert got["call_weather"] == "get_weather: the client's answer"
        # The client answered its own calls only.
        assert [(c["tool"], c["callId"]) for c in client_calls] == [("get_weather", "call_weather"), ("note_lookup", "call_theirs")]
        assert tool_outputs(requests[5])["call_theirs"] == "note_lookup: the client's answer"
        # No frame of the engine's calls reached the client, and no read shows them.
        assert not [line for line in lines if b"call_note" in line or b"call_broken" in line]
        assert not [line for line in lines if b"broken_tool" in line or b"NOTE[" in line]
        # The tool-call items the client was told of are its own two calls.
        told = [n["item"]["id"] for n in client.notifications_for("item/completed") if n["item"].get("type") == "dynamicToolCall"]
        assert told == ["call_weather", "call_theirs"]
        assert [i["tool"] for a in answers for i in dynamic_items(a)] == ["get_weather"] * 3
        assert status["lifecycle"]["host"]["engineTools"]["calls"] == 2
        assert status["lifecycle"]["host"]["engineTools"]["errors"] == 1
        # The transcript mirror has the client's tool call, not the engine's.
        mirrors = b"".join(p.read_bytes() for p in (tmp_path / "state").rglob(f"*{tid}*.jsonl"))
        assert b"call_weather" in mirrors and b"call_note" not in mirrors

        # A restarted sidecar still answers the thread's engine tools (Codex keeps them with the thread).
        model.script(FunctionCall("note_lookup", {"key": "k3"}, call_id="call_again"), Text("third done"))
        async with sidecar(env, work) as again:
            again.on_server_request("item/tool/call", weather)
            await again.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            done = await again.run_turn(tid, "once more", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            answers = await reads(again, tid)
            lines = client_lines(again)
        assert tool_outputs(model.requests[-1])["call_again"] == f"NOTE[k3] on {tid}"
        assert again.server_requests == []
        assert not [line for line in lines if b"call_again" in line or b"call_note" in line]
        assert [i["tool"] for a in answers for i in dynamic_items(a)] == ["get_weather"] * 3


async def test_an_engine_whose_bind_fails_runs_as_legacy_and_offers_no_tools(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    install(tmp_path / "site")
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, UNBOUND_ID)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work), dynamicTools=[WEATHER])
            done = await client.run_turn(tid, "hello", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            status = await client.request("sidecar/status")
    assert tool_names(model.requests[0]).count("note_lookup") == 0
    assert "get_weather" in tool_names(model.requests[0])
    assert "lifecycle" not in status  # legacy: the lifecycle does not run
    assert "bind failed; running legacy" in client.stderr_text
    # The engine's own words, which say what to fix (issue 36: "what to install" was dropped), first line, a URL's password masked.
    assert "cannot open my store" in client.stderr_text


async def test_an_engine_tool_that_never_answers_gives_the_model_an_error_result(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    install(tmp_path / "site")
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, SLOW_ID)
        env["CODEX_SIDECAR_ENGINE_DEADLINE"] = "1"
        model.script(FunctionCall("note_lookup", {"key": "k"}, call_id="call_slow"), Text("gave up"))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            done = await client.run_turn(tid, "look it up", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            lines = client_lines(client)
    answer = tool_outputs(model.requests[1])["call_slow"]
    assert "note_lookup" in answer and "no answer within 1 seconds" in answer
    assert client.server_requests == []
    assert not [line for line in lines if b"call_slow" in line]


async def test_host_complete_during_maintenance_is_invisible_to_the_client(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    install(tmp_path / "site")
    answers = tmp_path / "state" / "engines" / COMPLETE_ID / "answers.jsonl"

    def reply(body: dict) -> Text:
        if any("SYS-MARK" in t for t in input_texts(body, "developer")):
            return Text("COMPLETION-ANSWER")
        return Text("turn reply")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, COMPLETE_ID)
        model.script(*[reply] * 8)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            polled: list[list[str]] = []  # the client's loaded threads, asked again and again while completions start

            async def poll() -> None:
                while True:
                    polled.append((await client.request("thread/loaded/list", {}))["data"])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll)
                for n in range(2):
                    done = await client.run_turn(tid, f"turn {n}", timeout=TURN_TIMEOUT)
                    assert done["turn"]["status"] == "completed", done
                    await finalized(client, tid, done["turn"]["id"])
                with trio.fail_after(TURN_TIMEOUT):
                    while not answers.exists() or len(answers.read_text().splitlines()) < 2:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
            await trio.sleep(0.5)  # anything trailing the last completion would have come by now
            listed = await client.request("thread/list", {})
            loaded = await client.request("thread/loaded/list", {})
            read_back = await reads(client, tid)
            status = await client.request("sidecar/status")
        lines = client_lines(client)  # every frame, up to the sidecar's exit
        # A restarted sidecar (Codex reading its sessions from disk) lists no completion thread either.
        async with sidecar(env, work) as again:
            relisted = await again.request("thread/list", {})

        records = [json.loads(line) for line in answers.read_text().splitlines()]
        assert records[:2] == [{"text": "COMPLETION-ANSWER", "usage": True}] * 2
        asked = [r for r in model.requests if any("SYS-MARK" in t for t in input_texts(r, "developer"))]
        assert len(asked) >= 2
        assert all(any("PROMPT-MARK" in t for t in input_texts(r, "user")) for r in asked)
        assert all(not {"note_lookup", "get_weather"} & set(tool_names(r)) for r in asked)
        # Lean: none of the tools a text-only call cannot use, nor Codex's coding-agent prompt.
        turns = [r for r in model.requests if r not in asked]
        assert "exec_command" in tool_names(turns[0])
        assert all(not {"exec_command", "web_search", "multi_agent_v1", "create_goal"} & set(tool_names(r)) for r in asked)
        assert all(len(json.dumps(r)) < len(json.dumps(turns[0])) / 3 for r in asked)
        # Nothing about the completion threads reached the client.
        named: set[str] = set()
        for line in lines:
            thread_ids_in(json.loads(line), named)
        assert named == {tid}
        # Nor what a thread/start sends that names no thread (one start: the client's).
        unattributed = [n for n in (json.loads(line) for line in lines) if n.get("method") in ("configWarning", "remoteControl/status/changed")]
        assert len(unattributed) <= 2, unattributed
        assert not [line for line in lines if b"COMPLETION-ANSWER" in line or b"PROMPT-MARK" in line or b"SYS-MARK" in line]
        assert [t["id"] for t in listed["data"]] == [tid]
        assert [t["id"] for t in relisted["data"]] == [tid]
        assert loaded["data"] == [tid]
        assert polled and all(data == [tid] for data in polled), [data for data in polled if data != [tid]][:3]
        # The client's thread holds its two turns and nothing of the completions.
        assert len(read_back[0]["thread"]["turns"]) == len(read_back[1]["data"]) == 2
        assert not [a for a in read_back if any(mark in json.dumps(a) for mark in ("COMPLETION-ANSWER", "PROMPT-MARK", "SYS-MARK"))]
        assert status["lifecycle"]["host"]["completions"]["calls"] >= 2
        assert len([n for n in (json.loads(line) for line in lines) if n.get("method") == "turn/completed"]) == 2


LOSSLESS_CONFIG = """\
[engines.lossless]
token_budget = 2000
own_framing_tokens = 0
fresh_tail_tokens = 200
fresh_tail_messages = 2
leaf_chunk_tokens = 300
leaf_summary_tokens = 60
condensed_summary_tokens = 80
# room for summaries beside the 200-token fresh tail (the default 0.15 leaves 100)
compact_target = 0.3
summary_timeout = 5.0
step_deadline = 10.0
"""
FACT = "The vault code is ZEBRA-4471."


async def test_lossless_compacts_when_the_summariser_fails_and_recalls_with_lcm_grep(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    store = tmp_path / "state" / "engines" / "lossless"

    def reply(body: dict) -> object:
        if any(SYSTEM_PROMPT[:40] in t for t in input_texts(body, "developer")):
            return Failed("summariser down")
        users = input_texts(body, "user")
        if users and "recall the vault code" in users[-1] and not tool_outputs(body):
            return FunctionCall("lcm_grep", {"query": "vault code"}, call_id="call_recall")
        return Text("noted")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, "lossless", LOSSLESS_CONFIG)
        model.script(*[reply] * 200)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            prompts = [FACT] + [f"filler {n} " + f"word{n} " * 100 for n in range(12)]
            for prompt in prompts:
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                await finalized(client, tid, done["turn"]["id"])
            # Maintenance runs in the background, alongside the next turns: a
            # step that started while turns kept coming may leave a raw part
            # too large for any summary; the next step after more turns will not.
            for n in range(12):
                with trio.move_on_after(5):
                    while not (figures := lossless_status(store, tid))["frameSummaries"]:
                        await trio.sleep(0.1)
                if figures["frameSummaries"]:
                    break
                done = await client.run_turn(tid, f"more {n} " + f"extra{n} " * 100, timeout=TURN_TIMEOUT)
                await finalized(client, tid, done["turn"]["id"])
            assert figures["frameSummaries"], json.dumps(figures)
            done = await client.run_turn(tid, "Please recall the vault code.", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            await finalized(client, tid, done["turn"]["id"])
            answers = await reads(client, tid)
            listed = await client.request("thread/list", {})
            loaded = await client.request("thread/loaded/list", {})
        lines = client_lines(client)  # every frame, up to the sidecar's exit

        figures = lossless_status(store, tid)
        assert figures["fallbackPending"] >= 1
        # The summariser never answered: every summary is the extractive stand-in.
        assert all(d["fallback"] == d["total"] for d in figures["summariesByDepth"].values()), figures["summariesByDepth"]
        assert figures["summariesByDepth"]["0"]["fallback"] >= 1
        assert figures["lastCompaction"]["fallbackSummaries"] >= 1
        turn_requests = [r for r in model.requests if not any(SYSTEM_PROMPT[:40] in t for t in input_texts(r, "developer"))]
        asked = [r for r in turn_requests if "recall the vault code" in input_texts(r, "user")[-1]]
        assert len(asked) == 2, [input_texts(r, "user")[-1][:80] for r in turn_requests[-3:]]
        # The assembly the model got holds summaries; asked to recall, it called
        # lcm_grep, and the sidecar answered with the planted fact.
        assert "[summary sum_" in "\n".join(input_texts(asked[0]))
        assert "ZEBRA-4471" in tool_outputs(asked[1])["call_recall"]
        assert not [line for line in lines if b"call_recall" in line or b"lcm_grep" in line]
        assert not [i for a in answers for i in dynamic_items(a)]
        assert not [a for a in answers if SYSTEM_PROMPT[:40] in json.dumps(a)]
        assert [t["id"] for t in listed["data"]] == [tid] and loaded["data"] == [tid]
        named: set[str] = set()
        for line in lines:
            thread_ids_in(json.loads(line), named)
        assert named == {tid}
        assert not [line for line in lines if SYSTEM_PROMPT[:40].encode() in line]
