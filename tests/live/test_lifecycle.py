"""The context-engine lifecycle, live: real codex 0.169.0, the fake model, and
a test engine the sidecar finds the way it finds any third-party engine.

The engine is not imported by the test: each test writes a tiny module
(``live_recorder``, a :class:`engines.testkit.RecordingEngine` subclass) plus
a ``live_recorder_engine-0.0.1.dist-info`` declaring it under
``openclaw.context_engines`` into a temp folder, puts that folder on the
sidecar's ``PYTHONPATH``, selects it with ``CODEX_SIDECAR_ENGINE`` and trusts
it with ``CODEX_SIDECAR_ENGINE_ALLOWLIST``; its settings come from
``[engines.live-recorder]`` in the ``CODEX_SIDECAR_CONFIG`` file. The engine
appends every call it gets (method + key fields) to a JSONL file named in
its config, so the test can read what the engine saw across the process
boundary.

Two sources of truth are compared: the engine's call log (what the sidecar
asked of the engine) and the fake model's request bodies (what the model
really received). No assertion depends on timing: the test waits for log
entries or notifications, with generous timeouts, and never measures time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from sidecar.projection import ADDITIONAL_CONTEXT_KEY, CONTEXT_HEADER
from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.normalise import client_view, model_view
from tools.client import AppServerClient, RpcError
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import Failed, FakeModel, Hang, Text, input_texts
from tools.scenarios import SCENARIOS, codex_connector, connector, prepare_codex_home, run_scenario

pytestmark = needs_codex

TURN_TIMEOUT = 30.0
ENGINE_ID = "live-recorder"
BROKEN_ENGINE_ID = "broken-recorder"
DIST_NAME = "live-recorder-engine"
ADDITION = "Live test addition: answer in one short line."

# --------------------------------------------------------------------------
# The engine, as an installed distribution would ship it.

ENGINE_MODULE = '''\
"""live_recorder: RecordingEngine + a JSONL log of every call, for live tests."""

import json

import trio

from engines import AssembleResult
from engines.testkit import RecordingEngine


def _text(message):
    """The plain text of a message (text blocks only), for assertions."""
    if message.role == "compactionSummary":
        return message.summary
    content = message.content
    if isinstance(content, str):
        return content
    return "\\n".join(b.text for b in content if getattr(b, "type", None) == "text")


def _messages(messages):
    return [{"role": m.role, "text": _text(m)} for m in messages]


class LiveRecordingEngine(RecordingEngine):
    """Config: log (path, required), system_prompt_addition, owns_compaction
    (read by RecordingEngine), id, keep_last (assemble keeps only the newest
    N messages; default all); for error paths: raise_on (assemble raises
    when the prompt contains it), hang_assemble_on / hang_after_turn_on
    (that call hangs when the prompt / the last user message contains it)."""

    def __init__(self, config=None):
        config = dict(config or {})
        config.setdefault("id", "live-recorder")
        super().__init__(config)
        self.log_path = self.config["log"]
        self.addition = self.config.get("system_prompt_addition") or None
        self.raise_on = self.config.get("raise_on")
        self.hang_assemble_on = self.config.get("hang_assemble_on")
        self.hang_after_turn_on = self.config.get("hang_after_turn_on")
        self.keep_last = self.config.get("keep_last")

    def _write(self, method, params, **fields):
        entry = {"method": method}
        if params is not None:
            entry["session_id"] = params.session_id
            entry["session_key"] = params.session_key
        entry.update(fields)
        # One short O_APPEND write per call; an engine with real I/O would
        # use trio.to_thread.run_sync.
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\\n")

    async def handle_bootstrap(self, params):
        self._write("bootstrap", params, session_file=params.session_file)
        return await super().handle_bootstrap(params)

    async def handle_assemble(self, params):
        self._write(
            "assemble",
            params,
            messages=_messages(params.messages),
            prompt=params.prompt,
            token_budget=params.token_budget,
            tools=sorted(params.available_tools),
            model=params.model,
        )
        if self.raise_on and self.raise_on in (params.prompt or ""):
            raise ValueError(params.prompt)  # quotes the prompt on purpose
        if self.hang_assemble_on and self.hang_assemble_on in (params.prompt or ""):
            await trio.sleep_forever()  # until the sidecar's deadline cancels it
        messages = list(params.messages)
        if self.keep_last is not None:
            messages = messages[-self.keep_last :] if self.keep_last else []
        return AssembleResult(
            messages=messages,
            estimated_tokens=sum(len(_text(m)) // 4 for m in messages),
            system_prompt_addition=self.addition,
        )

    async def handle_after_turn(self, params):
        self._write(
            "after_turn",
            params,
            session_file=params.session_file,
            messages=_messages(params.messages),
            pre_prompt_message_count=params.pre_prompt_message_count,
        )
        last_user = [m for m in _messages(params.messages) if m["role"] == "user"][-1:]
        if self.hang_after_turn_on and last_user and self.hang_after_turn_on in last_user[0]["text"]:
            await trio.sleep_forever()

    async def handle_ingest(self, params):
        self._write("ingest", params, message=_messages([params.message])[0])
        return await super().handle_ingest(params)

    async def handle_ingest_batch(self, params):
        self._write("ingest_batch", params, messages=_messages(params.messages))
        return await super().handle_ingest_batch(params)

    async def handle_maintain(self, params):
        self._write("maintain", params, reason=params.reason)
        return await super().handle_maintain(params)

    async def handle_compact(self, params):
        self._write("compact", params, force=params.force)
        return await super().handle_compact(params)


def broken_factory(config):
    raise RuntimeError("broken factory: this engine cannot be built")
'''

ENTRY_POINTS = f"""\
[openclaw.context_engines]
{ENGINE_ID} = live_recorder:LiveRecordingEngine
{BROKEN_ENGINE_ID} = live_recorder:broken_factory
"""


def install_engine(site: Path) -> Path:
    """Write the module and its dist-info into ``site``; return ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "live_recorder.py").write_text(ENGINE_MODULE)
    info = site / "live_recorder_engine-0.0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


