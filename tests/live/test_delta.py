"""delta projection, live: real codex 0.169.0, the fake model, and test
engines the sidecar loads by entry point like any third-party engine
(tests/support/live.py).

The fake model's recorded request bodies are what the model saw. Three engines,
from a module written next to a ``*.dist-info`` (put on the sidecar's
``PYTHONPATH`` and trusted by ``CODEX_SIDECAR_ENGINE_ALLOWLIST``):

* ``live-delta-summary`` replaces the older messages by one summary, with a
  boundary that moves in steps of :data:`STEP` messages and always leaves at
  least :data:`KEEP` raw: over 7 turns the sidecar rebuilds the thread twice
  (turns 4 and 6) and sends plain deltas in between;
* ``live-delta-identity`` assembles the mirrored history unchanged;
* ``live-delta-epoch`` assembles it unchanged too, but asks for
  ``thread_bootstrap`` with an epoch that changes every :data:`EPOCH_TURNS`
  turns (so ``auto`` means epoch mode).

No assertion depends on timing.
"""

from __future__ import annotations

import json
import sys

import pytest

from sidecar.projection import CONTEXT_HEADER
from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.live import (
    EPOCH_ID,
    EPOCH_TURNS,
    IDENTITY_ID,
    KEEP,
    OPEN,
    STEP,
    SUMMARY_ID,
    TURN_TIMEOUT,
    chars,
    context_items,
    context_text,
    filler,
    finalized,
    install_engines,
    prompt_of,
    sidecar,
    sidecar_env,
    texts_of,
    thread_ids_in,
    without_ids,
)
from tests.support.normalise import Normaliser
from tools.client import AppServerClient
from tools.codex_home import make_codex_home
from tools.fake_model import FakeModel, FunctionCall, ShellCall, Text, input_texts
from tools.scenarios import WEATHER_RESULT, WEATHER_TOOL, codex_connector, connector

pytestmark = needs_codex


