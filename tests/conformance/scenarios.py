"""The differential conformance suite's scenarios and the runs that play them.

One app-server process per mode (the real codex alone, or the sidecar in
front of it with no engine, an identity engine, or a rebuilding engine)
plays every scenario in order, each on threads of its own, against one fake
model (``tools/fake_model.py``). Per scenario the run keeps the frames the
client received and the methods it sent. The client never sends two requests
from concurrent tasks (trio shuffles its run queue, which would shuffle
request ids): back-to-back requests go out with :func:`send`, one after the
other, and are awaited after.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.conformance.normalise import canonical, normalise, per_thread
from tests.support.codex import CODEX_BIN
from tests.support.live import IDENTITY_ID, SUMMARY_ID, install_engines, sidecar_env
from tools.client import AppServerClient
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import Delay, FakeModel, Gate, Hang, ShellCall, Text

MODES = ("direct", "none", "identity", "rebuild")
"""``direct``: the real codex alone. ``none``: the sidecar with no engine.
``identity``: an engine that assembles exactly the mirrored messages (delta
projection: nothing to project). ``rebuild``: an engine that replaces older
messages by a summary, so the sidecar rebuilds Codex's history."""

STABLE_MODES = ("stable-direct", "stable-lossless", "stable-rebuild")
"""The same scenarios played by a client whose ``initialize`` declares no
capabilities (neither the experimental API nor opt-outs), as clients nobody
here wrote do: codex alone, and through the sidecar with ``lossless`` (an
engine with tools) and with the rebuilding engine (no tools, and it projects
context). Compared with ``stable-direct``: the sidecar's engine needs codex's
experimental API, the client's connection must stay as it negotiated it."""

BASE = {"stable-direct": "direct", "stable-lossless": "rebuild", "stable-rebuild": "rebuild"}
"""What a stable mode plays and masks as (``lossless`` may rebuild like the rebuilding engine)."""

ENGINES = {"none": "", "identity": IDENTITY_ID, "rebuild": SUMMARY_ID, "stable-lossless": "lossless", "stable-rebuild": SUMMARY_ID}


def base(mode: str) -> str:
    return BASE.get(mode, mode)


def baseline(mode: str) -> str:
    """The run a mode is compared with: codex alone, with the same client."""
    return "stable-direct" if mode in STABLE_MODES else "direct"
SUMMARY_MARK = "SUMMARY of the"
"""What the rebuilding engine's summary says (tests/support/live.py)."""
TURN_TIMEOUT = 30.0
QUIET = 0.25
"""A scenario ends when its last awaited frame came and nothing followed
for this long (late notifications stay with their scenario)."""


@dataclass
class Ctx:
    client: AppServerClient
    model: FakeModel
    root: Path
    work: Path


REBUILT = frozenset({"tokenUsage", "serviceTier"})
"""What a client sees differ once the sidecar rebuilt a thread's history:
the model reads other input, so Codex counts other tokens. ``serviceTier``
is a known divergence (docs/testing.md): after a rebuild in place (a
``thread/revert``, the fallback when no spare thread is ready),
``thread/resume`` answers ``"default"`` where codex alone answers null. The
rebuilt thread's ``readState.firstUnread``, ``path`` and ``preview`` are the
client's (sidecar.history.reads, sidecar.history.backing): not masked."""


@dataclass(frozen=True)
class Scenario:
    name: str
    play: Callable[[Ctx], Awaitable[None]]
    methods: tuple[str, ...]
    """The client methods it exercises (checked against what it really sent)."""
    modes: tuple[str, ...] = MODES
    per_thread: bool = False
    """Compare per thread: two threads' frames interleave as the model answers."""
    mask: frozenset[str] = REBUILT
    """Keys masked in ``masked_modes`` (see :data:`REBUILT`)."""
    masked_modes: tuple[str, ...] = ("rebuild",)
    drop: frozenset[str] = frozenset()
    """Notifications left out in every mode, each for a reason seen with the
    real codex alone (see the scenario)."""
    unstable_before: tuple[tuple[int, int, int], frozenset[str]] = ((0, 0, 0), frozenset())
    """Keys masked in every mode against a codex older than the version given:
    what that codex alone showed differently from one run to the next."""