# --------------------------------------------------------------------------
# One sidecar session in front of codex, with the test engine installed.


@dataclass
class Live:
    root: Path
    work: Path
    state: Path
    log: Path
    config: Path
    site: Path
    home: Path
    model: FakeModel

    def calls(self, method: str | None = None, session_id: str | None = None) -> list[dict]:
        if not self.log.exists():
            return []
        # Only whole lines: the engine may be appending while the test reads.
        out = [json.loads(line) for line in self.log.read_text().split("\n")[:-1] if line.strip()]
        return [
            c
            for c in out
            if (method is None or c["method"] == method) and (session_id is None or c.get("session_id") == session_id)
        ]

    async def wait_calls(
        self,
        method: str,
        count: int,
        session_id: str | None = None,
        *,
        client: AppServerClient | None = None,
        timeout: float = TURN_TIMEOUT,
    ) -> list[dict]:
        """Wait until the engine logged ``count`` calls of ``method``.

        On timeout, fail with what the engine saw and, given the ``client``,
        the sidecar's lifecycle status and stderr, to make a failure readable.
        """
        with trio.move_on_after(timeout):
            while len(found := self.calls(method, session_id)) < count:
                await trio.sleep(0.02)
            return found
        details = {"calls": [(c["method"], c.get("session_id")) for c in self.calls()]}
        if client is not None:
            with contextlib.suppress(Exception):
                details["lifecycle"] = (await client.request("sidecar/status", timeout=5)).get("lifecycle")
            details["stderr"] = [line for line in client.stderr_text.splitlines() if "codex-sidecar" in line][-30:]
        pytest.fail(f"engine logged {len(self.calls(method, session_id))} {method} call(s), wanted {count}:\n" + json.dumps(details, indent=1))

    def write_config(self, **engine_config: Any) -> None:
        lines = [f"[engines.{ENGINE_ID}]", f"log = {json.dumps(str(self.log))}"]
        for key, value in engine_config.items():
            lines.append(f"{key} = {json.dumps(value)}")
        self.config.write_text("\n".join(lines) + "\n")

    def env(self, engine: str, home: Path | None = None, **settings: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_") or k == "CODEX_SIDECAR_TEST_CODEX_BIN"}
        base.update(
            {
                "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN,
                "CODEX_SIDECAR_ENGINE": engine,
                "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST_NAME,
                "CODEX_SIDECAR_STATE_DIR": str(self.state),
                "CODEX_SIDECAR_CONFIG": str(self.config),
                "PYTHONPATH": os.pathsep.join(p for p in (str(self.site), str(ROOT), os.environ.get("PYTHONPATH")) if p),
            }
        )
        base.update({f"CODEX_SIDECAR_{k.upper()}": v for k, v in settings.items()})
        return codex_env(home or self.home, base)

    @contextlib.asynccontextmanager
    async def sidecar(self, engine: str = ENGINE_ID, **settings: str) -> AsyncIterator[AppServerClient]:
        argv = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
        async with AppServerClient.spawn(argv, env=self.env(engine, **settings), cwd=str(self.work)) as client:
            await client.initialize()
            yield client

    def mirror(self, thread_id: str) -> list[dict]:
        path = self.state / "sessions" / f"{thread_id}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def live(tmp_path):
    with FakeModel() as model:
        work = tmp_path / "work"
        work.mkdir()
        lv = Live(
            root=tmp_path,
            work=work,
            state=tmp_path / "state",
            log=tmp_path / "engine-calls.jsonl",
            config=tmp_path / "sidecar.toml",
            site=install_engine(tmp_path / "site"),
            home=make_codex_home(tmp_path / "codex-home", model.base_url),
            model=model,
        )
        lv.write_config(system_prompt_addition=ADDITION)
        yield lv


# --------------------------------------------------------------------------
# Reading the model's requests.


def _parts(item: dict) -> list[str]:
    if item.get("type", "message") != "message":
        return []
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if isinstance(p, dict)]


