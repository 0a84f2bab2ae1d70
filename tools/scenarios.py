"""The recorded-session scenarios: one app-server session each, scripted end to end.

Fixtures, live tests and the proxy's drop-in tests all replay these same
sessions, so each scenario drives any app-server-compatible command (the
real codex today, the sidecar with recording on later) and scripts the fake
model itself.  Scenarios normalise nothing: ids, timestamps and paths stay
as the server sent them, so recordings show the real wire traffic.

A scenario is `async def run(client, model, workdir) -> dict`, where
`client` is a spawned but not yet initialized `AppServerClient`, so the
handshake is part of the session.  A scenario that needs another process
(resume by a fresh app-server) also takes `connect`, a zero-argument
callable returning an `async with` context for a new client on the same
CODEX_HOME; it closes `client` first, because Codex's own shutdown is part
of what a resume must survive.

Registry names (`SCENARIOS`) are the fixture file names the replay tests
expect (`fixtures/<name>.jsonl`).

Each scenario's `codex_config()` gives the `make_codex_home` keyword
overrides it needs (e.g. an approval policy that makes Codex ask).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, AsyncContextManager

from tools.client import AppServerClient
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import (
    Failed,
    FakeModel,
    FunctionCall,
    Hang,
    ShellCall,
    Text,
)

log = logging.getLogger(__name__)

#: Opens one more client session (a fresh app-server process).
ClientFactory = Callable[[], AsyncContextManager[AppServerClient]]

TURN_TIMEOUT = 30.0

DEVELOPER_INSTRUCTIONS = "Scenario developer instructions: answer briefly."

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "inputSchema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
WEATHER_RESULT = "Paris: 21C and sunny"

APPROVED_FILE = "approved.txt"
APPROVED_TEXT = "approved-by-client"


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A named session plus what its CODEX_HOME must allow."""

    name: str
    description: str
    run: Callable[..., Awaitable[dict]]
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    needs_connect: bool = False

    def codex_config(self) -> dict[str, Any]:
        """Keyword overrides for `make_codex_home` (approval, sandbox, extra TOML)."""
        return dict(self.config)


@dataclasses.dataclass
class ScenarioRun:
    """What a runner hands back: the summary and every client it opened."""

    summary: dict
    clients: list[AppServerClient]


# --------------------------------------------------------------------------
# small shared steps


async def _open(client: AppServerClient, workdir: os.PathLike | str, **thread_params: Any) -> str:
    await client.initialize(experimental=True)
    params = {"cwd": str(workdir), "developerInstructions": DEVELOPER_INSTRUCTIONS}
    params.update(thread_params)
    return await client.start_thread(**params)


def _turn_summary(completed: dict) -> dict:
    turn = completed.get("turn") or {}
    return {
        "turn_id": turn.get("id"),
        "status": turn.get("status"),
        "error": (turn.get("error") or {}).get("message"),
        "agent_text": [
            item.get("text") for item in turn.get("items") or [] if item.get("type") == "agentMessage"
        ],
    }


def _items(client: AppServerClient, method: str, turn_id: str, item_type: str) -> list[dict]:
    return [
        p["item"]
        for p in client.notifications_for(method, turnId=turn_id)
        if (p.get("item") or {}).get("type") == item_type
    ]


# --------------------------------------------------------------------------
# (a) plain multi-turn conversation


