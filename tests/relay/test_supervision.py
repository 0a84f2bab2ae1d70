"""Supervised background work: a task spawned on the relay that raises is
logged once (type and raising file:line, never its text) and ends there;
the relay, the child and every other task carry on."""

from __future__ import annotations

import json

import trio

from sidecar.logs import JsonFormatter, TextFormatter
from sidecar.relay import Hooks
from sidecar.relay.failures import failure_fields, task_name
from tests.support.harness import child, proxied

SECRET = "PROMPT-TEXT-MUST-NOT-LEAK"


def fail() -> None:
    raise ValueError(SECRET)


FAIL_AT = f"test_supervision.py:{fail.__code__.co_firstlineno + 1}"


async def wait_for(predicate, what: str) -> None:
    with trio.fail_after(10):
        while not predicate():
            await trio.sleep(0.01)


def failures(logs) -> list:
    return [r for r in logs.records if r.name == "codex_sidecar.tasks"]


async def test_a_failing_spawned_task_is_logged_once_and_the_relay_keeps_serving(logs):
    hooks = Hooks()
    sibling_done = trio.Event()
    release = trio.Event()

    async def broken_write() -> None:
        await trio.sleep(0)
        fail()

    async def sibling() -> None:
        await release.wait()
        sibling_done.set()

    def on_turn_start(msg):
        # What the lifecycle does: a hook hands slow work to the relay.
        c.proxy.spawn(sibling)
        c.proxy.spawn(broken_write)
        return None

    hooks.on_client_request("turn/start", on_turn_start)
    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}, hooks=hooks) as c:
        await c.send(b'{"id":1,"method":"turn/start","params":{"threadId":"t"}}\n')
        await wait_for(lambda: failures(logs), "the failure to be logged")
        await c.send(b'{"id":2,"method":"thread/read","params":{"threadId":"t"}}\n{"id":3,"method":"sidecar/status"}\n')
        lines = await c.wait_lines(3)
        release.set()
        with trio.fail_after(10):
            await sibling_done.wait()
    answers = {m["id"]: m for m in map(json.loads, lines)}
    assert answers[1]["result"]["method"] == "turn/start", "the turn the task belonged to completed"
    assert answers[2]["result"]["method"] == "thread/read"
    assert answers[3]["result"]["childRunning"] is True
    [record] = failures(logs)
    assert record.fields["task"].endswith("broken_write")
    assert record.fields["exception"] == "builtins.ValueError"
    assert record.fields["at"] == FAIL_AT
    for formatter in (JsonFormatter(), TextFormatter()):
        assert SECRET not in formatter.format(record)
    assert all(SECRET not in r.getMessage() for r in logs.records)


async def test_an_async_control_method_failure_answers_the_caller_and_nothing_else_stops(logs):
    async def crash(params):
        fail()

    async with proxied(child("echo_rpc.py"), env={"ECHO_RPC_QUIET": "1"}) as c:
        c.proxy.router.controls.add_async("sidecar/crash", crash)
        await c.send(b'{"id":1,"method":"sidecar/crash","params":{}}\n{"id":2,"method":"thread/read","params":{}}\n')
        lines = await c.wait_lines(2)
    answers = {m["id"]: m for m in map(json.loads, lines)}
    assert answers[1]["error"] == {"code": -32603, "message": "control method failed", "data": "ValueError"}
    assert answers[2]["result"]["method"] == "thread/read"
    assert failures(logs) == [], "answered, so not a task failure"


def test_a_failure_in_a_group_names_the_first_exception_inside():
    try:
        try:
            fail()
        except ValueError as exc:
            raise ExceptionGroup("several", [exc]) from None
    except ExceptionGroup as group:
        fields = failure_fields("t", group)
    assert fields["exception"] == "builtins.ValueError"
    assert fields["at"] == FAIL_AT
    assert fields["group"] == "ExceptionGroup"


def test_a_runner_s_task_is_named_with_what_it_runs():
    async def run_sync(fn, *args):
        return fn(*args)

    assert task_name(run_sync, (fail, 1)) == "test_a_runner_s_task_is_named_with_what_it_runs.<locals>.run_sync(fail)"
    assert task_name(fail, ("text",)) == "fail"