def new_items(requests: list[dict], index: int) -> list[dict]:
    """The input items request ``index`` added to the previous request of the
    same thread (``prompt_cache_key`` is the thread id): Codex re-sends its
    thread history as a prefix, so what follows it is this turn's. After the
    sidecar rebuilt the thread's history (delta projection), all of it."""
    request = requests[index]
    key = request.get("prompt_cache_key")
    previous = [r for r in requests[:index] if r.get("prompt_cache_key") == key]
    if not previous:
        return list(request["input"])
    before = previous[-1]["input"]
    if request["input"][: len(before)] != before:
        return list(request["input"])  # the history was rebuilt: nothing older is left
    return list(request["input"][len(before) :])


def turn_context(requests: list[dict], index: int, prompt: str) -> str | None:
    """The context projected for this turn, checked to come before ``prompt``.

    Placement-agnostic: the context may be the first part of the turn's user
    message or a developer message before it; either way it is among the
    items this turn added, before the part holding the user's request, and
    nothing with the header follows the request.
    """
    parts = [(item.get("role"), text) for item in new_items(requests, index) for text in _parts(item)]
    at = [n for n, (role, text) in enumerate(parts) if role == "user" and text == prompt]
    assert at, f"request {index} does not carry the prompt {prompt!r} as this turn's input"
    assert not any(CONTEXT_HEADER in text for _, text in parts[at[-1] + 1 :])
    found = [text for _, text in parts[: at[-1]] if CONTEXT_HEADER in text]
    return found[-1][found[-1].index(CONTEXT_HEADER) :] if found else None


def last_user_parts(request: dict) -> list[str]:
    """The text parts of the request's last user message (this turn's input)."""
    users = [i for i in request.get("input") or [] if i.get("type", "message") == "message" and i.get("role") == "user"]
    assert users, "request without a user message"
    return [p.get("text", "") for p in users[-1].get("content") or [] if isinstance(p, dict)]


def addition_positions(request: dict) -> list[int]:
    tag = f"<{ADDITIONAL_CONTEXT_KEY}>"
    return [
        n
        for n, item in enumerate(request.get("input") or [])
        if item.get("role") == "developer" and any(tag in t for t in input_texts({"input": [item]}))
    ]


def echo_reply(body: dict) -> Text:
    """A reply naming the request it answers, whatever order requests arrive in."""
    return Text(f"reply to {last_user_parts(body)[-1]}")


def texts(messages: list[dict], role: str | None = None) -> list[str]:
    return [m["text"] for m in messages if role is None or m["role"] == role]


# --------------------------------------------------------------------------
# Tests


async def test_per_turn_projection_addition_after_turn_and_maintenance(live):
    """per_turn projection (the spec's first version): every turn carries the
    assembled history, whatever Codex's own history already holds."""
    prompts = ["Remember the codeword PAPAYA.", "My colour is blue.", "Codeword and colour?"]
    replies = ["Noted PAPAYA.", "Noted blue.", "PAPAYA, blue."]
    live.model.script(*(Text(r) for r in replies))
    async with live.sidecar(projection_mode="per_turn") as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        for n, prompt in enumerate(prompts, 1):
            done = await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed"
            await live.wait_calls("maintain", n, client=client)  # this turn's finalisation is over
        status = await client.request("sidecar/status")

    requests = live.model.requests
    assert len(requests) == 3
    # What the model received: turn 1 has no history to project; turns 2 and 3
    # carry the projected context (header, earlier turns) before the request.
    assert turn_context(requests, 0, prompts[0]) is None
    for n in (1, 2):
        context = turn_context(requests, n, prompts[n])
        assert context is not None and context.startswith(CONTEXT_HEADER)
        for earlier_prompt, earlier_reply in zip(prompts[:n], replies[:n]):
            assert f"[user]\n{earlier_prompt}" in context
            assert f"[assistant]\n{earlier_reply}" in context
        # Earlier turns, in order.
        assert context.index(prompts[0]) < context.index(replies[0])
        if n == 2:
            assert context.index(replies[0]) < context.index(prompts[1]) < context.index(replies[1])
    # The system prompt addition is a developer message before the first
    # turn's input, sent once: later turns see it in Codex's history, not stacked.
    for request in requests:
        positions = addition_positions(request)
        assert len(positions) == 1
        tagged = input_texts({"input": [request["input"][positions[0]]]})
        assert f"<{ADDITIONAL_CONTEXT_KEY}>{ADDITION}</{ADDITIONAL_CONTEXT_KEY}>" in tagged
    first_user = [n for n, i in enumerate(requests[0]["input"]) if i.get("role") == "user"][-1]
    assert addition_positions(requests[0])[0] < first_user

    # What the engine saw.
    calls = live.calls()
    assert [c["method"] for c in calls] == ["assemble", "after_turn", "maintain"] * 3  # no bootstrap: no history
    assert {c["session_id"] for c in calls} == {thread_id}
    assert {c["session_key"] for c in calls} == {thread_id}
    assembles = live.calls("assemble")
    assert [a["prompt"] for a in assembles] == prompts  # the original prompts
    assert [len(a["messages"]) for a in assembles] == [0, 2, 4]
    after = live.calls("after_turn")
    assert [a["pre_prompt_message_count"] for a in after] == [0, 2, 4]
    for n, a in enumerate(after):
        assert texts(a["messages"], "user") == prompts[: n + 1]  # mirrored originals, not projections
        assert texts(a["messages"], "assistant") == replies[: n + 1]
        assert not any(CONTEXT_HEADER in t for t in texts(a["messages"]))
        assert a["session_file"] == str(live.state / "sessions" / f"{thread_id}.jsonl")
    assert [m["reason"] for m in live.calls("maintain")] == ["turn"] * 3

    # The mirror holds the same originals; the status reports the last turn.
    mirrored = [e["message"] for e in live.mirror(thread_id) if e.get("type") == "message"]
    assert [m["role"] for m in mirrored] == ["user", "assistant"] * 3
    assert not any(CONTEXT_HEADER in json.dumps(m) for m in mirrored)
    thread_status = status["lifecycle"]["threads"][thread_id]
    assert status["lifecycle"]["engine"] == {"id": ENGINE_ID, "ownsCompaction": False}
    assert thread_status["lastTurn"]["projected"] is True
    assert thread_status["lastTurn"]["assembledMessageCount"] == 4