@dataclass
class Record:
    frames: list[dict[str, Any]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    error: str | None = None
    model_requests: int = 0
    summarised: bool = False
    """A model request of the scenario carried the rebuilding engine's summary."""


@dataclass
class ModeRun:
    mode: str
    root: str
    records: dict[str, Record]
    stderr: str = ""


# --------------------------------------------------------------------------
# Client helpers


async def send(client: AppServerClient, method: str, params: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
    """Send a request now; return an awaitable for its whole reply frame
    (result or error). Uses the client's own id counter and pending table."""
    req_id = next(client._ids)
    slot: list[Any] = [trio.Event(), None]
    client._pending[req_id] = slot
    await client._send({"id": req_id, "method": method, "params": params})

    async def reply() -> dict[str, Any]:
        with trio.fail_after(TURN_TIMEOUT):
            await slot[0].wait()
        client._pending.pop(req_id, None)
        return slot[1] or {}

    return reply


async def call(client: AppServerClient, method: str, params: Any = None) -> dict[str, Any]:
    """A request and its whole reply frame (an error is a reply like any other)."""
    return await (await send(client, method, params if params is not None else {}))()


def text_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "text_elements": []}]


async def new_thread(ctx: Ctx) -> str:
    reply = await call(ctx.client, "thread/start", {"cwd": str(ctx.work)})
    return reply["result"]["thread"]["id"]


async def turn(ctx: Ctx, thread: str, text: str) -> str:
    reply = await call(ctx.client, "turn/start", {"threadId": thread, "input": text_input(text)})
    turn_id = reply["result"]["turn"]["id"]
    await ctx.client.wait_turn_completed(thread, turn_id, timeout=TURN_TIMEOUT)
    return turn_id


async def model_called(ctx: Ctx, n: int) -> None:
    await ctx.model.wait_for_requests_async(n, timeout=TURN_TIMEOUT)


# --------------------------------------------------------------------------
# Scenarios


async def plain_turns(ctx: Ctx) -> None:
    ctx.model.script(Text("Noted: PAPAYA."), Text("Blue."), Text("Noted."), Text("Noted again."), Text("PAPAYA and blue."))
    thread = await new_thread(ctx)
    # The first scenario's thread is the only one loaded: later, how many
    # threads of earlier scenarios codex still holds loaded is its timing.
    await call(ctx.client, "thread/loaded/list", {})
    for text in ("Remember PAPAYA.", "My colour is blue.", "A third fact.", "A fourth fact.", "What do you remember?"):
        await turn(ctx, thread, text)


async def reads(ctx: Ctx) -> None:
    """Five turns (the rebuilding engine summarises from the fourth), then
    every read of the thread, paging with the cursors the answers give."""
    ctx.model.script(*(Text(f"Reply {n}.") for n in range(1, 6)))
    thread = await new_thread(ctx)
    first = await turn(ctx, thread, "first")
    for text in ("second", "third", "fourth", "fifth"):
        await turn(ctx, thread, text)
    await call(ctx.client, "thread/read", {"threadId": thread, "includeTurns": True})
    page = await call(ctx.client, "thread/turns/list", {"threadId": thread, "limit": 2})
    while page.get("result", {}).get("nextCursor"):
        page = await call(ctx.client, "thread/turns/list", {"threadId": thread, "limit": 2, "cursor": page["result"]["nextCursor"]})
    page = await call(ctx.client, "thread/items/list", {"threadId": thread, "turnId": first, "limit": 1})
    if page.get("result", {}).get("nextCursor"):
        await call(ctx.client, "thread/items/list", {"threadId": thread, "turnId": first, "limit": 1, "cursor": page["result"]["nextCursor"]})
    await call(ctx.client, "thread/resume", {"threadId": thread})