async def conversation(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """Three plain turns: the baseline every projection test starts from."""
    first = len(model.requests)
    model.script(Text("Noted: the codeword is PAPAYA."), Text("Blue it is."), Text("PAPAYA and blue."))
    thread_id = await _open(client, workdir)
    turns = []
    for text in (
        "Remember the codeword PAPAYA.",
        "My favourite colour is blue.",
        "What are the codeword and my colour?",
    ):
        turns.append(_turn_summary(await client.run_turn(thread_id, text, timeout=TURN_TIMEOUT)))
    return {
        "scenario": "plain_conversation",
        "thread_id": thread_id,
        "turns": turns,
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (b) command approval


async def approval(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """The model asks to run a command outside the sandbox; the client approves.

    Under `approval_policy = "on-request"` with a read-only sandbox, an
    `exec_command` call with `sandbox_permissions = "require_escalated"`
    makes Codex send `item/commandExecution/requestApproval`.  The command
    writes a file, which only works unsandboxed, so the file proves it ran.
    """
    first = len(model.requests)
    approvals: list[dict] = []

    async def approve(params: dict) -> dict:
        approvals.append({"method": "item/commandExecution/requestApproval", "params": params})
        return {"decision": "accept"}

    async def approve_legacy(params: dict) -> dict:
        approvals.append({"method": "execCommandApproval", "params": params})
        return {"decision": "approved"}

    client.on_server_request("item/commandExecution/requestApproval", approve)
    client.on_server_request("execCommandApproval", approve_legacy)

    cmd = f"printf {APPROVED_TEXT} > {APPROVED_FILE} && cat {APPROVED_FILE}"
    model.script(
        ShellCall(
            cmd,
            call_id="call_approval_1",
            sandbox_permissions="require_escalated",
            justification="Write approved.txt in the workspace",
            login=False,
        ),
        Text("The file is written."),
    )
    thread_id = await _open(client, workdir, approvalPolicy="on-request", sandbox="read-only")
    completed = await client.run_turn(thread_id, "Write approved.txt please.", timeout=TURN_TIMEOUT)
    turn = _turn_summary(completed)
    commands = _items(client, "item/completed", turn["turn_id"], "commandExecution")
    path = Path(workdir) / APPROVED_FILE
    return {
        "scenario": "shell_approval",
        "thread_id": thread_id,
        "turns": [turn],
        "approvals": [
            {"method": a["method"], "itemId": a["params"].get("itemId"), "command": a["params"].get("command")}
            for a in approvals
        ],
        "commands": [
            {
                "id": c.get("id"),
                "status": c.get("status"),
                "exitCode": c.get("exitCode"),
                "output": c.get("aggregatedOutput"),
            }
            for c in commands
        ],
        "file_written": path.read_text() if path.exists() else None,
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (c) dynamic (client-side) tool call


async def dynamic_tool(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """The model calls a client-declared tool; Codex asks the client to run it."""
    first = len(model.requests)
    calls: list[dict] = []

    async def tool_call(params: dict) -> dict:
        calls.append(params)
        if params.get("tool") != WEATHER_TOOL["name"]:
            return {"contentItems": [{"type": "inputText", "text": "unknown tool"}], "success": False}
        return {"contentItems": [{"type": "inputText", "text": WEATHER_RESULT}], "success": True}

    client.on_server_request("item/tool/call", tool_call)
    model.script(
        FunctionCall(WEATHER_TOOL["name"], {"city": "Paris"}, call_id="call_weather_1"),
        Text("It is 21C and sunny in Paris."),
    )
    thread_id = await _open(client, workdir, dynamicTools=[WEATHER_TOOL])
    completed = await client.run_turn(thread_id, "What is the weather in Paris?", timeout=TURN_TIMEOUT)
    turn = _turn_summary(completed)
    items = _items(client, "item/completed", turn["turn_id"], "dynamicToolCall")
    return {
        "scenario": "dynamic_tool_call",
        "thread_id": thread_id,
        "turns": [turn],
        "tool_calls": [
            {"tool": c.get("tool"), "callId": c.get("callId"), "arguments": c.get("arguments")} for c in calls
        ],
        "tool_items": [
            {"id": i.get("id"), "tool": i.get("tool"), "status": i.get("status"), "success": i.get("success")}
            for i in items
        ],
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (d) interrupted turn


async def interrupt(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """Interrupt a turn while the model hangs, then show the thread still works.

    The interrupt is sent only once the model request is in flight, so it
    always interrupts a live model call rather than racing turn setup.
    """
    first = len(model.requests)
    model.script(Hang(), Text("Back after the interrupt."))
    thread_id = await _open(client, workdir)
    turn_id = await client.start_turn(thread_id, "Think about this for a very long time.")
    await model.wait_for_requests_async(first + 1, timeout=TURN_TIMEOUT)
    interrupt_result = await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
    interrupted = await client.wait_turn_completed(thread_id, turn_id, timeout=TURN_TIMEOUT)
    after = await client.run_turn(thread_id, "Never mind, just say hi.", timeout=TURN_TIMEOUT)
    return {
        "scenario": "interrupted_turn",
        "thread_id": thread_id,
        "interrupt_result": interrupt_result,
        "turns": [_turn_summary(interrupted), _turn_summary(after)],
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (e) native compaction


COMPACTION_SUMMARY = "HANDOFF SUMMARY: user chose codeword PAPAYA and colour blue."


async def compaction(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """Two turns, native `thread/compact/start`, then a turn on the compacted history.

    Codex runs compaction as its own turn that asks the model for a handoff
    summary; the scripted summary must then reach the next model request.
    """
    first = len(model.requests)
    model.script(Text("Noted PAPAYA."), Text("Noted blue."), Text(COMPACTION_SUMMARY), Text("Still here."))
    thread_id = await _open(client, workdir)
    turns = [
        _turn_summary(await client.run_turn(thread_id, "Remember the codeword PAPAYA.", timeout=TURN_TIMEOUT)),
        _turn_summary(await client.run_turn(thread_id, "My favourite colour is blue.", timeout=TURN_TIMEOUT)),
    ]
    mark = client.mark()
    compact_result = await client.request("thread/compact/start", {"threadId": thread_id})
    compact_done = await client.wait_notification(
        "turn/completed", lambda p: p.get("threadId") == thread_id, timeout=TURN_TIMEOUT, since=mark
    )
    compact_turn = _turn_summary(compact_done)
    compaction_items = _items(client, "item/completed", compact_turn["turn_id"], "contextCompaction")
    turns.append(compact_turn)
    turns.append(_turn_summary(await client.run_turn(thread_id, "What was the codeword?", timeout=TURN_TIMEOUT)))
    return {
        "scenario": "native_compaction",
        "thread_id": thread_id,
        "compact_result": compact_result,
        "compaction_turn_id": compact_turn["turn_id"],
        "compaction_items": [i.get("id") for i in compaction_items],
        "turns": turns,
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (f) resume by a fresh app-server process


async def resume(client: AppServerClient, model: FakeModel, workdir, *, connect: ClientFactory) -> dict:
    """Two turns in one process; a second process resumes the thread and continues.

    Passes `developerInstructions` again on resume, as OpenClaw does,
    because they are not inherited.
    """
    first = len(model.requests)
    model.script(Text("Noted PAPAYA."), Text("Noted MANGO."), Text("PAPAYA and MANGO."))
    thread_id = await _open(client, workdir)
    turns = [
        _turn_summary(await client.run_turn(thread_id, "Remember the word PAPAYA.", timeout=TURN_TIMEOUT)),
        _turn_summary(await client.run_turn(thread_id, "Also remember MANGO.", timeout=TURN_TIMEOUT)),
    ]
    first_exit = await client.close()
    async with connect() as second:
        await second.initialize(experimental=True)
        resumed = await second.request(
            "thread/resume",
            {"threadId": thread_id, "cwd": str(workdir), "developerInstructions": DEVELOPER_INSTRUCTIONS},
        )
        resumed_thread = resumed.get("thread") or {}
        question = "Which two words did I ask you to remember?"
        turns.append(_turn_summary(await second.run_turn(thread_id, question, timeout=TURN_TIMEOUT)))
    return {
        "scenario": "resume_fresh_process",
        "thread_id": thread_id,
        "first_process_exit": first_exit,
        "resumed_thread_id": resumed_thread.get("id"),
        "resumed_turn_ids": [t.get("id") for t in resumed_thread.get("turns") or []],
        "turns": turns,
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# (g) a model error fails the turn


MODEL_FAILURE = "scenario model failure"


async def model_error(client: AppServerClient, model: FakeModel, workdir) -> dict:
    """The model stream reports `response.failed`; the turn fails, the next one works."""
    first = len(model.requests)
    model.script(Failed(MODEL_FAILURE), Text("Recovered."))
    thread_id = await _open(client, workdir)
    mark = client.mark()
    failed = await client.run_turn(thread_id, "This turn will fail.", timeout=TURN_TIMEOUT)
    errors = [
        n["params"]
        for n in client.notifications[mark:]
        if n.get("method") == "error" and (n.get("params") or {}).get("threadId") == thread_id
    ]
    after = await client.run_turn(thread_id, "Try again.", timeout=TURN_TIMEOUT)
    return {
        "scenario": "model_error",
        "thread_id": thread_id,
        "turns": [_turn_summary(failed), _turn_summary(after)],
        "error_notifications": [
            {"message": (e.get("error") or {}).get("message"), "willRetry": e.get("willRetry")} for e in errors
        ],
        "model_requests": len(model.requests) - first,
    }


# --------------------------------------------------------------------------
# registry and runner


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("plain_conversation", "plain three-turn conversation", conversation),
        Scenario(
            "shell_approval",
            "escalated shell command approved by the client",
            approval,
            config={"approval_policy": "on-request", "sandbox_mode": "read-only"},
        ),
        Scenario("dynamic_tool_call", "client-side dynamic tool call (item/tool/call)", dynamic_tool),
        Scenario("interrupted_turn", "turn/interrupt while the model hangs, then a turn", interrupt),
        Scenario("native_compaction", "native thread/compact/start between turns", compaction),
        Scenario(
            "resume_fresh_process",
            "thread/resume by a fresh app-server process",
            resume,
            needs_connect=True,
        ),
        Scenario("model_error", "response.failed fails a turn; the next turn recovers", model_error),
    )
}


def prepare_codex_home(scenario: Scenario, codex_home: os.PathLike | str, model: FakeModel) -> Path:
    """Write the CODEX_HOME config this scenario needs, pointing at `model`."""
    return make_codex_home(codex_home, model.base_url, **scenario.codex_config())


def connector(
    argv: Sequence[str],
    *,
    env: dict[str, str] | Callable[[int], dict[str, str]] | None = None,
    cwd: os.PathLike | str | None = None,
    **spawn_kwargs: Any,
) -> ClientFactory:
    """A `ClientFactory` that spawns `argv` afresh each time it is called.

    `env` may be a function of the process number (1, 2, ...) so that each
    process of a multi-process scenario can, e.g., record to its own file.
    """
    count = 0

    def connect() -> AsyncContextManager[AppServerClient]:
        nonlocal count
        count += 1
        process_env = env(count) if callable(env) else env
        return AppServerClient.spawn(
            argv, env=process_env, cwd=None if cwd is None else str(cwd), **spawn_kwargs
        )

    return connect


def codex_connector(codex_bin: str, codex_home: os.PathLike | str, workdir: os.PathLike | str) -> ClientFactory:
    """Connect straight to the real codex app-server, as OpenClaw launches it."""
    return connector(
        [codex_bin, "app-server", "--listen", "stdio://"],
        env=codex_env(codex_home),
        cwd=workdir,
    )


async def run_scenario(
    scenario: Scenario,
    connect: ClientFactory,
    model: FakeModel,
    workdir,
    *,
    clients: list[AppServerClient] | None = None,
) -> ScenarioRun:
    """Run one scenario in fresh process(es) from `connect`; keep every client.

    Pass your own `clients` list to keep the clients (and their stderr and
    raw traffic) even when the scenario raises.
    """
    clients = [] if clients is None else clients

    @contextlib.asynccontextmanager
    async def tracked() -> AsyncIterator[AppServerClient]:
        async with connect() as client:
            clients.append(client)
            yield client

    async with tracked() as client:
        if scenario.needs_connect:
            summary = await scenario.run(client, model, workdir, connect=tracked)
        else:
            summary = await scenario.run(client, model, workdir)
    return ScenarioRun(summary=summary, clients=clients)


__all__ = [
    "ClientFactory",
    "Scenario",
    "ScenarioRun",
    "SCENARIOS",
    "conversation",
    "approval",
    "dynamic_tool",
    "interrupt",
    "compaction",
    "resume",
    "model_error",
    "prepare_codex_home",
    "connector",
    "codex_connector",
    "run_scenario",
]