async def test_delta_projection_sends_only_what_codex_lacks_and_rebuilds_in_place(live):
    """The default projection (delta): while the engine's assembly extends what
    the Codex thread already holds, nothing is projected again; once the
    engine drops the oldest messages, the thread is rebuilt in place and the
    model sees exactly the assembly, before the user's request."""
    live.write_config(system_prompt_addition=ADDITION, keep_last=4)
    prompts = ["P1 apples", "P2 bananas", "P3 cherries", "P4 dates"]
    replies = ["R1 ok", "R2 ok", "R3 ok", "R4 ok"]
    live.model.script(*(Text(r) for r in replies))
    async with live.sidecar(stale_slack="0") as client:  # exact delta: these drops are tiny
        thread_id = await client.start_thread(cwd=str(live.work))
        for n, prompt in enumerate(prompts, 1):
            done = await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed"
            await live.wait_calls("maintain", n, client=client)
        inspected = await client.request("sidecar/inspect", {"threadId": thread_id})

    requests = live.model.requests
    assert [len(a["messages"]) for a in live.calls("assemble")] == [0, 2, 4, 6]
    # Turns 2 and 3: Codex's own history already holds the assembly.
    for n in (1, 2):
        assert turn_context(requests, n, prompts[n]) is None
        assert prompts[n - 1] in json.dumps(requests[n]["input"])
    # Turn 4: the engine kept the newest 4 of 6 messages. The model sees those,
    # projected before the request, and nothing of the dropped turn.
    context = turn_context(requests, 3, prompts[3])
    assert context is not None
    for kept in prompts[1:3] + replies[1:3]:
        assert kept in context
    assert prompts[0] not in json.dumps(requests[3]["input"])
    assert replies[0] not in json.dumps(requests[3]["input"])
    # Rebuilt in place: same thread, same prompt-cache key, and the client was
    # told nothing about it.
    assert {r["prompt_cache_key"] for r in requests} == {thread_id}
    assert client.notifications_for("thread/reverted") == []
    assert [r.get("rebuilt") for r in inspected["turns"]] == [False, False, False, True]
    # The engine's own view is untouched: after_turn sees the whole transcript.
    assert texts(live.calls("after_turn")[-1]["messages"], "user") == prompts


async def test_addition_survives_a_delta_rebuild(live):
    live.write_config(system_prompt_addition=ADDITION, keep_last=2)
    live.model.script(Text("R1"), Text("R2"), Text("R3"))
    async with live.sidecar(stale_slack="0") as client:  # exact delta: these drops are tiny
        thread_id = await client.start_thread(cwd=str(live.work))
        for n, prompt in enumerate(("P1", "P2", "P3"), 1):
            await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            await live.wait_calls("maintain", n, client=client)
    rebuilt = live.model.requests[2]
    assert turn_context(live.model.requests, 2, "P3") is not None  # the rebuild happened
    assert len(addition_positions(rebuilt)) == 1