async def shell_tool(ctx: Ctx) -> None:
    ctx.model.script(ShellCall("echo conformance"), Text("It printed conformance."))
    thread = await new_thread(ctx)
    first = await turn(ctx, thread, "Run echo.")
    mark = ctx.client.mark()
    await call(ctx.client, "thread/shellCommand", {"threadId": thread, "command": "echo direct"})
    await ctx.client.wait_notification(
        "turn/completed", lambda p: p.get("threadId") == thread and p["turn"]["id"] != first, timeout=TURN_TIMEOUT, since=mark
    )


async def join_running_turn(ctx: Ctx) -> None:
    """A turn/start while the thread's turn runs: Codex joins it (the same
    turn id, a second userMessage). The model's first request answers only
    once the input joined (a ``Gate``): codex 0.162.0 and later drop it and
    ask again with both inputs, codex 0.161.0 and older wait for its answer
    and then ask with the joined input (a model that never answered would
    leave their turn running for ever)."""
    before = len(ctx.model.requests)
    joined_in = threading.Event()
    ctx.model.script(Gate(joined_in, Text("First part answered.")), Text("Both parts answered."))
    thread = await new_thread(ctx)
    first = await call(ctx.client, "turn/start", {"threadId": thread, "input": text_input("first part")})
    await model_called(ctx, before + 1)
    await call(ctx.client, "turn/start", {"threadId": thread, "input": text_input("second part")})
    joined_in.set()
    await ctx.client.wait_turn_completed(thread, first["result"]["turn"]["id"], timeout=TURN_TIMEOUT)


async def back_to_back_turn_starts(ctx: Ctx) -> None:
    """Two turn/starts sent without waiting: the second follows the first
    (held while an engine assembles) and Codex joins it."""
    ctx.model.script(Delay(0.5, Text("Answered together.")))
    thread = await new_thread(ctx)
    first = await send(ctx.client, "turn/start", {"threadId": thread, "input": text_input("one")})
    second = await send(ctx.client, "turn/start", {"threadId": thread, "input": text_input("two")})
    turn_id = (await first())["result"]["turn"]["id"]
    await second()
    await ctx.client.wait_turn_completed(thread, turn_id, timeout=TURN_TIMEOUT)


async def steer(ctx: Ctx) -> None:
    """A steer while the model's first request is unanswered; it answers
    after the steer (as in :func:`join_running_turn`)."""
    before = len(ctx.model.requests)
    steered = threading.Event()
    ctx.model.script(Gate(steered, Text("Starting.")), Text("Steered."))
    thread = await new_thread(ctx)
    first = await call(ctx.client, "turn/start", {"threadId": thread, "input": text_input("start")})
    turn_id = first["result"]["turn"]["id"]
    await model_called(ctx, before + 1)
    await call(ctx.client, "turn/steer", {"threadId": thread, "expectedTurnId": turn_id, "input": text_input("go left")})
    steered.set()
    await ctx.client.wait_turn_completed(thread, turn_id, timeout=TURN_TIMEOUT)


async def interrupt(ctx: Ctx) -> None:
    before = len(ctx.model.requests)
    ctx.model.script(Hang())
    thread = await new_thread(ctx)
    first = await call(ctx.client, "turn/start", {"threadId": thread, "input": text_input("long job")})
    turn_id = first["result"]["turn"]["id"]
    await model_called(ctx, before + 1)
    await call(ctx.client, "turn/interrupt", {"threadId": thread, "turnId": turn_id})
    await ctx.client.wait_turn_completed(thread, turn_id, timeout=TURN_TIMEOUT)


