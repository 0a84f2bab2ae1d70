"""``make bench-context`` at a tiny size: correctness, not speed.

The live test runs the benchmark's own building blocks for 3 turns (native,
then the identity engine in ``per_turn`` mode through the sidecar) and checks
that every figure is computed from the real request bodies the fake model
recorded. The other tests check the pieces that need no codex: the script,
the measurements on hand-made bodies, the mode detection and the engines.
No timing is asserted anywhere.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time

import pytest

from engines import AssistantMessage, TextBlock, UserMessage, load_engine
from engines.api import AssembleParams, CompactionSummaryMessage, ToolCallBlock, ToolResultMessage, Usage
from engines.tokens import count_tokens, estimate_message_tokens, estimate_messages_tokens
from sidecar.projection import CONTEXT_HEADER
from tools import bench_context as bc
from tools.context_engines import (
    BUDGET_ID,
    DIST_NAME,
    IDENTITY_ID,
    RECALL_ID,
    STORE_ID,
    BudgetEngine,
    IdentityEngine,
    RecallEngine,
    StoreEngine,
    budget_boundary,
    retrieve,
    snippet_text,
    write_dist_info,
)

# ---------------------------------------------------------------- the script


def test_the_script_is_deterministic_and_long_enough():
    script = bc.build_script()
    assert script == bc.build_script()
    assert script != bc.build_script(seed=bc.DEFAULT_SEED + 1)
    assert len(script) == bc.DEFAULT_TURNS
    assert sum(1 for t in script if t.command) >= 3
    sizes = [len(t.reply) for t in script]
    assert min(sizes) < 500 and max(sizes) > 2500, "replies of varied length, some long"
    tokens = sum(count_tokens(t.prompt) + count_tokens(t.reply) for t in script)
    assert tokens > 1.5 * bc.BUDGET_TOKENS, "40 turns must exceed the budget by a wide margin"
    assert bc.build_script(3) == script[:3]


def test_the_router_answers_by_what_the_request_is():
    script = [bc.Turn("hi", "hello"), bc.Turn("run it", "it ran", command="ls")]
    router = bc.Router(script)
    router.begin(0)
    assert router({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}).text == "hello"
    router.begin(1)
    call = router({"input": [{"type": "message", "role": "user", "content": "run it"}]})
    assert call.name == "exec_command" and call.call_id == router.call_id(1)
    done = router({"input": [{"type": "function_call_output", "call_id": router.call_id(1), "output": "x"}]})
    assert done.text == "it ran"
    compact = router({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "You are performing a CONTEXT CHECKPOINT COMPACTION."}]}]})
    assert compact.text.startswith("Checkpoint")
    assert router.request_turns == [0, 1, 1, -1]
    assert router.kinds == ["reply", "tool-call", "tool-followup", "compaction"]


# -------------------------------------------------------------- measurements


def _msg(role: str, text: str, item_id: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "id": item_id, "role": role, "content": [{"type": kind, "text": text}]}


def test_measurements_on_hand_made_bodies():
    frame = [_msg("developer", "You are a coding agent.", "a"), _msg("user", "<environment_context/>", "b")]
    r1 = {"input": [*frame, _msg("user", "first question", "c")]}
    # Same items, different ids: still an unchanged prefix.
    r2 = {"input": [_msg("developer", "You are a coding agent.", "x"), _msg("user", "<environment_context/>", "y"),
                    _msg("user", "first question", "z"), _msg("assistant", "an answer", "m"), _msg("user", "second", "n")]}
    r3 = {"input": [*frame, _msg("user", "rewritten history", "q")]}  # not an extension
    router = bc.Router([bc.Turn("first question", "an answer"), bc.Turn("second", "x")])
    router.request_turns, router.kinds = [0, 1, 1], ["reply", "reply", "reply"]
    stats = bc.measure_requests([r1, r2, r3], router)
    assert [s.extends_previous for s in stats] == [None, True, False]
    assert all(s.tokens > 0 for s in stats)
    assert stats[1].tokens == stats[0].tokens + count_tokens("an answer") + count_tokens("second")
    framing = bc.framing_tokens(r1, "first question")
    assert framing == count_tokens("You are a coding agent.") + count_tokens("<environment_context/>")
    with pytest.raises(RuntimeError):
        bc.framing_tokens(r1, "another prompt")
    call = {"type": "function_call", "id": "fc", "name": "exec_command", "arguments": '{"cmd":"ls"}', "call_id": "c1"}
    assert bc.item_tokens(call) == count_tokens("exec_command") + count_tokens('{"cmd":"ls"}')
    run = bc.RunResult("x", "identity", "per_turn", requests=stats, turn_walls=[0.1, 0.3])
    assert run.total == sum(s.tokens for s in stats) and run.largest == max(s.tokens for s in stats)
    assert run.reuse == 0.5 and run.wall_per_turn == pytest.approx(0.2)


def test_mode_and_rebuild_detection_from_status():
    assert bc.reported_mode({}) is None
    assert bc.reported_mode({"projectionMode": "delta"}) == "delta"
    assert bc.reported_mode({"threads": {"t": {"projectionMode": "epoch"}}}, "t") == "epoch"
    assert bc.reported_rebuilds({}) is None
    assert bc.reported_rebuilds({"rebuilds": 3}) == 3
    assert bc.reported_rebuilds({"threads": {"t": {"rebuilds": 2}, "u": {"rebuilds": 1}}}) == 3
    bc._check_mode({"projectionMode": "delta"}, None, "delta", final=True)
    bc._check_mode({}, None, "per_turn", final=True)  # a pre-mode sidecar projects every turn
    bc._check_mode({}, None, "delta", final=False)  # may appear with the first turn
    with pytest.raises(bc.ModeNotAvailable):
        bc._check_mode({}, None, "delta", final=True)  # the variable was ignored
    with pytest.raises(bc.ModeNotAvailable):
        bc._check_mode({"projectionMode": "per_turn"}, None, "epoch", final=False)


def test_the_table_judges_the_targets_and_footnotes_unavailable_modes():
    def run(engine, mode, sizes, reuse=True, wall=0.1):
        reqs = [bc.RequestStats(n, 1, None if i == 0 else reuse, i, "reply") for i, n in enumerate(sizes)]
        return bc.RunResult(f"{engine}+{mode}", engine, mode, requests=reqs, turn_walls=[wall])

    native = bc.RunResult("native", None, None, requests=[bc.RequestStats(n, 1, None, i, "reply") for i, n in enumerate([5000, 15000])], turn_walls=[0.1])
    good = run("identity", "delta", [5000, 15500], wall=0.105)
    bad = run("identity", "delta", [5000, 60000], reuse=False, wall=0.2)
    budget = run("budget", "epoch", [5000, 12000])
    gone = bc.RunResult("recall+delta", "recall", "delta", available=False, note="mode not available: sidecar exited: Error: nope")
    rows, notes = bc.table_rows([native, good, bad, budget, gone], native, framing=4000)
    assert len(rows) == 5 and all(len(r) == len(bc.HEADER) for r in rows)
    assert rows[1][-1].count("PASS") == 3
    assert "total FAIL" in rows[2][-1] and "reuse FAIL" in rows[2][-1] and "wall FAIL" in rows[2][-1]
    assert "max PASS" in rows[3][-1]  # 12,000 <= (8,000 + 4,000) x 1.05 while native reached 15,000
    assert rows[4][-1] == "mode not available [1]" and notes == ["[1] recall+delta: sidecar exited: Error: nope"]
    assert bc.format_table(rows, notes).splitlines()[0].startswith("engine")


# ------------------------------------------------------------------ engines


def _conversation(turns: int) -> list:
    messages, t = [], 0
    for i, turn in enumerate(bc.build_script(turns)):
        t += 1000
        messages.append(UserMessage(content=[TextBlock(text=turn.prompt)], timestamp=t))
        if turn.command:
            call = ToolCallBlock(id=f"call_{i}", name="exec_command", arguments={"cmd": turn.command})
            messages.append(AssistantMessage(content=[call], timestamp=t + 1))
            messages.append(ToolResultMessage(tool_call_id=f"call_{i}", tool_name="exec_command", content=[TextBlock(text="output " * 40)], is_error=False, timestamp=t + 2))
        messages.append(AssistantMessage(content=[TextBlock(text=turn.reply)], timestamp=t + 3))
    return messages


def _params(messages, prompt="next question"):
    return AssembleParams(session_id="s", session_key="s", messages=messages, prompt=prompt)


async def test_identity_engine_returns_the_history_unchanged():
    messages = _conversation(5)
    result = await IdentityEngine().assemble(_params(messages))
    assert result.messages == messages


async def test_budget_engine_stays_within_budget_and_moves_its_boundary_in_steps():
    engine = BudgetEngine({"token_budget": 8000})
    messages = _conversation(bc.DEFAULT_TURNS)
    assert estimate_messages_tokens(messages) > 2 * 8000
    epochs = []
    # Assemble at every turn start (after each assistant reply), as the sidecar would.
    for end in range(1, len(messages) + 1):
        if not isinstance(messages[end - 1], AssistantMessage) or isinstance(messages[end - 1].content[0], ToolCallBlock):
            continue
        result = await engine.assemble(_params(messages[:end]))
        assert result.estimated_tokens <= 8000 - engine.turn_reserve
        projection = result.context_projection
        assert projection is not None and projection.mode == "thread_bootstrap"
        boundary = int(projection.epoch)
        assert boundary == budget_boundary(messages[:end], engine.tail_budget)
        if boundary:
            summary = result.messages[0]
            assert isinstance(summary, CompactionSummaryMessage) and summary.summary.startswith("Summary of the")
            assert result.messages[1:] == messages[boundary:end]
        else:
            assert result.messages == messages[:end]
        epochs.append(boundary)
    assert epochs == sorted(epochs), "the boundary only moves forward"
    changes = sum(1 for a, b in zip(epochs, epochs[1:]) if a != b)
    assert 2 <= changes <= len(epochs) // 4, "the boundary moves in a few steps, not every turn"
    again = await engine.assemble(_params(messages))
    assert again == await engine.assemble(_params(messages)), "deterministic"


async def test_recall_engine_appends_one_deterministic_snippet(tmp_path):
    log = tmp_path / "snippets.jsonl"
    engine = RecallEngine({"snippet_log": str(log)})
    messages = _conversation(3)
    prompt = "How does the retry backoff work?"
    result = await engine.assemble(_params(messages, prompt))
    assert result.messages[:-1] == messages and len(result.messages) == len(messages) + 1
    assert result.messages[-1].content[0].text == snippet_text(prompt)
    assert retrieve(prompt)[0] == "retry-01"
    assert retrieve(prompt) == retrieve(prompt)
    assert len({retrieve(f"thanks {i}")[0] for i in range(20)}) > 3, "unmatched prompts spread over the corpus"
    assert json.loads(log.read_text()) == {"sessionId": "s", "snippetId": "retry-01", "chars": len(snippet_text(prompt))}
    # Its estimate counts the snippet as a message, cached by id or not.
    fresh = estimate_message_tokens(result.messages[-1])
    assert result.estimated_tokens == sum(estimate_message_tokens(m) for m in messages) + fresh
    assert (await engine.assemble(_params(messages, prompt))).estimated_tokens == result.estimated_tokens


async def test_store_engine_gives_new_objects_with_the_same_content_and_its_own_clock():
    from sidecar.thread.planner import fingerprint

    usage = Usage(input=5, output=1, cache_read=0, cache_write=0, total_tokens=6)
    messages = [
        UserMessage(content="hello", timestamp=1),
        AssistantMessage(content=[TextBlock(text="hi", text_signature="s"), ToolCallBlock(id="c", name="t", arguments={"a": 1})], timestamp=2, usage=usage, model="m"),
        ToolResultMessage(tool_call_id="c", tool_name="t", content=[TextBlock(text="ok")], is_error=False, timestamp=3),
    ]
    result = await StoreEngine().assemble(_params(messages))
    assert all(a is not b for a, b in zip(result.messages, messages))
    assert {m.timestamp for m in result.messages} != {1, 2, 3}
    assert result.messages[1].usage is None and result.messages[1].model is None
    assert result.messages != messages
    assert [fingerprint(m) for m in result.messages] == [fingerprint(m) for m in messages]


def test_the_dist_info_registers_the_engines_for_the_loader(tmp_path, monkeypatch):
    write_dist_info(tmp_path)
    (dist,) = importlib.metadata.distributions(path=[str(tmp_path)])
    assert dist.metadata["Name"] == DIST_NAME
    assert {ep.name for ep in dist.entry_points} == {IDENTITY_ID, BUDGET_ID, RECALL_ID, STORE_ID}
    monkeypatch.syspath_prepend(str(tmp_path))
    engine = load_engine(BUDGET_ID, {"token_budget": 8000}, allowlist=[DIST_NAME])
    assert isinstance(engine, BudgetEngine) and engine.token_budget == 8000


# --------------------------------------------------------------------- live


@pytest.mark.codex
def test_three_turns_native_and_identity_per_turn_measured_from_real_bodies(tmp_path, codex_bin):
    script = bc.build_script(3)
    paths = bc.prepare(tmp_path)
    native = bc.run_one("native", None, None, script, paths, 0, codex_bin, keep_bodies=True)
    proxied = bc.run_one("identity+per_turn", "identity", "per_turn", script, paths, 1, codex_bin, keep_bodies=True)
    for run in (native, proxied):
        assert run.ok, run.error or run.note
        assert not run.failed_turns
        assert len(run.requests) == len(run.bodies) == sum(t.requests for t in script)
        # Every figure comes from the bodies the fake model recorded.
        assert [r.tokens for r in run.requests] == [bc.request_tokens(b) for b in run.bodies]
        assert all(r.tokens > 0 for r in run.requests)
        assert 0.0 <= run.reuse <= 1.0
        assert len(run.turn_walls) == 3 and all(w > 0 for w in run.turn_walls)
        assert [r.turn for r in run.requests] == [i for i, t in enumerate(script) for _ in range(t.requests)]
    assert proxied.projection_mode in (None, "per_turn")
    # The sidecar projected context into turns 2 and 3; codex alone did not.
    def projected(run):
        return [any(CONTEXT_HEADER in text for text in _texts(b)) for b in run.bodies]

    assert not any(projected(native))
    assert projected(proxied)[0] is False and all(projected(proxied)[1:])
    assert proxied.total > native.total
    assert proxied.largest > native.largest
    assert native.framing and 0 < native.framing < native.requests[0].tokens
    assert proxied.requests[0].tokens == native.requests[0].tokens, "turn 1 has no history to project"
    # CPU over the turns: codex's tree in both runs, the sidecar's own in the proxied one.
    assert native.codex_cpu_per_turn > 0 and native.sidecar_cpu_per_turn is None
    assert proxied.codex_cpu_per_turn > 0 and proxied.cpu_top is not None
    cpu = bc.cpu_per_turn([native, proxied])
    rows, _ = bc.table_rows([native, proxied], native, native.framing, cpu=cpu)
    assert rows[1][4] == f"{proxied.total / native.total:.2f}x"
    assert rows[0][bc.HEADER.index("codex cpu")] == f"{native.codex_cpu_per_turn * 1000:.1f}"


def _texts(body: dict) -> list[str]:
    out: list[str] = []
    bc._strings(body.get("input"), out)
    return out


def test_wall_ratios_are_bracketed_by_the_native_runs_around_each_sidecar_run():
    def run(label, engine, wall, ok=True):
        reqs = [bc.RequestStats(100, 1, None, 0, "reply")] if ok else []
        return bc.RunResult(label, engine, "delta" if engine else None, requests=reqs, turn_walls=[wall])

    runs = [
        run("native", None, 0.100),
        run("budget+delta", "budget", 0.120),
        run("native again", None, 0.140),  # the machine got slower: judge against both neighbours
        run("budget+delta", "budget", 0.150),
        run("native again", None, 0.160, ok=False),  # a failed native run is skipped...
        run("native again", None, 0.150),  # ...for the next good one
        run("recall+delta", "recall", 0.300, ok=False),
    ]
    walls = bc.bracketed_walls(runs)
    assert walls.keys() == {"budget+delta"}
    assert walls["budget+delta"] == pytest.approx([0.120 / 0.120, 0.150 / 0.145])
    checks = bc.checks_for(runs[1], runs[0], 4000, walls["budget+delta"])
    wall = [c for c in checks if c.name == "wall"][0]
    assert wall.passed and wall.detail.startswith("1.02x, 2 runs 1.00-1.03x")
    # With two runs 0.03 apart, the mean could be anywhere in 0.80-1.24x (t = 12.71).
    assert wall.detail.endswith("mean within 0.80-1.24x"), wall.detail
    # Without bracketing, the same run against the first native alone fails.
    assert not [c for c in bc.checks_for(runs[3], runs[0], 4000) if c.name == "wall"][0].passed


def test_paired_sessions_take_turns_in_blocks_and_alternate_who_goes_first():
    assert bc.turn_schedule(1, 3, 5) == [(0, 0), (0, 1), (0, 2)]
    assert bc.turn_schedule(2, 3, 1) == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    schedule = bc.turn_schedule(2, 12, 5)
    assert [(s, i) for s, i in schedule if s == 0] == [(0, i) for i in range(12)]
    assert [(s, i) for s, i in schedule if s == 1] == [(1, i) for i in range(12)]
    assert [s for s, _ in schedule] == [0] * 5 + [1] * 10 + [0] * 7 + [1] * 2


def test_a_paired_sidecar_run_is_judged_against_its_own_partner_only():
    def run(label, engine, wall, pair, ok=True):
        reqs = [bc.RequestStats(100, 1, None, 0, "reply")] if ok else []
        return bc.RunResult(label, engine, "delta" if engine else None, requests=reqs, turn_walls=[wall], pair=pair)

    runs = [
        run("native", None, 0.100, None),
        run("recall+delta", "recall", 0.110, 1),
        run("native again", None, 0.100, 1),
        run("recall+delta", "recall", 0.180, 2),
        run("native again", None, 0.200, 2),  # the machine was slow for both: 0.90x, not 1.80x
        run("recall+delta", "recall", 0.150, 3),
        run("native again", None, 0.100, 3, ok=False),  # no partner: no ratio, not a neighbour's
        run("native again", None, 0.050, None),
    ]
    assert bc.bracketed_walls(runs) == {"recall+delta": pytest.approx([1.10, 0.90])}


@pytest.mark.codex
def test_a_pair_takes_turns_and_the_table_reads_its_ratio_from_the_pair(tmp_path, monkeypatch, codex_bin):
    order = []
    turn = bc._Session.turn

    async def recording(self, i):
        order.append((i, self.result.label))
        await turn(self, i)

    monkeypatch.setattr(bc._Session, "turn", recording)
    out = tmp_path / "pair.json"
    settled = []
    settle = bc._Session.settle

    async def settling(self):
        settled.append((len(order), self.result.label))
        await settle(self)

    monkeypatch.setattr(bc._Session, "settle", settling)
    argv = ["--turns", "3", "--pair-block", "2", "--engines", "identity", "--modes", "delta", "--json", str(out), "--keep", str(tmp_path / "keep")]
    assert bc.main(argv) == 0
    side, native = "identity+delta", bc.CONTROL_LABEL
    # The first native run alone, then the pair in blocks of 2 turns: sidecar first, then native first.
    assert order == [(0, "native"), (1, "native"), (2, "native"), (0, side), (1, side), (0, native), (1, native), (2, native), (2, side)]
    # Each hand-over lets the session that stops settle first (and the sidecar once more at the end).
    assert settled == [(5, side), (8, native), (9, side)]
    report = json.loads(out.read_text())
    assert report["wall"] == "paired"
    runs = {(r["label"], r["pair"]): r for r in report["runs"]}
    assert set(runs) == {("native", None), (side, 1), (native, 1)}
    assert all(len(r["turnWallSeconds"]) == 3 and not r["error"] for r in runs.values())
    mean = lambda r: sum(r["turnWallSeconds"]) / 3  # noqa: E731
    assert report["wallRatios"][side] == pytest.approx([mean(runs[side, 1]) / mean(runs[native, 1])])


@pytest.mark.codex
def test_when_one_session_of_a_pair_fails_neither_gives_a_wall_figure(tmp_path, codex_bin):
    paths = bc.prepare(tmp_path)
    side, native = bc.run_together([("identity+bogus", "identity", "bogus"), (bc.CONTROL_LABEL, None, None)], bc.build_script(2), paths, 0, codex_bin)
    assert not side.available and "mode not available" in side.note
    assert not native.ok and native.error.startswith("stopped: identity+bogus")
    assert bc.bracketed_walls([side, native]) == {}


def test_the_wall_interval_narrows_with_runs_and_centres_on_the_mean():
    assert bc.mean_interval([1.0, 1.1, 1.2]) == pytest.approx((1.1 - 4.30 * 0.1 / 3**0.5, 1.1 + 4.30 * 0.1 / 3**0.5))
    few, many = bc.mean_interval([1.0, 1.2] * 2), bc.mean_interval([1.0, 1.2] * 20)
    assert few[0] < many[0] < 1.1 < many[1] < few[1]
    assert bc.mean_interval([1.05] * 5) == pytest.approx((1.05, 1.05))


def test_codex_gets_an_empty_home_unless_asked_for_the_user_s(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    hermetic = bc.prepare(tmp_path / "a")
    assert hermetic.home is not None and hermetic.home.is_dir() and not any(hermetic.home.iterdir())
    users = bc.prepare(tmp_path / "b", user_home=True)
    assert users.home is None
    for engine in (None, "identity"):
        run_dir = tmp_path / f"run-{engine}"
        run_dir.mkdir()
        _, env = bc._session_env(tmp_path / "codex-home", run_dir, hermetic, "/bin/codex", engine, "delta")
        assert env["HOME"] == str(hermetic.home)
        _, env = bc._session_env(tmp_path / "codex-home", run_dir, users, "/bin/codex", engine, "delta")
        assert env["HOME"] == "/home/someone"


def test_the_engines_memos_never_serve_a_stale_answer():
    """The bench engines memoise per message object (the sidecar hands them
    the same objects every turn): equal results to a fresh computation, and a
    different object, even with the same id later, is recomputed."""
    from engines import AssistantMessage, TextBlock, UserMessage
    from tools import context_engines as ce

    msgs = [UserMessage(content=[TextBlock(text=f"Question {i}. Why?")], timestamp=i) for i in range(6)]
    msgs += [AssistantMessage(content=[TextBlock(text=f"Answer {i}. Because.")], timestamp=i) for i in range(6)]
    fresh = ce.extractive_summary(msgs, 200)
    assert ce.cached_extractive_summary(msgs, 200) == fresh == ce.cached_extractive_summary(list(msgs), 200)
    assert ce.cached_extractive_summary(msgs[:5], 200) == ce.extractive_summary(msgs[:5], 200) != fresh
    assert ce.cached_extractive_summary(msgs, 20) == ce.extractive_summary(msgs, 20) != fresh
    a = UserMessage(content=[TextBlock(text="short")], timestamp=0)
    n = ce._message_tokens(a)
    b = UserMessage(content=[TextBlock(text="a much longer message " * 20)], timestamp=0)
    assert ce._message_tokens(b) > n == ce._message_tokens(a)
    ce._object_tokens[id(b)] = (a, n)  # an entry left by another object under b's id
    assert ce._message_tokens(b) > n  # is not trusted


def test_model_latency_delays_every_model_response(tmp_path, monkeypatch, codex_bin):
    """--model-latency-ms: each model request waits that long, so a turn of n
    requests takes at least n times it (a lower bound a sleep guarantees)."""
    monkeypatch.setattr(bc, "MODEL_LATENCY", [0.25])
    script = bc.build_script(2)
    run = bc.run_one("native", None, None, script, bc.prepare(tmp_path), 0, codex_bin)
    assert run.ok, run.error or run.note
    assert [round(w, 2) >= 0.25 * t.requests for w, t in zip(run.turn_walls, script)] == [True, True]
    with pytest.raises(SystemExit):
        bc.main(["--model-latency-ms", "-1"])


def test_a_mode_can_name_the_rebuild_strategy(tmp_path):
    paths = bc.prepare(tmp_path / "p")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _, env = bc._session_env(tmp_path / "codex-home", run_dir, paths, "/bin/codex", "budget", "delta+fresh")
    assert env[bc.MODE_ENV] == "delta" and env[bc.REBUILD_ENV] == "fresh"
    _, env = bc._session_env(tmp_path / "codex-home", run_dir, paths, "/bin/codex", "budget", "delta")
    assert env[bc.MODE_ENV] == "delta" and bc.REBUILD_ENV not in env
    # The sidecar must say it runs the strategy, as it must say it runs the mode.
    bc._check_mode({"rebuild": "fresh", "projectionMode": "delta"}, None, "delta+fresh", final=True)
    with pytest.raises(bc.ModeNotAvailable):
        bc._check_mode({"rebuild": "revert", "projectionMode": "delta"}, None, "delta+fresh", final=True)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_process_cpu_counts_the_process_its_live_children_and_what_they_reaped(tmp_path):
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    script = tmp_path / "burn.py"
    script.write_text(burn)
    # A shell that runs one burner to the end (and reaps it), then waits
    # beside a second one that keeps running.
    done = tmp_path / "done"
    shell = subprocess.Popen(
        ["sh", "-c", f'{sys.executable} {script}; touch {done}; {sys.executable} -c "import time; time.sleep(30)"']
    )
    try:
        deadline = time.monotonic() + 20
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done.exists()
        own, below = bc.process_cpu(shell.pid)
        assert own < 0.1  # the shell itself only waits
        assert below >= 0.25  # the reaped burner's CPU counts below the shell
        mine = bc.process_cpu(os.getpid())
        assert mine is not None and mine[1] >= 0.25  # and below this process, through the live shell
    finally:
        shell.kill()
        shell.wait()
    assert bc.process_cpu(shell.pid) is None  # gone