async def test_turn_maintenance_skipped_on_interrupted_and_failed_turns(live):
    live.model.script(Text("First."), Hang(), Failed("model broke"), Text("Fourth."))
    async with live.sidecar() as client:
        thread_id = await client.start_thread(cwd=str(live.work))

        done = await client.run_turn(thread_id, "One.", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 1, client=client)

        turn_id = await client.start_turn(thread_id, "Two, think forever.")
        await live.model.wait_for_requests_async(2, timeout=TURN_TIMEOUT)
        await client.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})
        done = await client.wait_turn_completed(thread_id, turn_id, timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "interrupted"
        await live.wait_calls("after_turn", 2, client=client)

        done = await client.run_turn(thread_id, "Three.", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "failed"
        await live.wait_calls("after_turn", 3, client=client)

        done = await client.run_turn(thread_id, "Four.", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 2, client=client)
        status = await client.request("sidecar/status")

    # The next turn's assemble waits for the previous finalisation (maintenance
    # included), so the call order shows exactly which turns were maintained.
    methods = [c["method"] for c in live.calls()]
    assert methods == [
        "assemble", "after_turn", "maintain",  # completed
        "assemble", "after_turn",  # interrupted: no maintenance
        "assemble", "after_turn",  # failed: no maintenance
        "assemble", "after_turn", "maintain",  # completed
    ]  # fmt: skip
    assert [m["reason"] for m in live.calls("maintain")] == ["turn", "turn"]
    after = live.calls("after_turn")
    # The interrupted and the failed turns are still ingested, with their prompts.
    assert [texts(a["messages"], "user")[-1] for a in after] == ["One.", "Two, think forever.", "Three.", "Four."]
    assert [a["pre_prompt_message_count"] for a in after] == [len(a["messages"]) for a in live.calls("assemble")]
    last = status["lifecycle"]["threads"][thread_id]
    assert last["lastFinalize"]["status"] == "completed"
    assert last["lastMaintainTurn"] == "ok"
    finalized = [e["data"] for e in live.mirror(thread_id) if e.get("customType") == "openclaw-codex-sidecar/turn-finalized"]
    assert [f["status"] for f in finalized] == ["completed", "interrupted", "failed", "completed"]


async def test_legacy_relays_exactly_like_a_direct_session(live, tmp_path):
    """Selecting ``legacy`` (with a third-party engine installed and configured)
    changes nothing: same client frames, same model requests as a direct run."""
    scenario = SCENARIOS["plain_conversation"]

    async def run(via_sidecar: bool) -> tuple[list, list, str]:
        root = tmp_path / ("s" if via_sidecar else "d")  # same length: the fake model counts path chars
        work = root / "work"
        work.mkdir(parents=True)
        with FakeModel() as model:
            home = prepare_codex_home(scenario, root / "codex-home", model)
            if via_sidecar:
                env = live.env("legacy", home=home)
                connect = connector([sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], env=env, cwd=work)
            else:
                connect = codex_connector(CODEX_BIN, home, work)
            clients: list = []
            await run_scenario(scenario, connect, model, work, clients=clients)
            return clients, model.requests, str(root)

    d_clients, d_requests, d_root = await run(via_sidecar=False)
    s_clients, s_requests, s_root = await run(via_sidecar=True)
    assert model_view(s_requests, s_root) == model_view(d_requests, d_root)
    assert client_view(s_clients, s_root) == client_view(d_clients, d_root)
    assert [len(c.sent) for c in s_clients] == [len(c.sent) for c in d_clients]
    assert live.calls() == []  # the installed engine was never loaded
    assert not live.state.exists()  # no lifecycle, no mirror


async def test_two_threads_keep_separate_mirrors_and_engine_sessions(live):
    live.model.script(*([echo_reply] * 6))
    prompts = {"A": ["A1 apples", "A2 apricots", "A3 avocados"], "B": ["B1 bananas", "B2 blueberries", "B3 beets"]}
    async with live.sidecar() as client:
        ids = {name: await client.start_thread(cwd=str(live.work)) for name in ("A", "B")}
        for n in range(3):
            # Both threads' turns run at once: start both, then wait for both.
            turn_ids = {name: await client.start_turn(ids[name], prompts[name][n]) for name in ("A", "B")}
            for name in ("A", "B"):
                done = await client.wait_turn_completed(ids[name], turn_ids[name], timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed"
            for name in ("A", "B"):
                await live.wait_calls("maintain", n + 1, session_id=ids[name], client=client)

    assert ids["A"] != ids["B"]
    files = sorted(p.name for p in (live.state / "sessions").iterdir())
    assert files == sorted(f"{tid}.jsonl" for tid in ids.values())
    for name, other in (("A", "B"), ("B", "A")):
        tid = ids[name]
        mirrored = [e["message"] for e in live.mirror(tid) if e.get("type") == "message"]
        users = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"] for m in mirrored if m["role"] == "user"]
        assert users == prompts[name]
        assert not any(p in json.dumps(mirrored) for p in prompts[other])
        assert live.mirror(tid)[0]["id"] == tid  # the session header names the thread
        # The engine saw this thread under its own session id, with its own history only.
        assembles = live.calls("assemble", session_id=tid)
        assert [a["prompt"] for a in assembles] == prompts[name]
        assert [len(a["messages"]) for a in assembles] == [0, 2, 4]
        for a in live.calls("after_turn", session_id=tid):
            assert texts(a["messages"], "user") == prompts[name][: len(a["messages"]) // 2]
            assert texts(a["messages"], "assistant") == [f"reply to {p}" for p in prompts[name][: len(a["messages"]) // 2]]
    assert {c["session_id"] for c in live.calls()} == set(ids.values())
    # What each thread's model requests carried: its own history only.
    # Each thread's model requests (history and projection) hold nothing of the other's.
    for request in live.model.requests:
        mine = "A" if request["prompt_cache_key"] == ids["A"] else "B"
        other = "B" if mine == "A" else "A"
        assert last_user_parts(request)[-1] in prompts[mine]
        assert not any(p in json.dumps(request["input"]) for p in prompts[other])


async def test_engine_that_fails_to_load_leaves_a_working_legacy_sidecar(live):
    live.model.script(Text("Still works."), Text("Again."))
    async with live.sidecar(engine=BROKEN_ENGINE_ID) as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        for prompt in ("First turn.", "Second turn."):
            done = await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed"
        status = await client.request("sidecar/status")
    stderr = client.stderr_text
    assert f"CONTEXT ENGINE {BROKEN_ENGINE_ID!r} NOT LOADED, falling back to 'legacy'" in stderr
    assert "broken factory: this engine cannot be built" in stderr  # the reason is named
    assert "lifecycle" not in status  # legacy: no lifecycle installed
    assert not live.state.exists()
    # Turns went through untouched: no projection, no addition.
    assert len(live.model.requests) == 2
    for request in live.model.requests:
        assert not any(CONTEXT_HEADER in t for t in input_texts(request))
        assert addition_positions(request) == []
    assert turn_context(live.model.requests, 1, "Second turn.") is None


async def test_prompt_text_never_reaches_the_sidecar_logs(live):
    """Prompts, replies and an engine exception quoting the prompt leave no
    trace on stderr, even at debug level and in both log formats."""
    marker = "ZEBRA-MARKER-7731"
    live.write_config(system_prompt_addition=ADDITION, raise_on="RAISE")
    for log_format in ("text", "json"):
        live.model.clear_script()
        live.model.script(Text(f"ok {marker} reply"), Text(f"fine {marker}"), Text(f"done {marker}"))
        before = len(live.model.requests)
        async with live.sidecar(log_level="debug", log_format=log_format, projection_mode="per_turn") as client:
            thread_id = await client.start_thread(cwd=str(live.work))
            for prompt in (f"first {marker}", f"RAISE second {marker}", f"third {marker}"):
                done = await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed"
            await live.wait_calls("after_turn", 3, session_id=thread_id, client=client)
        stderr = client.stderr_text
        assert "codex context engine assemble applied" in stderr  # the sidecar did log the turns
        assert "ValueError" in stderr  # ... and the engine failure, by type only
        leaked = [line for line in stderr.splitlines() if marker in line]
        assert leaked == []
        # The failing assemble fell back to the original request (fail open).
        requests = live.model.requests[before:]
        assert turn_context(requests, 1, f"RAISE second {marker}") is None
        assert turn_context(requests, 2, f"third {marker}") is not None


async def test_engine_owning_compaction_runs_before_native_compaction(live):
    live.write_config(system_prompt_addition=ADDITION, owns_compaction=True)
    live.model.script(Text("Noted."), Text("HANDOFF SUMMARY: noted."))
    async with live.sidecar() as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        await client.run_turn(thread_id, "Remember PAPAYA.", timeout=TURN_TIMEOUT)
        await live.wait_calls("maintain", 1, client=client)
        mark = client.mark()
        assert await client.request("thread/compact/start", {"threadId": thread_id}) == {}
        await client.wait_notification(
            "turn/completed", lambda p: p.get("threadId") == thread_id, timeout=TURN_TIMEOUT, since=mark
        )
        status = await client.request("sidecar/status")
    compacts = live.calls("compact")
    assert len(compacts) == 1 and compacts[0]["session_id"] == thread_id and compacts[0]["force"] is True
    # The engine's compaction came first; Codex's native one then asked the model.
    assert len(live.model.requests) == 2
    assert status["lifecycle"]["engine"]["ownsCompaction"] is True
    assert status["lifecycle"]["threads"][thread_id]["lastEngineCompaction"]["ok"] is True


async def test_engine_past_its_deadline_is_cut_off_and_the_turn_goes_on(live):
    live.write_config(system_prompt_addition=ADDITION, hang_assemble_on="HANG-A", hang_after_turn_on="HANG-F")
    live.model.script(Text("One."), Text("Two."), Text("Three."))
    async with live.sidecar(engine_deadline="1.5", projection_mode="per_turn") as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        prompts = ["HANG-A first", "HANG-F second", "third"]
        for n, prompt in enumerate(prompts, 1):
            done = await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed"
            await live.wait_calls("after_turn", n, client=client)
        await live.wait_calls("maintain", 2, client=client)
        status = await client.request("sidecar/status")
    requests = live.model.requests
    # Turn 1: assemble hung; the original request went through (no addition either).
    assert turn_context(requests, 0, prompts[0]) is None
    assert addition_positions(requests[0]) == []
    # Turn 2: assembled and projected; its after_turn hung past the deadline, so
    # finalisation failed and turn maintenance was skipped.
    assert turn_context(requests, 1, prompts[1]) is not None
    assert len(addition_positions(requests[1])) == 1
    # Turn 3 was not held up for ever, and saw every message (nothing lost).
    assert [c["method"] for c in live.calls()] == [
        "assemble", "after_turn", "maintain",
        "assemble", "after_turn",
        "assemble", "after_turn", "maintain",
    ]  # fmt: skip
    assert [len(a["messages"]) for a in live.calls("assemble")] == [0, 2, 4]
    finalized = [e["data"] for e in live.mirror(thread_id) if e.get("customType") == "openclaw-codex-sidecar/turn-finalized"]
    assert [f["ok"] for f in finalized] == [True, False, True]
    assert status["lifecycle"]["threads"][thread_id]["lastMaintainTurn"] == "ok"


async def test_fresh_process_bootstraps_an_imported_session_once_and_ingests_once(live):
    live.model.script(Text("Noted PAPAYA."), Text("Noted MANGO."), Text("PAPAYA and MANGO."), Text("Still those."))
    # Two turns without an engine: the first process with one imports them
    # and bootstraps; a process after it does not bootstrap again.
    async with live.sidecar(engine="legacy") as first:
        thread_id = await first.start_thread(cwd=str(live.work))
        for prompt in ("Remember PAPAYA.", "Remember MANGO."):
            await first.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
    before = len(live.calls())
    async with live.sidecar() as second:
        resumed = await second.request("thread/resume", {"threadId": thread_id, "cwd": str(live.work)})
        assert resumed["thread"]["id"] == thread_id
        done = await second.run_turn(thread_id, "Which words?", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 2, client=second)
        status = await second.request("sidecar/status")
    calls = live.calls()[before:]
    # A session with history: bootstrap and bootstrap maintenance once, before assembling.
    assert [c["method"] for c in calls] == ["bootstrap", "maintain", "assemble", "after_turn", "maintain"]
    assert [c["reason"] for c in calls if c["method"] == "maintain"] == ["bootstrap", "turn"]
    assert calls[0]["session_file"] == str(live.state / "sessions" / f"{thread_id}.jsonl")
    assert texts(calls[2]["messages"], "user") == ["Remember PAPAYA.", "Remember MANGO."]
    assert calls[3]["pre_prompt_message_count"] == 4
    assert texts(calls[3]["messages"], "user") == ["Remember PAPAYA.", "Remember MANGO.", "Which words?"]
    assert status["lifecycle"]["threads"][thread_id]["bootstrapped"] is True
    # Exactly once: resuming did not re-import turns the mirror already had.
    keys = [e.get("idempotencyKey") for e in live.mirror(thread_id) if e.get("type") != "session"]
    assert len(keys) == len(set(keys))
    roles = [e["message"]["role"] for e in live.mirror(thread_id) if e.get("type") == "message"]
    assert roles == ["user", "assistant"] * 3

    before = len(live.calls())
    async with live.sidecar() as third:
        await third.request("thread/resume", {"threadId": thread_id, "cwd": str(live.work)})
        await third.run_turn(thread_id, "Still?", timeout=TURN_TIMEOUT)
        await live.wait_calls("maintain", 4, client=third)
    # Bootstrapped once a session, not once a process (its maintenance runs once a process).
    later = live.calls()[before:]
    assert [c["method"] for c in later] == ["maintain", "assemble", "after_turn", "maintain"]
    assert [c["reason"] for c in later if c["method"] == "maintain"] == ["bootstrap", "turn"]


async def test_addition_survives_a_refused_turn_start(live):
    live.model.script(Text("Hello."))
    async with live.sidecar() as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        bad = [{"type": "text", "text": "Hi.", "text_elements": []}, {"type": "no-such-input"}]
        with pytest.raises(RpcError):
            await client.request("turn/start", {"threadId": thread_id, "input": bad})
        done = await client.run_turn(thread_id, "Hi again.", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
    assert len(live.calls("assemble")) == 2  # the refused turn was assembled too
    assert len(addition_positions(live.model.requests[0])) == 1


async def test_a_thread_codex_unloads_is_released_then_resumed_from_disk(live):
    """Real codex unloads an unsubscribed thread (here with no unload delay)
    and says ``thread/closed``: the sidecar closes the thread's mirror file and
    drops its state; a resume in the same process opens it from disk."""
    live.model.script(Text("Noted PAPAYA."), Text("Noted MANGO."), Text("PAPAYA and MANGO."))
    params = {"cwd": str(live.work), "config": {"thread_unload_delay_secs": 0}}
    mirror = str(live.state / "sessions")
    async with live.sidecar() as client:
        thread_id = await client.start_thread(**params)
        for n, prompt in enumerate(("Remember PAPAYA.", "Remember MANGO."), 1):
            await client.run_turn(thread_id, prompt, timeout=TURN_TIMEOUT)
            await live.wait_calls("maintain", n, client=client)
        fd_dir = Path(f"/proc/{client.process.pid}/fd")

        def mirror_open() -> bool:
            return any(os.readlink(fd).startswith(mirror) for fd in fd_dir.iterdir() if fd.is_symlink())

        assert mirror_open()
        await client.request("thread/unsubscribe", {"threadId": thread_id})
        await client.wait_notification("thread/closed", lambda p: p.get("threadId") == thread_id, timeout=TURN_TIMEOUT)
        with trio.fail_after(TURN_TIMEOUT):
            while thread_id in (status := await client.request("sidecar/status"))["lifecycle"]["threads"]:
                await trio.sleep(0.05)
        assert status["lifecycle"]["releasedThreads"] == 1
        assert not mirror_open()
        before = len(live.calls())
        await client.request("thread/resume", {"threadId": thread_id, **params})
        done = await client.run_turn(thread_id, "Which words?", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 4, client=client)
    calls = live.calls()[before:]
    # No bootstrap: the engine followed the session from its first turn (the
    # session's journal of learned facts says so, read again from disk);
    # bootstrap maintenance, as in a new process.
    assert [c["method"] for c in calls] == ["maintain", "assemble", "after_turn", "maintain"]
    assert texts(calls[1]["messages"], "user") == ["Remember PAPAYA.", "Remember MANGO."]
    keys = [e.get("idempotencyKey") for e in live.mirror(thread_id) if e.get("type") != "session"]
    assert len(keys) == len(set(keys))
    roles = [e["message"]["role"] for e in live.mirror(thread_id) if e.get("type") == "message"]
    assert roles == ["user", "assistant"] * 3


async def test_a_thread_codex_archives_is_released_though_it_says_no_thread_closed(live):
    """Real codex unloads an archived thread and says only ``thread/archived``
    (no ``thread/closed``): the sidecar releases it all the same; after
    ``thread/unarchive`` a resume opens it from disk."""
    live.model.script(Text("Noted KIWI."), Text("KIWI."))
    mirror = str(live.state / "sessions")
    async with live.sidecar() as client:
        thread_id = await client.start_thread(cwd=str(live.work))
        await client.run_turn(thread_id, "Remember KIWI.", timeout=TURN_TIMEOUT)
        await live.wait_calls("maintain", 1, client=client)
        fd_dir = Path(f"/proc/{client.process.pid}/fd")
        assert any(os.readlink(fd).startswith(mirror) for fd in fd_dir.iterdir() if fd.is_symlink())
        await client.request("thread/archive", {"threadId": thread_id})
        await client.wait_notification("thread/archived", lambda p: p.get("threadId") == thread_id, timeout=TURN_TIMEOUT)
        with trio.fail_after(TURN_TIMEOUT):
            while thread_id in (status := await client.request("sidecar/status"))["lifecycle"]["threads"]:
                await trio.sleep(0.05)
        assert status["lifecycle"]["releasedThreads"] == 1
        assert not any(os.readlink(fd).startswith(mirror) for fd in fd_dir.iterdir() if fd.is_symlink())
        assert not [n for n in client.notifications if n.get("method") == "thread/closed"]
        await client.request("thread/unarchive", {"threadId": thread_id})
        await client.request("thread/resume", {"threadId": thread_id, "cwd": str(live.work)})
        done = await client.run_turn(thread_id, "Which word?", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
    assembled = [c for c in live.calls() if c["method"] == "assemble"][-1]
    assert texts(assembled["messages"], "user") == ["Remember KIWI."]


LEARNED_RESERVE = 25_000
LEARNED_TOOLS = [
    {"type": "function", "name": "message", "description": "Send a message.", "inputSchema": {"type": "object", "properties": {}}},
    {
        "type": "namespace",
        "name": "openclaw",
        "description": "OpenClaw's tools.",
        "tools": [{"type": "function", "name": "memory_search", "description": "Search memory.", "inputSchema": {"type": "object", "properties": {}}}],
    },
]


async def test_a_fresh_process_keeps_the_tools_the_window_and_the_bootstrap(live):
    """What one sidecar process learns, the next keeps (issue 24): OpenClaw
    sends ``dynamicTools`` with ``thread/start`` only, and runs each
    ``--local`` turn in a new sidecar process."""
    live.model.script(Text("Noted PAPAYA."), Text("It was PAPAYA."))
    async with live.sidecar(token_reserve=str(LEARNED_RESERVE)) as first:
        thread_id = await first.start_thread(cwd=str(live.work), dynamicTools=LEARNED_TOOLS)
        done = await first.run_turn(thread_id, "Remember PAPAYA.", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 1, client=first)
        windows = {n["tokenUsage"]["modelContextWindow"] for n in first.notifications_for("thread/tokenUsage/updated")}
    (window,) = windows  # what codex reported for the model
    before = len(live.calls())

    async with live.sidecar(token_reserve=str(LEARNED_RESERVE)) as second:
        resumed = await second.request("thread/resume", {"threadId": thread_id, "cwd": str(live.work)})
        assert resumed["thread"]["id"] == thread_id
        done = await second.run_turn(thread_id, "Which word?", timeout=TURN_TIMEOUT)
        assert done["turn"]["status"] == "completed"
        await live.wait_calls("maintain", 3, client=second)
        status = await second.request("sidecar/status")

    first_assemble, second_assemble = live.calls("assemble", thread_id)
    # The same tools in both processes: the client's, as thread/start gave them.
    assert first_assemble["tools"] == second_assemble["tools"] == ["memory_search", "message"]
    # A number on every turn, never above window - reserve; the new process
    # starts from the window the old one learned.
    assert isinstance(first_assemble["token_budget"], int) and first_assemble["token_budget"] <= window - LEARNED_RESERVE
    assert second_assemble["token_budget"] == window - LEARNED_RESERVE
    # No bootstrap in either process (the engine followed the session from
    # its first turn), and the second process's engine got the history.
    later = [c["method"] for c in live.calls()[before:]]
    assert later == ["maintain", "assemble", "after_turn", "maintain"]  # bootstrap maintenance, once a process
    assert "bootstrap" not in [c["method"] for c in live.calls()]
    assert [m["text"] for m in second_assemble["messages"] if m["role"] == "user"] == ["Remember PAPAYA."]
    assert status["lifecycle"]["threads"][thread_id]["bootstrapped"] is True