async def interrupt_during_held_turn(ctx: Ctx) -> None:
    """turn/interrupt sent right behind a turn/start (which an engine holds
    while it assembles): Codex must see them in the client's order."""
    ctx.model.script(Text("Done."), Hang())
    thread = await new_thread(ctx)
    done = await turn(ctx, thread, "warm up")
    before = len(ctx.model.requests)
    start = await send(ctx.client, "turn/start", {"threadId": thread, "input": text_input("stop me")})
    stop = await send(ctx.client, "turn/interrupt", {"threadId": thread, "turnId": done})
    turn_id = (await start())["result"]["turn"]["id"]
    await stop()  # Codex 0.169.0: "no active turn to interrupt" (the new turn has not started yet)
    await model_called(ctx, before + 1)
    await call(ctx.client, "turn/interrupt", {"threadId": thread, "turnId": turn_id})
    await ctx.client.wait_turn_completed(thread, turn_id, timeout=TURN_TIMEOUT)


async def two_threads(ctx: Ctx) -> None:
    """Two threads' turns at once."""
    def answer(body: dict[str, Any]) -> Delay:  # whichever request comes first
        return Delay(0.3, Text("Answer A." if "thread A" in json.dumps(body.get("input")) else "Answer B."))

    ctx.model.script(answer, answer)
    a = await new_thread(ctx)
    b = await new_thread(ctx)
    first = await send(ctx.client, "turn/start", {"threadId": a, "input": text_input("thread A")})
    second = await send(ctx.client, "turn/start", {"threadId": b, "input": text_input("thread B")})
    ta = (await first())["result"]["turn"]["id"]
    tb = (await second())["result"]["turn"]["id"]
    await ctx.client.wait_turn_completed(a, ta, timeout=TURN_TIMEOUT)
    await ctx.client.wait_turn_completed(b, tb, timeout=TURN_TIMEOUT)


async def revert_and_fork(ctx: Ctx) -> None:
    ctx.model.script(Text("R1."), Text("R2."), Text("R3."))
    thread = await new_thread(ctx)
    await turn(ctx, thread, "keep this")
    second = await turn(ctx, thread, "drop this")
    await call(ctx.client, "thread/revert", {"threadId": thread, "beforeTurnId": second})
    await turn(ctx, thread, "after the revert")
    await call(ctx.client, "thread/read", {"threadId": thread, "includeTurns": True})
    fork = await call(ctx.client, "thread/fork", {"threadId": thread})
    await call(ctx.client, "thread/read", {"threadId": fork["result"]["thread"]["id"], "includeTurns": True})


async def inject_items(ctx: Ctx) -> None:
    ctx.model.script(Text("Policy noted."))
    thread = await new_thread(ctx)
    item = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Always answer briefly."}]}
    await call(ctx.client, "thread/inject_items", {"threadId": thread, "items": [item]})
    await turn(ctx, thread, "hello")
    await call(ctx.client, "thread/read", {"threadId": thread, "includeTurns": True})


async def compact(ctx: Ctx) -> None:
    ctx.model.script(Text("C1."), Text("C2."), Text("SUMMARY: two turns."), Text("C3."))
    thread = await new_thread(ctx)
    await turn(ctx, thread, "one")
    await turn(ctx, thread, "two")
    mark = ctx.client.mark()
    await call(ctx.client, "thread/compact/start", {"threadId": thread})
    await ctx.client.wait_notification("turn/completed", lambda p: p.get("threadId") == thread, timeout=TURN_TIMEOUT, since=mark)
    await turn(ctx, thread, "three")


async def thread_admin(ctx: Ctx) -> None:
    ctx.model.script(Text("Admin."))
    thread = await new_thread(ctx)
    await turn(ctx, thread, "name me")
    await call(ctx.client, "thread/name/set", {"threadId": thread, "name": "conformance thread"})
    await call(ctx.client, "thread/metadata/update", {"threadId": thread, "gitInfo": None})
    await call(ctx.client, "thread/archive", {"threadId": thread})
    await call(ctx.client, "thread/list", {"archived": True})
    await call(ctx.client, "thread/unarchive", {"threadId": thread})
    # Only this scenario's thread: threads of earlier scenarios can tie on recency.
    await call(ctx.client, "thread/list", {"searchTerm": "name me"})
    await call(ctx.client, "thread/goal/set", {"threadId": thread, "objective": "finish the conformance run"})
    await call(ctx.client, "thread/goal/get", {"threadId": thread})
    await call(ctx.client, "thread/goal/clear", {"threadId": thread})
    await call(ctx.client, "thread/attachment/list", {"threadId": thread})
    await call(ctx.client, "thread/delete", {"threadId": thread})


