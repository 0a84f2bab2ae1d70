"""The method table (``sidecar/methods.py``): every hook comes from a row.

The lifecycle, the engine's tools and the relay register no hook by hand:
they install the rows of their parts. These check that what is installed is
exactly the table's (per part, in the table's order), that the orders that
matter hold, that a row added to the table is installed and routed with no
other edit, and that the edge's thread-id members and the reads come from
its columns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from engines import ToolCallResult, ToolSpec
from engines.api import EngineInfo
from engines.testkit import RecordingEngine
from sidecar import methods
from sidecar.history.backing import BackingThreads, keyed_members
from sidecar.lifecycle import Lifecycle
from sidecar.methods import METHODS, Part, Phase, Row, Sender
from sidecar.relay import Hooks, Message, PendingRequest, Proxy
from sidecar.rows import install, installed, reads, thread_id_keys
from tests.support.lifecycle import make_engine, sidecar

CLIENT = "01a20000-0000-7000-8000-0000000000a1"
BACKING = "01a20000-0000-7000-8000-0000000000b1"
KINDS = {
    "client_requests": (Sender.CLIENT, "request"),
    "responses": (Sender.CLIENT, "response"),
    "server_notifications": (Sender.NOTIFICATION, "request"),
    "server_requests": (Sender.SERVER_REQUEST, "request"),
}


class ToolEngine(RecordingEngine):
    """An engine with one tool of its own."""

    def tools(self) -> list[ToolSpec]:
        return [ToolSpec(name="lcm_grep", description="search", input_schema={"type": "object"})]

    async def call_tool(self, params: Any) -> Any:
        return ToolCallResult(text="none")


def proxy(state_dir=None) -> Proxy:
    """A relay never run; with ``state_dir``, built with the history's edge (a lifecycle's)."""
    a, b = trio.testing.memory_stream_pair()
    edge = BackingThreads(state_dir, thread_id_keys(METHODS)) if state_dir is not None else None
    return Proxy(lambda: None, trio.StapledStream(a, b), edge=edge)  # type: ignore[arg-type,return-value]


def lifecycle(tmp_path, engine: Any) -> tuple[Lifecycle, Hooks]:
    """A lifecycle installed on hooks of its own (the relay's rows are the router's)."""
    lc = Lifecycle(proxy(tmp_path), engine, tmp_path)
    hooks = Hooks()
    lc.install(hooks, METHODS)
    return lc, hooks


def registered(hooks: Hooks) -> list[tuple[str, str, Any]]:
    return [(kind, method, hook) for kind in KINDS for method, hs in getattr(hooks, kind).items() for hook in hs]


def rows_of(kind: str, method: str, parts: set[Part]) -> list[Any]:
    """The handlers the table gives ``kind`` of ``method`` in ``parts``, in order."""
    source, column = KINDS[kind]
    return [getattr(r, column) for r in installed(parts, METHODS) if r.method == method and r.source is source and getattr(r, column)]


ENGINES = {
    "no engine": lambda: None,
    "an engine": lambda: make_engine(),
    "an engine with tools": lambda: ToolEngine(info=EngineInfo(id="t", name="t", version="1")),
}


@pytest.mark.parametrize("which", list(ENGINES))
def test_every_hook_the_lifecycle_registers_is_a_table_row_in_the_tables_order(tmp_path, which):
    lc, hooks = lifecycle(tmp_path, ENGINES[which]())
    parts = lc.parts()
    got = registered(hooks)
    assert got, "nothing installed"
    for kind in KINDS:
        for method, hs in getattr(hooks, kind).items():
            expected = [methods.bind(handler, lc.jobs()) for handler in rows_of(kind, method, parts)]
            assert hs == expected, f"{kind} {method}: not the table's hooks in the table's order"
    # ... and every row of those parts is installed (nothing in the table is left out).
    wanted = sum(bool(r.request) + bool(r.response) for r in installed(parts, METHODS))
    assert len(got) == wanted


def test_without_an_engine_exactly_the_history_rows_are_installed(tmp_path):
    lc, hooks = lifecycle(tmp_path, None)
    assert lc.parts() == {Part.HISTORY, Part.BARE}
    installed = {(kind, method, hook.__self__.__class__.__name__ + "." + hook.__name__) for kind, method, hook in registered(hooks)}
    history = {
        ("client_requests", "thread/read", "ArchivedTurns.on_thread_read"),
        ("responses", "thread/read", "ArchivedTurns.on_thread_read_response"),
        ("client_requests", "thread/resume", "Openings.on_resume"),
        ("responses", "thread/resume", "Lifecycle.splice_opened"),
        ("client_requests", "thread/fork", "Openings.remember_params"),
        ("responses", "thread/fork", "Lifecycle.splice_opened"),
        ("client_requests", "thread/turns/list", "ArchivedTurns.on_turns_list"),
        ("responses", "thread/turns/list", "ArchivedTurns.on_list_response"),
        ("client_requests", "thread/items/list", "ArchivedTurns.on_items_list"),
        ("responses", "thread/items/list", "ArchivedTurns.on_list_response"),
        ("responses", "thread/list", "ArchivedTurns.on_thread_list_response"),
        ("server_notifications", "thread/readState/changed", "ArchivedTurns.on_read_state"),
        ("client_requests", "thread/name/set", "Spares.on_name_set"),
        ("client_requests", "thread/delete", "Openings.remember_request"),
        ("responses", "thread/delete", "Spares.follow_to_retired"),
        ("client_requests", "thread/archive", "Openings.remember_request"),
        ("responses", "thread/archive", "Spares.follow_to_retired"),
    }
    assert installed == history
    # No turn/start hook, no notification of the turn's end: the lifecycle is not there.
    assert "turn/start" not in hooks.client_requests and "turn/completed" not in hooks.server_notifications


def test_the_relay_installs_only_its_own_rows(tmp_path):
    p = proxy()
    relay_rows = [r for r in METHODS if r.part is Part.RELAY]
    assert relay_rows
    got = registered(p.router.hooks)
    assert len(got) == sum(bool(r.request) + bool(r.response) for r in relay_rows)
    assert {hook.__self__ for _, _, hook in got} == {p.router.observed, p.router.negotiation}


def names(hooks: list[Any]) -> list[str]:
    return [type(h.__self__).__name__ + "." + h.__name__ for h in hooks]


def test_the_client_tools_are_noted_before_the_engines_join_them_and_remembered_after(tmp_path):
    lc, hooks = lifecycle(tmp_path, ENGINES["an engine with tools"]())
    assert names(hooks.client_requests["thread/start"]) == ["Lifecycle.note_client_tools", "EngineTools.on_thread_start", "Openings.remember_params"]
    # ... and the offered names are recorded once the lifecycle has taken the answer.
    assert names(hooks.responses["thread/start"])[-1] == "EngineTools.on_started"


def test_a_revert_notification_is_swallowed_before_the_archive_rewrites_the_read_state(tmp_path):
    _, hooks = lifecycle(tmp_path, make_engine())
    assert names(hooks.server_notifications["thread/readState/changed"]) == ["InPlace.swallow_noise", "ArchivedTurns.on_read_state"]
    assert names(hooks.server_notifications["thread/reverted"]) == ["InPlace.swallow_noise"]
    # ... and before a status can end a turn whose turn/completed was lost (a rebuild's own never does).
    assert names(hooks.server_notifications["thread/status/changed"]) == ["InPlace.swallow_noise", "Turns.on_thread_status"]


def test_the_engines_items_leave_before_the_mirror_and_after_the_archive(tmp_path):
    _, hooks = lifecycle(tmp_path, ENGINES["an engine with tools"]())
    assert names(hooks.server_notifications["item/completed"]) == ["EngineTools.on_item", "Finalizer.on_item_completed"]
    assert names(hooks.server_notifications["turn/completed"]) == ["EngineTools.on_turn_completed", "Finalizer.on_turn_completed"]
    # Every read the archive splices (the table's ``read`` column) loses the engine's items last.
    for method in reads(METHODS):
        assert names(hooks.responses[method])[-1] == "EngineTools.on_read_response", method
    assert set(reads(METHODS)) == {"thread/read", "thread/resume", "thread/fork", "thread/turns/list", "thread/items/list"}


def test_phases_order_hooks_whatever_the_rows_order():
    def a(job: Any, msg: Message) -> None: ...

    def b(job: Any, msg: Message) -> None: ...

    late = Row(method="x/y", request=b, phase=Phase.BACK)
    early = Row(method="x/y", request=a, phase=Phase.SEE)
    assert [r.request for r in installed({Part.HISTORY}, (late, early))] == [a, b]


async def test_a_row_added_to_the_table_is_installed_and_routed_with_no_other_edit(tmp_path, monkeypatch):
    """One row and one handler: a method no code mentions is hooked both
    ways once the table names it."""
    seen: list[str] = []

    def on_request(self, msg: Message) -> None:
        seen.append("request")
        msg.set_params({**msg.params(), "noted": True})

    def on_response(self, msg: Message, pending: PendingRequest) -> None:
        seen.append("response")
        msg.set_result({"answeredBy": "the table's row"})

    from sidecar.lifecycle.turns import Turns

    monkeypatch.setattr(Turns, "on_fake", on_request, raising=False)
    monkeypatch.setattr(Turns, "on_fake_answer", on_response, raising=False)
    row = Row(method="fake/method", request=Turns.on_fake, response=Turns.on_fake_answer, part=Part.ENGINE)  # type: ignore[attr-defined]
    monkeypatch.setattr(methods, "METHODS", (*METHODS, row))
    async with sidecar(tmp_path, make_engine()) as run:
        answer = await run.request("fake/method", {"threadId": CLIENT})
    assert seen == ["request", "response"]
    assert answer["result"] == {"answeredBy": "the table's row"}
    (received,) = run.received("fake/method")
    assert received["params"] == {"threadId": CLIENT, "noted": True}


@pytest.mark.parametrize("key", thread_id_keys(METHODS))
def test_the_edge_maps_every_member_the_table_says_carries_a_thread_id(tmp_path, key):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(CLIENT, {})
    b.note_spare(CLIENT, BACKING)
    b.switch(CLIENT)
    line = json.dumps({"id": 7, "result": {key: BACKING}}).encode()
    assert json.loads(b.response(line, "x/y"))["result"][key] == CLIENT


def test_a_member_the_table_does_not_name_is_left_alone(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(CLIENT, {})
    b.note_spare(CLIENT, BACKING)
    b.switch(CLIENT)
    line = json.dumps({"id": 7, "result": {"quotedThreadId": BACKING}}).encode()
    assert json.loads(b.response(line, "x/y"))["result"]["quotedThreadId"] == BACKING


def test_the_edges_key_list_is_the_tables_column():
    rows = (*METHODS, Row(method="fake/method", thread_keys=("fakeThreadId",)))
    keyed = keyed_members(thread_id_keys(rows))
    assert keyed.search(b'{"fakeThreadId":"' + BACKING.encode() + b'"}')
    assert not keyed_members(thread_id_keys(METHODS)).search(b'{"fakeThreadId":"' + BACKING.encode() + b'"}')


def test_a_handler_no_job_has_is_refused_at_install():
    """A row's handler binds to the one job of its class: none is an error, not a silent skip."""
    from sidecar.lifecycle.turns import Turns

    with pytest.raises(LookupError, match="on_turn_start"):
        install(Hooks(), (object(),), {Part.ENGINE}, (Row(method="x/y", request=Turns.on_turn_start, part=Part.ENGINE),))


def test_a_response_hook_on_a_notification_row_is_refused():
    with pytest.raises(ValueError, match="only a client request"):
        install(Hooks(), (), {Part.HISTORY}, (Row(method="x/y", source=Sender.NOTIFICATION, response=lambda job, msg, pending: None),))