@pytest.mark.parametrize("rebuild", ["revert", "fresh"])
async def test_summary_engine_rebuilds_bounded_and_invisible_to_the_client(tmp_path, rebuild):
    """``revert``: Codex's thread is reverted in place. ``fresh``: the client's
    thread moves onto a Codex thread started ahead of time, behind its id."""
    prompts = [filler(f"P{n}", n) for n in range(1, 8)]
    replies = [filler(f"R{n}", n + 3) for n in range(1, 8)]
    work = tmp_path / "work"
    work.mkdir()
    site = install_engines(tmp_path / "site")
    tool_calls: list[dict] = []

    async def tool_call(params: dict) -> dict:
        tool_calls.append(params)
        return {"contentItems": [{"type": "inputText", "text": WEATHER_RESULT}], "success": True}

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = sidecar_env(home, site, tmp_path / "state", tmp_path / "sidecar.toml", SUMMARY_ID)
        env["CODEX_SIDECAR_REBUILD"] = rebuild
        # Turns 1-6 answer in text; turn 7 calls the client's dynamic tool first.
        model.script(*(Text(r) for r in replies[:6]), FunctionCall(WEATHER_TOOL["name"], {"city": "Paris"}, call_id="call_w"), Text(replies[6]))
        async with sidecar(env, work) as client:
            client.on_server_request("item/tool/call", tool_call)
            tid = await client.start_thread(cwd=str(work), dynamicTools=[WEATHER_TOOL])
            turn_ids = []
            early = None
            for n, prompt in enumerate(prompts, 1):
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                turn_ids.append(done["turn"]["id"])
                if n == 3:  # before the first rebuild: Codex's own answers
                    early = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
                    early_list = await client.request("thread/turns/list", {"threadId": tid, "sortDirection": "asc"})
                    early_items = await client.request("thread/items/list", {"threadId": tid})
                    # Cursors taken before any rebuild, to go on with after two.
                    early_pages = {
                        "desc": await client.request("thread/turns/list", {"threadId": tid, "limit": 1}),
                        "asc": await client.request("thread/turns/list", {"threadId": tid, "limit": 1, "sortDirection": "asc"}),
                        "items": await client.request("thread/items/list", {"threadId": tid, "limit": 2}),
                    }
            status = await finalized(client, tid, turn_ids[-1])
            inspected = await client.request("sidecar/inspect", {"threadId": tid})
            read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
            listed = {}
            for direction, limit in (("desc", 2), ("asc", 3), ("desc", None)):
                listed[direction, limit] = await list_all_turns(client, tid, direction, limit)
            item_pages = {}
            for direction, limit in (("asc", 4), ("desc", 3)):
                item_pages[direction, limit] = await list_all_turns(client, tid, direction, limit, method="thread/items/list")
            first_turn_items = await client.request("thread/items/list", {"threadId": tid, "turnId": turn_ids[0]})
            went_on = {
                "desc": await list_all_turns(client, tid, "desc", 1, cursor=early_pages["desc"]["nextCursor"]),
                "asc": await list_all_turns(client, tid, "asc", 3, cursor=early_pages["asc"]["nextCursor"]),
                "items": await list_all_turns(client, tid, "asc", 4, method="thread/items/list", cursor=early_pages["items"]["nextCursor"]),
                # Codex's cursors carry no direction: the request's decides.
                "back desc": await list_all_turns(client, tid, "desc", 2, cursor=early_pages["desc"]["backwardsCursor"]),
                "back asc": await list_all_turns(client, tid, "asc", 2, cursor=early_pages["desc"]["backwardsCursor"]),
                "next asc": await list_all_turns(client, tid, "asc", 2, cursor=early_pages["desc"]["nextCursor"]),
            }
            thread_list = await client.request("thread/list", {})
            loaded_list = await client.request("thread/loaded/list", {})
        requests = list(model.requests)

        # A fresh sidecar resumes the thread: every turn is still in the answer.
        async with sidecar(env, work) as again:
            resumed_via_sidecar = await again.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            # The way a client bootstraps recent turns: a page in the resume answer.
            paged_resume = {}
            for direction, limit in (("desc", 2), ("asc", 3)):
                answer = await again.request(
                    "thread/resume",
                    {"threadId": tid, "cwd": str(work), "excludeTurns": True, "initialTurnsPage": {"sortDirection": direction, "limit": limit}},
                )
                page = answer["initialTurnsPage"]
                assert len(page["data"]) <= limit
                rest = await list_all_turns(again, tid, direction, limit, cursor=page["nextCursor"]) if page["nextCursor"] else []
                paged_resume[direction] = [t["id"] for t in page["data"] + rest]
            forked = await again.request("thread/fork", {"threadId": tid, "lastTurnId": turn_ids[5]})

        # A fresh app-server process (codex itself, no sidecar) resumes the
        # rebuilt thread: the client's own (revert), or the Codex thread the
        # sidecar's map says is behind it (fresh).
        codex_tid = tid
        if rebuild == "fresh":
            backing = json.loads((tmp_path / "state" / "backing" / f"{tid}.json").read_text())
            codex_tid = backing["current"]
            # The first rebuild reverts (no spare until the engine is seen to
            # rebuild); the second moves the thread onto the spare.
            assert codex_tid != tid and backing["retired"] == [tid]
        async with codex_connector(CODEX_BIN, home, work)() as direct:
            await direct.initialize()
            resumed = await direct.request("thread/resume", {"threadId": codex_tid, "cwd": str(work)})
            assert resumed["thread"]["id"] == codex_tid
            model.script(Text("Resumed fine."))
            done = await direct.run_turn(codex_tid, "After the restart.", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed"
        after_restart = model.requests[-1]

    # --- the engine's rebuilds, as the sidecar reports them
    assert status["lifecycle"]["rebuilds"] == 2
    turns = inspected["turns"]
    assert [t["rebuilt"] for t in turns] == [False, False, False, True, False, True, False]
    assert [t["mode"] for t in turns] == ["delta"] * 7

    # --- what the model saw, turn by turn
    by_turn = [next(r for r in requests if prompt_of(r) == p) for p in prompts]
    keys = [r["prompt_cache_key"] for r in requests]
    if rebuild == "revert":
        assert set(keys) == {tid}  # one thread, one cache key throughout
    else:  # the client's Codex thread, then its spare's: each its own cache key, never going back
        assert keys[0] == tid and len(set(keys)) == 2
        assert [k for n, k in enumerate(keys) if n == 0 or k != keys[n - 1]] == list(dict.fromkeys(keys))
    framing = by_turn[0]["input"][:-1]  # the first request: Codex's framing, then P1
    for n, request in enumerate(by_turn, 1):
        # The user's message is only the user's prompt; no context in it, ever.
        assert not any(CONTEXT_HEADER in t for t in input_texts(request, "user"))
        assert prompt_of(request) == prompts[n - 1]
    for n in (4, 6):  # rebuilds: framing, the whole assembly as a developer message, the prompt
        request = by_turn[n - 1]
        assert without_ids(request["input"][: len(framing)]) == without_ids(framing), "Codex's framing changed across the revert"
        rest = request["input"][len(framing) :]
        assert [(i.get("role"), len(context_items({"input": [i]}))) for i in rest] == [("developer", 1), ("user", 0)]
        context = context_text(request, len(framing))
        assert context.startswith(CONTEXT_HEADER)
        boundary = 2 * n - 2 - KEEP - ((2 * n - 2 - KEEP) % STEP)
        assert f"[summary]\nSUMMARY of the {boundary} earliest messages" in context
        kept = (boundary // 2) + 1  # the first raw turn after the summary
        assert f"[user]\n{prompts[kept - 1]}" in context
        body = json.dumps(request["input"])
        for old in range(1, kept):  # summarised turns are gone from the model's input
            assert prompts[old - 1] not in body and replies[old - 1] not in body
    for n in (2, 3):  # before any rebuild: Codex's own history, nothing projected
        assert context_items(by_turn[n - 1]) == []
    for n, rebuild in ((5, 4), (7, 6)):  # after a rebuild: that request plus the turns since, unchanged
        before = by_turn[rebuild - 1]["input"]
        assert by_turn[n - 1]["input"][: len(before)] == before
        assert context_items(by_turn[n - 1]) == context_items(by_turn[rebuild - 1])  # no pile-up

    # --- bounded: never more than the last rebuild plus the turns since, and
    # never more than a window of STEP + KEEP + 1 messages over the framing.
    last_rebuild = 0
    for n, request in enumerate(by_turn, 1):
        if n in (4, 6):
            last_rebuild = n
            continue
        if last_rebuild:
            # The rebuild's request, then the replies and prompts of the turns since.
            grown = sum(len(r) for r in replies[last_rebuild - 1 : n - 1]) + sum(len(p) for p in prompts[last_rebuild:n])
            assert chars(request) <= chars(by_turn[last_rebuild - 1]) + grown
    turn_chars = [len(p) + len(r) for p, r in zip(prompts, replies)]
    window = chars(by_turn[0]) + (STEP + KEEP + 1) * max(len(t) for t in prompts + replies) + 1_000
    assert all(chars(r) <= window for r in by_turn), [chars(r) for r in by_turn]
    assert chars(by_turn[0]) + sum(turn_chars[:6]) > window  # native would not fit: the bound means something

    # --- the client never noticed
    frames = [json.loads(line) for line in client.received]
    ids: set[str] = set()
    for f in frames:
        thread_ids_in(f, ids)
    assert ids == {tid}
    methods = [f.get("method") for f in frames]
    assert "thread/reverted" not in methods
    assert not any(f.get("method") == "thread/status/changed" and f["params"]["status"]["type"] == "notLoaded" for f in frames)
    sent_ids = {json.loads(line).get("id") for line in client.sent}
    assert all(f["id"] in sent_ids for f in frames if "method" not in f and "id" in f)
    # Its own turn frames all arrived, once each.
    assert [n["turn"]["id"] for n in client.notifications_for("turn/started", threadId=tid)] == turn_ids
    assert [n["turn"]["id"] for n in client.notifications_for("turn/completed", threadId=tid)] == turn_ids
    # The dynamic tool call of turn 7 (after the second rebuild) reached the client, on its thread.
    assert len(tool_calls) == 1 and tool_calls[0]["threadId"] == tid and tool_calls[0]["turnId"] == turn_ids[6]
    assert any(
        i["type"] == "function_call_output" and WEATHER_RESULT in json.dumps(i) for i in requests[-1]["input"]
    )
    # The client's userMessage items are its own prompts.
    users = [n["item"] for n in client.notifications_for("item/completed", threadId=tid) if n["item"]["type"] == "userMessage"]
    assert [u["content"][0]["text"] for u in users] == prompts
    # thread/read answers for the thread with every turn: Codex holds only the
    # turns since the last rebuild, the sidecar's archive the rest, exactly as
    # Codex showed them before its revert.
    assert [t["id"] for t in read["thread"]["turns"]] == turn_ids
    assert read["thread"]["turns"][:3] == early["thread"]["turns"]
    assert [t["id"] for t in resumed_via_sidecar["thread"]["turns"]] == turn_ids
    # A fork through turn 6 inherits the turns before it, archived ones included.
    assert [t["id"] for t in forked["thread"]["turns"]] == turn_ids[:6]
    assert forked["thread"]["turns"][:5] == read["thread"]["turns"][:5]
    # thread/turns/list pages through every turn too, Codex's cursors and the
    # sidecar's one after the other; archived turns in Codex's summary view.
    assert [t["id"] for t in listed["desc", 2]] == turn_ids[::-1]
    assert [t["id"] for t in listed["asc", 3]] == turn_ids
    assert listed["desc", None][::-1][:3] == early_list["data"]
    assert resumed_via_sidecar["thread"]["turns"][:6] == read["thread"]["turns"][:6]
    assert paged_resume == {"desc": turn_ids[::-1], "asc": turn_ids}
    # thread/items/list too: every item of every turn, both ways, the archived
    # ones equal to Codex's own entries for them from before the rebuild.
    every_item = [(t["id"], i["id"]) for t in read["thread"]["turns"] for i in t["items"]]
    assert [(e["turnId"], e["item"]["id"]) for e in item_pages["asc", 4]] == every_item
    assert [(e["turnId"], e["item"]["id"]) for e in item_pages["desc", 3]] == every_item[::-1]
    assert item_pages["asc", 4][: len(early_items["data"])] == early_items["data"]
    assert first_turn_items["data"] == [e for e in early_items["data"] if e["turnId"] == turn_ids[0]]
    # Codex's cursors from before the rebuilds go on where they were (Codex
    # itself refuses them after a switch, and pages a changed segment after
    # a revert): the sidecar hands them out wrapped with their anchor.
    assert [t["id"] for t in early_pages["desc"]["data"]] == [turn_ids[2]]
    assert [t["id"] for t in went_on["desc"]] == turn_ids[:2][::-1]
    assert [t["id"] for t in early_pages["asc"]["data"]] == [turn_ids[0]]
    assert [t["id"] for t in went_on["asc"]] == turn_ids[1:]
    assert [(e["turnId"], e["item"]["id"]) for e in early_pages["items"]["data"] + went_on["items"]] == every_item
    assert [t["id"] for t in went_on["back desc"]] == turn_ids[:3][::-1]  # from (and with) the page's turn
    assert [t["id"] for t in went_on["back asc"]] == turn_ids[2:]
    assert [t["id"] for t in went_on["next asc"]] == turn_ids[3:]

    # Lists name the client's thread once, whatever Codex holds behind it.
    assert [t["id"] for t in thread_list["data"]] == [tid], json.dumps(thread_list)[:3000]
    assert loaded_list["data"] == [tid]
    assert thread_list["data"][0]["preview"] == early["thread"]["preview"]  # the thread's first prompt, as before any rebuild
    assert thread_list["data"][0]["createdAt"] == early["thread"]["createdAt"]

    # --- the resumed thread, in a fresh codex: the rebuilt history, nothing older
    assert after_restart["prompt_cache_key"] == codex_tid
    assert without_ids(after_restart["input"][: len(framing)]) == without_ids(framing)
    assert len(context_items(after_restart)) == 1
    assert context_text(after_restart, context_items(after_restart)[0]) == context_text(by_turn[5], len(framing))
    body = json.dumps(after_restart["input"])
    assert prompts[0] not in body and prompts[4] in body and prompts[6] in body


async def list_all_turns(
    client: AppServerClient, tid: str, direction: str, limit: int | None, method: str = "thread/turns/list", cursor: str | None = None
) -> list[dict]:
    turns: list[dict] = []
    for _ in range(60):
        params = {"threadId": tid, "sortDirection": direction, **({"limit": limit} if limit else {}), **({"cursor": cursor} if cursor else {})}
        page = await client.request(method, params)
        assert not limit or len(page["data"]) <= limit
        turns += page["data"]
        cursor = page["nextCursor"]
        if cursor is None:
            return turns
    raise AssertionError(f"{method} never ended")


async def test_identity_engine_in_delta_is_invisible_to_the_model(tmp_path):
    prompts = ["Remember the codeword PAPAYA.", "My favourite colour is blue.", "And my city is Lyon.", "Codeword, colour and city?"]
    replies = ["Noted PAPAYA.", "Blue it is.", "Lyon, noted.", "PAPAYA, blue, Lyon."]

    async def run(via_sidecar: bool) -> tuple[list[dict], list[bytes], str]:
        root = tmp_path / ("s" if via_sidecar else "d")  # same length: the fake model counts path characters
        work = root / "work"
        work.mkdir(parents=True)
        with FakeModel() as model:
            home = make_codex_home(root / "codex-home", model.base_url)
            if via_sidecar:
                env = sidecar_env(home, install_engines(root / "site"), root / "state", root / "sidecar.toml", IDENTITY_ID)
                connect = connector([sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], env=env, cwd=work)
            else:
                connect = codex_connector(CODEX_BIN, home, work)
            model.script(*(Text(r) for r in replies))
            async with connect() as client:
                await client.initialize()
                tid = await client.start_thread(cwd=str(work))
                for prompt in prompts:
                    done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                    assert done["turn"]["status"] == "completed"
                if via_sidecar:
                    status = await finalized(client, tid, done["turn"]["id"])
                    assert status["lifecycle"]["rebuilds"] == 0
                    assert status["lifecycle"]["engine"]["id"] == IDENTITY_ID
            return list(model.requests), list(client.received), str(root)

    d_requests, d_frames, d_root = await run(via_sidecar=False)
    s_requests, s_frames, s_root = await run(via_sidecar=True)
    assert len(s_requests) == len(d_requests) == 4
    dn, sn = Normaliser(d_root), Normaliser(s_root)
    assert [sn.value(r) for r in s_requests] == [dn.value(r) for r in d_requests]
    # Each request extends the previous one unchanged (a prompt cache reuses it all).
    for before, after in zip(s_requests, s_requests[1:]):
        assert after["input"][: len(before["input"])] == before["input"]
    assert not any(OPEN in t for r in s_requests for t in input_texts(r))


@pytest.mark.parametrize("rebuild", ["revert", "fresh"])
async def test_approval_after_a_rebuild_reaches_the_client_on_its_own_thread(tmp_path, rebuild):
    """A server request Codex sends after the sidecar rebuilt the thread (in
    place, or on a fresh backing thread started with the client's own
    ``thread/start`` params) names the client's thread; the client's answer
    reaches Codex, and the approval settings still hold."""
    prompts = [filler(f"P{n}", n) for n in range(1, 7)]
    replies = [filler(f"R{n}", n + 3) for n in range(1, 7)]
    marker = "approved-after-rebuild"
    cmd = f"printf {marker} > approved.txt && cat approved.txt"
    work = tmp_path / "work"
    work.mkdir()
    site = install_engines(tmp_path / "site")
    approvals: list[dict] = []

    async def approve(params: dict) -> dict:
        approvals.append(params)
        return {"decision": "accept"}

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url, approval_policy="on-request", sandbox_mode="read-only")
        env = sidecar_env(home, site, tmp_path / "state", tmp_path / "sidecar.toml", SUMMARY_ID)
        env["CODEX_SIDECAR_REBUILD"] = rebuild
        model.script(
            *(Text(r) for r in replies),
            ShellCall(cmd, call_id="call_esc", sandbox_permissions="require_escalated", justification="Write approved.txt", login=False),
            Text("The file is written."),
        )
        async with sidecar(env, work) as client:
            client.on_server_request("item/commandExecution/requestApproval", approve)
            tid = await client.start_thread(cwd=str(work), approvalPolicy="on-request", sandbox="read-only")
            for prompt in prompts:  # the summary engine makes turns 4 and 6 rebuilds
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
            before = await finalized(client, tid, done["turn"]["id"])
            assert before["lifecycle"]["rebuilds"] == 2
            if rebuild == "fresh":  # the second rebuild moved the thread onto a fresh Codex thread
                assert before["lifecycle"]["backingThreads"]["switched"] == 1
            done = await client.run_turn(tid, "Write approved.txt please.", timeout=TURN_TIMEOUT)
            turn_id = done["turn"]["id"]
            await finalized(client, tid, turn_id)
        requests = list(model.requests)

    assert done["turn"]["status"] == "completed", done
    # Codex asked the client, once, naming the client's own thread and turn.
    assert [r["method"] for r in client.server_requests] == ["item/commandExecution/requestApproval"]
    assert len(approvals) == 1 and approvals[0]["threadId"] == tid and approvals[0]["turnId"] == turn_id
    # The approved command ran outside the sandbox.
    commands = [
        n["item"] for n in client.notifications_for("item/completed", threadId=tid, turnId=turn_id) if n["item"]["type"] == "commandExecution"
    ]
    assert len(commands) == 1 and commands[0]["exitCode"] == 0, commands
    assert marker in (commands[0].get("aggregatedOutput") or "")
    assert (work / "approved.txt").read_text() == marker
    # The model got the command's output back (the turn's second request).
    outputs = [i for i in requests[-1]["input"] if i.get("type") == "function_call_output" and i.get("call_id") == "call_esc"]
    assert len(outputs) == 1 and marker in json.dumps(outputs[0])
    # No frame the client received names another thread (the revert's own included).
    frames = [json.loads(line) for line in client.received]
    ids: set[str] = set()
    for f in frames:
        thread_ids_in(f, ids)
    assert ids == {tid}
    assert "thread/reverted" not in [f.get("method") for f in frames]


@pytest.mark.parametrize("rebuild", ["revert", "fresh"])
async def test_epoch_engine_in_auto_mode_rebuilds_once_per_epoch(tmp_path, rebuild):
    """``thread_bootstrap`` under ``auto``: the context goes in only when the
    epoch changes (the first epoch has no history to project); within an epoch
    Codex's own history carries on."""
    turns = 7
    # Short turns: Codex 0.169.0 middle-truncates a long additionalContext
    # ("…N tokens truncated…"; seen with 12 messages of ~420 characters).
    prompts = [f"P{n}: remember the item number {n}." for n in range(1, turns + 1)]
    replies = [f"R{n}: item {n} noted." for n in range(1, turns + 1)]
    epochs = [f"e{(n - 1) // EPOCH_TURNS}" for n in range(1, turns + 1)]
    changed = [n > 0 and epochs[n] != epochs[n - 1] for n in range(turns)]  # turns 4 and 7
    work = tmp_path / "work"
    work.mkdir()
    site = install_engines(tmp_path / "site")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = sidecar_env(home, site, tmp_path / "state", tmp_path / "sidecar.toml", EPOCH_ID)
        env["CODEX_SIDECAR_REBUILD"] = rebuild
        del env["CODEX_SIDECAR_PROJECTION_MODE"]  # auto: what the engine asks for
        model.script(*(Text(r) for r in replies))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            turn_ids = []
            for prompt in prompts:
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                turn_ids.append(done["turn"]["id"])
            status = await finalized(client, tid, turn_ids[-1])
            inspected = await client.request("sidecar/inspect", {"threadId": tid})
        requests = list(model.requests)

    assert sum(changed) == 2
    assert status["lifecycle"]["rebuilds"] == sum(changed)
    records = inspected["turns"]
    assert [t["mode"] for t in records] == ["epoch"] * turns
    assert [t["epoch"] for t in records] == epochs
    assert [t["rebuilt"] for t in records] == changed

    assert len(requests) == turns
    by_turn = [next(r for r in requests if prompt_of(r) == p) for p in prompts]
    framing = by_turn[0]["input"][:-1]
    seen: set[str] = set()
    for n, request in enumerate(by_turn, 1):
        assert not any(CONTEXT_HEADER in t for t in input_texts(request, "user"))
        contexts = [context_text(request, i) for i in context_items(request)]
        assert len(contexts) <= 1, f"turn {n}: contexts pile up"
        new = [c for c in contexts if c not in seen]
        assert bool(new) == changed[n - 1], f"turn {n}: new context {bool(new)}, epoch changed {changed[n - 1]}"
        seen.update(contexts)
        if changed[n - 1]:
            # Reverted to the framing; the whole history as one developer message, then the prompt.
            assert without_ids(request["input"][: len(framing)]) == without_ids(framing)
            rest = request["input"][len(framing) :]
            assert [(i.get("role"), len(context_items({"input": [i]}))) for i in rest] == [("developer", 1), ("user", 0)]
            (context,) = new
            assert context.startswith(CONTEXT_HEADER)
            for k in range(n - 1):
                assert f"[user]\n{prompts[k]}" in context and replies[k] in context
        elif n > 1:
            # Within an epoch: the previous request plus the last reply and this prompt, unchanged.
            before = by_turn[n - 2]["input"]
            assert request["input"][: len(before)] == before
    assert context_items(by_turn[0]) == context_items(by_turn[1]) == context_items(by_turn[2]) == []


async def test_a_long_rebuild_reaches_the_model_whole_in_ordered_parts(tmp_path):
    """Codex 0.169.0 cuts the middle out of an additionalContext value over
    about 4 KB, so a large rebuild travels in parts (``openclaw_context``,
    ``openclaw_context_002``, ...). At the epoch change of turn 7 the history
    (12 messages of ~420 characters) must reach the model complete."""
    turns = 7
    prompts = [filler(f"P{n}", n) for n in range(1, turns + 1)]
    replies = [filler(f"R{n}", n + 3) for n in range(1, turns + 1)]
    work = tmp_path / "work"
    work.mkdir()
    site = install_engines(tmp_path / "site")
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = sidecar_env(home, site, tmp_path / "state", tmp_path / "sidecar.toml", EPOCH_ID)
        del env["CODEX_SIDECAR_PROJECTION_MODE"]
        model.script(*(Text(r) for r in replies))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            for prompt in prompts:
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
        last = next(r for r in model.requests if prompt_of(r) == prompts[-1])
    parts = []
    for item in last["input"]:
        for text in texts_of(item):
            if text.startswith("<openclaw_context"):
                tag = text[1 : text.index(">")]
                assert text.endswith(f"</{tag}>")
                parts.append((tag, text[len(tag) + 2 : -len(tag) - 3]))
    assert len(parts) >= 2, "a ~5 KB block must travel in several parts"
    assert [t for t, _ in parts] == ["openclaw_context"] + [f"openclaw_context_{n:03d}" for n in range(2, len(parts) + 1)]
    whole = "".join(body for _, body in parts)
    assert "truncated" not in whole
    for k in range(turns - 1):
        assert prompts[k] in whole and replies[k] in whole


async def test_a_client_revert_reaches_the_engine_s_history_with_the_real_codex(tmp_path):
    """The client undoes its last two turns: Codex drops them, and so does
    the transcript mirror the engine assembles from (inspect shows the
    history the engine got), while the client's reads list what is left."""
    work = tmp_path / "work"
    work.mkdir()
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = sidecar_env(home, install_engines(tmp_path / "site"), tmp_path / "state", tmp_path / "sidecar.toml", IDENTITY_ID)
        model.script(*(Text(f"Reply {n}.") for n in range(1, 5)))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            ids = []
            for n in range(1, 4):
                done = await client.run_turn(tid, f"Prompt {n}.", timeout=TURN_TIMEOUT)
                ids.append(done["turn"]["id"])
            await finalized(client, tid, ids[-1])
            await client.request("thread/revert", {"threadId": tid, "beforeTurnId": ids[1]})
            done = await client.run_turn(tid, "Prompt 4.", timeout=TURN_TIMEOUT)
            ids.append(done["turn"]["id"])
            await finalized(client, tid, ids[-1])
            records = (await client.request("sidecar/inspect", {"threadId": tid}))["turns"]
            read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
        last = model.requests[-1]

    # The engine's history for turn 4 is turn 1 only (2 messages), not turns 1-3 (6).
    assert [r["historyMessages"] for r in records] == [0, 2, 4, 2]
    assert [t["id"] for t in read["thread"]["turns"]] == [ids[0], ids[3]]
    body = json.dumps(last["input"])
    assert "Prompt 1." in body and "Prompt 4." in body
    assert "Prompt 2." not in body and "Prompt 3." not in body


@pytest.mark.parametrize("rebuild", ["revert", "fresh"])
async def test_a_client_revert_s_backwards_cursors_outlive_the_next_rebuild(tmp_path, rebuild):
    """Codex answers a revert with cursors to the newest turn and item kept;
    after the summary engine's next rebuild the client still pages from them
    (the sidecar, from its archive), newest first, as Codex would have."""
    work = tmp_path / "work"
    work.mkdir()
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = sidecar_env(home, install_engines(tmp_path / "site"), tmp_path / "state", tmp_path / "sidecar.toml", SUMMARY_ID)
        env["CODEX_SIDECAR_REBUILD"] = rebuild
        model.script(*(Text(f"Reply {n}.") for n in range(1, 12)))
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            ids = []
            for n in range(1, 6):  # turn 4 rebuilds: Codex holds turns 4 and 5
                done = await client.run_turn(tid, f"Prompt {n}.", timeout=TURN_TIMEOUT)
                ids.append(done["turn"]["id"])
            await finalized(client, tid, ids[-1])
            answer = await client.request("thread/revert", {"threadId": tid, "beforeTurnId": ids[4]})
            kept_turns = [t["id"] for t in await list_all_turns(client, tid, "desc", 2)]
            kept_items = [e["item"]["id"] for e in await list_all_turns(client, tid, "desc", 3, method="thread/items/list")]
            live = {
                "turns": [t["id"] for t in await list_all_turns(client, tid, "desc", 2, cursor=answer["turnsBackwardsCursor"])],
                "items": [e["item"]["id"] for e in await list_all_turns(client, tid, "desc", 3, "thread/items/list", answer["itemsBackwardsCursor"])],
            }
            for n in (6, 7):  # the second of these rebuilds: turn 4 leaves Codex
                done = await client.run_turn(tid, f"Prompt {n}.", timeout=TURN_TIMEOUT)
                await finalized(client, tid, done["turn"]["id"])
            status = await client.request("sidecar/status")
            archived = {
                "turns": [t["id"] for t in await list_all_turns(client, tid, "desc", 2, cursor=answer["turnsBackwardsCursor"])],
                "items": [e["item"]["id"] for e in await list_all_turns(client, tid, "desc", 3, "thread/items/list", answer["itemsBackwardsCursor"])],
            }
    assert status["lifecycle"]["threads"][tid]["rebuilds"] == 2
    assert kept_turns == ids[3::-1]
    assert live == {"turns": kept_turns, "items": kept_items}
    assert archived == live