async def experimental_members(ctx: Ctx) -> None:
    """Members of stable methods that only the experimental API may use: a
    stable client gets codex's refusal (whatever the sidecar declared for its
    engine), an experimental one their answers."""
    await call(ctx.client, "thread/start", {"dynamicTools": []})
    # (members experimental in every codex of the matrix: 0.151.0 has no includeAttachedThreads)
    await call(ctx.client, "thread/list", {"parentThreadId": "01a20000-0000-7000-8000-000000000000", "searchTerm": "no thread is called this"})
    await call(ctx.client, "thread/list", {"parentThreadId": None, "searchTerm": "no thread is called this"})


async def catalog_reads(ctx: Ctx) -> None:
    """Requests about the installation rather than a thread."""
    for method, params in (
        ("model/list", {}),
        ("config/read", {"includeLayers": False}),
        ("account/read", {}),
        ("skills/list", {"cwds": [str(ctx.work)]}),
        ("hooks/list", {"cwds": [str(ctx.work)]}),
        ("experimentalFeature/list", {}),
        ("permissionProfile/list", {}),
        ("modelProvider/list", {}),
        ("mcpServerStatus/list", {}),
        ("configRequirements/read", {}),
        ("account/rateLimits/read", {}),
        ("modelProvider/capabilities/read", {}),
        ("externalAgentConfig/detect", {"cwds": [str(ctx.work)], "includeHome": True}),
        ("externalAgentConfig/import/readHistories", {}),
        ("threadSection/list", {}),
        ("no/such/method", {}),
    ):
        await call(ctx.client, method, params)


async def files_and_commands(ctx: Ctx) -> None:
    base = ctx.work / "fs"
    data = base64.b64encode(b"conformance\n").decode()
    for method, params in (
        ("fs/createDirectory", {"path": str(base), "recursive": True}),
        ("fs/watch", {"path": str(base), "watchId": "conformance"}),
        ("fs/unwatch", {"watchId": "conformance"}),  # before any change: no notification to time
        ("fs/writeFile", {"path": str(base / "a.txt"), "dataBase64": data}),
        ("fs/readFile", {"path": str(base / "a.txt")}),
        ("fs/copy", {"sourcePath": str(base / "a.txt"), "destinationPath": str(base / "b.txt"), "recursive": False}),
        ("fs/readDirectory", {"path": str(base)}),
        ("fs/getMetadata", {"path": str(base / "b.txt")}),
        ("fs/remove", {"path": str(base), "recursive": True, "force": True}),
        ("command/exec", {"command": ["echo", "exec"], "cwd": str(ctx.work)}),
        ("fuzzyFileSearch", {"query": "nothing-matches-this", "roots": [str(ctx.work)]}),
    ):
        await call(ctx.client, method, params)


REVIEW = '{"findings": [], "overall_correctness": "patch is correct", "overall_explanation": "Nothing to change.", "overall_confidence_score": 0.9}'


async def review_then_unsubscribe(ctx: Ctx) -> None:
    """A review turn (Codex's own prompt; the fake model answers the review
    JSON), then the client unsubscribes. Last: Codex unloads the thread
    (``thread/closed``) only after a delay longer than the suite waits."""
    ctx.model.script(Text("Ready."), Text(REVIEW))
    thread = await new_thread(ctx)
    await turn(ctx, thread, "hello")
    reply = await call(ctx.client, "review/start", {"threadId": thread, "target": {"type": "uncommittedChanges"}})
    await ctx.client.wait_turn_completed(thread, reply["result"]["turn"]["id"], timeout=TURN_TIMEOUT)
    await call(ctx.client, "thread/unsubscribe", {"threadId": thread})


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("plain_turns", plain_turns, ("thread/start", "thread/loaded/list", "turn/start")),
    Scenario("reads", reads, ("thread/start", "turn/start", "thread/read", "thread/turns/list", "thread/items/list", "thread/resume")),
    # Codex 0.151.0 alone reported the model command's aggregatedOutput null in
    # 1 run of 3 (its output was read after the process ended); 0.169.0 and
    # 0.171.0 never did (the releases between were not measured).
    Scenario(
        "shell_tool",
        shell_tool,
        ("thread/start", "turn/start", "thread/shellCommand"),
        unstable_before=((0, 169, 0), frozenset({"aggregatedOutput"})),
    ),
    Scenario("join_running_turn", join_running_turn, ("thread/start", "turn/start")),
    Scenario("back_to_back_turn_starts", back_to_back_turn_starts, ("thread/start", "turn/start")),
    Scenario("steer", steer, ("thread/start", "turn/start", "turn/steer")),
    # An interrupted turn's thread/tokenUsage/updated comes or not, with codex alone, from one run to the next.
    Scenario("interrupt", interrupt, ("thread/start", "turn/start", "turn/interrupt"), drop=frozenset({"thread/tokenUsage/updated"})),
    Scenario("interrupt_during_held_turn", interrupt_during_held_turn, ("thread/start", "turn/start", "turn/interrupt"), drop=frozenset({"thread/tokenUsage/updated"})),
    Scenario("two_threads", two_threads, ("thread/start", "turn/start"), per_thread=True),
    Scenario("revert_and_fork", revert_and_fork, ("thread/start", "turn/start", "thread/revert", "thread/read", "thread/fork")),
    Scenario("inject_items", inject_items, ("thread/start", "thread/inject_items", "turn/start", "thread/read")),
    # After Codex's own compaction the next turn rebuilds from the engine's
    # assembly with any engine (identity too): onto a fresh backing thread,
    # whose token totals and first unread turn are its own.
    Scenario("compact", compact, ("thread/start", "turn/start", "thread/compact/start"), masked_modes=("identity", "rebuild")),
    Scenario(
        "thread_admin",
        thread_admin,
        (
            "thread/start",
            "turn/start",
            "thread/name/set",
            "thread/metadata/update",
            "thread/archive",
            "thread/list",
            "thread/unarchive",
            "thread/goal/set",
            "thread/goal/get",
            "thread/goal/clear",
            "thread/attachment/list",
            "thread/delete",
        ),
        # Whether codex's unloader reports the archived thread notLoaded
        # before or after thread/archived is its own timing (seen both ways).
        drop=frozenset({"thread/status/changed"}),
    ),
    Scenario("experimental_members", experimental_members, ("thread/start", "thread/list")),
    Scenario(
        "catalog_reads",
        catalog_reads,
        (
            "model/list",
            "config/read",
            "account/read",
            "skills/list",
            "hooks/list",
            "experimentalFeature/list",
            "permissionProfile/list",
            "modelProvider/list",
            "mcpServerStatus/list",
            "configRequirements/read",
            "account/rateLimits/read",
            "modelProvider/capabilities/read",
            "externalAgentConfig/detect",
            "externalAgentConfig/import/readHistories",
            "threadSection/list",
        ),
    ),
    Scenario(
        "files_and_commands",
        files_and_commands,
        ("fs/createDirectory", "fs/watch", "fs/unwatch", "fs/writeFile", "fs/readFile", "fs/copy", "fs/readDirectory", "fs/getMetadata", "fs/remove", "command/exec", "fuzzyFileSearch"),
    ),
    Scenario("review_then_unsubscribe", review_then_unsubscribe, ("thread/start", "turn/start", "review/start", "thread/unsubscribe")),
)
BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------
# One mode's run


def argv_env(mode: str, root: Path, home: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a mode. ``HOME`` is a private folder:
    Codex's login shells (``thread/shellCommand``, its shell snapshot) then
    read no profile of the machine's user (pyenv's rehash lock, issue 25)."""
    assert CODEX_BIN is not None
    user_home = root / "home"
    user_home.mkdir(exist_ok=True)
    if base(mode) == "direct":
        argv, env = [CODEX_BIN, "app-server", "--listen", "stdio://"], codex_env(home)
    else:
        site = install_engines(root / "site")
        env = sidecar_env(home, site, root / "state", root / "sidecar.toml", ENGINES[mode])
        if not ENGINES[mode]:
            env.pop("CODEX_SIDECAR_ENGINE", None)
        argv = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
    env["HOME"] = str(user_home)
    return argv, env


async def _quiet(client: AppServerClient) -> None:
    """Until no frame came for QUIET seconds."""
    while True:
        seen = len(client.received)
        await trio.sleep(QUIET)
        if len(client.received) == seen:
            return


async def run_mode(mode: str, root: Path, scenarios: tuple[Scenario, ...] = SCENARIOS) -> ModeRun:
    """Every scenario that applies to ``mode``, in order, on one process."""
    root.mkdir(parents=True, exist_ok=True)
    work = root / "work"
    work.mkdir(exist_ok=True)
    records: dict[str, Record] = {}
    with FakeModel() as model:
        home = make_codex_home(root / "codex-home", model.base_url)
        argv, env = argv_env(mode, root, home)
        async with AppServerClient.spawn(argv, env=env, cwd=str(work), request_timeout=TURN_TIMEOUT) as client:
            mark = len(client.received)
            await client.initialize(experimental=mode not in STABLE_MODES)
            await _quiet(client)
            records["initialize"] = Record([json.loads(x) for x in client.received[mark:]], ["initialize"])
            ctx = Ctx(client, model, root, work)
            for scenario in scenarios:
                if base(mode) not in scenario.modes:
                    continue
                model.clear_script()
                mark, sent_mark, requests = len(client.received), len(client.sent), len(model.requests)
                record = Record()
                try:
                    with trio.fail_after(TURN_TIMEOUT * 2):
                        await scenario.play(ctx)
                        await _quiet(client)
                except Exception as exc:  # kept in the record: the comparison shows it
                    record.error = f"{type(exc).__name__}: {exc}"
                record.frames = [json.loads(x) for x in client.received[mark:]]
                record.sent = [m for m in (json.loads(x).get("method") for x in client.sent[sent_mark:]) if isinstance(m, str)]
                record.model_requests = len(model.requests) - requests
                record.summarised = any(SUMMARY_MARK in json.dumps(r) for r in model.requests[requests:])
                records[scenario.name] = record
            stderr = client.stderr_text
    return ModeRun(mode, str(root), records, stderr[-4000:])


def run_modes(modes: tuple[str, ...], base: Path) -> dict[str, ModeRun]:
    """Each mode in turn, each under a root of the same length (the fake
    model's token estimates count the paths Codex puts in its prompts)."""
    out: dict[str, ModeRun] = {}
    for n, mode in enumerate(modes):
        out[mode] = trio.run(run_mode, mode, base / f"m{n}")
    return out


def environ_ok() -> bool:
    return CODEX_BIN is not None and os.access(CODEX_BIN, os.X_OK)


def view(scenario: Scenario | None, mode: str, record: Record, root: str, codex: tuple[int, int, int]) -> list[Any]:
    """What the comparison looks at: the record's frames, canonical and
    normalised (per thread for scenarios whose threads run at once), for
    the ``codex`` version under test."""
    mask = scenario.mask if scenario is not None and base(mode) in scenario.masked_modes else frozenset()
    if scenario is not None and codex < scenario.unstable_before[0]:
        mask = mask | scenario.unstable_before[1]
    frames = [f for f in record.frames if scenario is None or f.get("method") not in scenario.drop]
    if scenario is not None and scenario.per_thread:
        return per_thread(frames, [root], mask=mask)
    return normalise(canonical(frames), [root], mask=mask)
