"""``make bench-scale`` at a tiny size: the report's shape, read from real runs.

The live test runs the benchmark itself for 6 turns a configuration (native
codex, the sidecar with the identity engine, the sidecar with the sliding
window) and checks that every figure it prints is derived from what the run
measured: the turn times it recorded, the files in the kept state dirs, the
processes' /proc readings, the fake model's requests. The other tests check
the pure pieces (the window engine, the schedule, the state-dir arithmetic,
the profile summary) without processes. No timing is asserted anywhere.
"""

from __future__ import annotations

import json
import statistics
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines import AssistantMessage, TextBlock, UserMessage, load_engine
from engines.api import AssembleParams, ToolCallBlock, ToolResultMessage
from engines.lossless.summarize import Source, batch_prompt, parse_batch, summary_prompt
from tools import bench_scale as bs
from tools.codex_home import find_codex_bin
from tools.context_engines import DIST_NAME, WINDOW_ID, WindowEngine, window_start, write_dist_info
from tools.fake_model import Text
from tools.lossless_table import SUMMARY_MODEL

CODEX_BIN = find_codex_bin()


# ------------------------------------------------------------ the window engine


def _exchange(kind: str, n: int) -> list:
    """One step of a conversation: a user message, an assistant reply, or an
    assistant tool call followed by its result."""
    if kind == "user":
        return [UserMessage(content=[TextBlock(text=f"q{n}")], timestamp=n)]
    if kind == "reply":
        return [AssistantMessage(content=[TextBlock(text=f"a{n}")], timestamp=n)]
    call = AssistantMessage(content=[ToolCallBlock(id=f"c{n}", name="exec_command", arguments={"cmd": "ls"})], timestamp=n)
    return [call, ToolResultMessage(tool_call_id=f"c{n}", tool_name="exec_command", content=[TextBlock(text="ok")], is_error=False, timestamp=n)]


conversations = st.lists(st.sampled_from(["user", "reply", "tool"]), max_size=60).map(lambda kinds: [m for n, kind in enumerate(kinds) for m in _exchange(kind, n)])


@settings(max_examples=200, deadline=None)
@given(conversations, st.integers(min_value=2, max_value=12))
def test_the_window_keeps_a_suffix_of_at_most_n_messages_without_splitting_a_tool_exchange(messages, window):
    start = window_start(messages, window)
    kept = messages[start:]
    assert len(kept) <= window or len(messages) <= window
    assert len(kept) >= min(len(messages), window) - 1, "a cut moves at most past one call"
    calls = {b.id for m in kept if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolCallBlock)}
    results = {m.tool_call_id for m in kept if isinstance(m, ToolResultMessage)}
    assert results <= calls, "no result without its call"
    all_results = {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}
    assert calls & all_results <= results, "no call without its result"
    assert window_start(list(messages), window) == start


async def test_the_window_engine_drops_old_messages_every_turn_and_loads_by_entry_point(tmp_path, monkeypatch):
    chat = [m for n in range(30) for m in _exchange(["user", "reply"][n % 2], n)]
    engine = WindowEngine({"window": 10})
    first = await engine.assemble(AssembleParams(session_id="s", session_key="s", messages=chat))
    assert first.messages == chat[-10:]
    later = await engine.assemble(AssembleParams(session_id="s", session_key="s", messages=chat + _exchange("user", 99)))
    assert later.messages == chat[-9:] + later.messages[-1:] and later.messages[-1].content[0].text == "q99"
    # The window's edge falls on a tool result: the call and its result go together.
    tooled = chat[:20] + _exchange("tool", 50) + chat[20:29]
    kept = (await engine.assemble(AssembleParams(session_id="s", session_key="s", messages=tooled))).messages
    assert kept == chat[20:29]
    write_dist_info(tmp_path, window=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_engine(WINDOW_ID, {"window": 7}, allowlist=[DIST_NAME])
    assert isinstance(loaded, WindowEngine) and loaded.window == 7
    with pytest.raises(ValueError):
        WindowEngine({"window": 1})


# ---------------------------------------------------------- the pure pieces


def test_the_script_is_short_deterministic_and_runs_a_command_every_tenth_turn():
    script = bs.build_script(40)
    assert script == bs.build_script(40) and script != bs.build_script(40, seed=1)
    assert all(len(t.prompt) < 200 and len(t.reply) < 200 for t in script)
    assert [i for i, t in enumerate(script) if t.command] == [5, 15, 25, 35]
    assert not any(t.command for t in bs.build_script(40, tool_every=0))


def test_the_schedule_runs_every_turn_once_and_rotates_who_goes_first():
    schedule = bs.block_schedule(3, 25, 10)
    for config in range(3):
        turns = [i for c, first, n in schedule if c == config for i in range(first, first + n)]
        assert turns == list(range(25))
    assert [c for c, _, _ in schedule[:9]] == [0, 1, 2, 1, 2, 0, 2, 0, 1]


def _sample(turn, files, hwm=None):
    return bs.Sample(turn=turn, files=files, sidecar_rss_kb=hwm, sidecar_hwm_kb=hwm, codex_rss_kb=None)


def test_state_dir_bytes_per_turn_by_window_and_folder():
    samples = [
        _sample(0, {}),
        _sample(10, {"sessions/t.jsonl": 1000, "inspect/t.jsonl": 500}),
        _sample(20, {"sessions/t.jsonl": 2000, "inspect/t.jsonl": 1500}),
        _sample(30, {"sessions/t.jsonl": 3000, "inspect/t.jsonl": 3500, "backing/t.json": 10}),
    ]
    windows = bs.bytes_per_turn(samples)
    assert [(a, b, v) for a, b, v, _ in windows] == [(0, 10, 150.0), (10, 20, 200.0), (20, 30, 301.0)]
    assert windows[2][3] == {"backing": 1.0, "inspect": 200.0, "sessions": 100.0}
    assert bs.constancy(windows) == pytest.approx(301 / 200)
    (top, *_) = bs.growing_files(samples)
    assert top == ("inspect/t.jsonl", 500, 3500, 150.0)


def test_checks_read_the_late_ratio_the_peak_rss_and_the_state_growth():
    native = bs.ConfigResult("native", None, walls=[0.1] * 10)
    flat = [_sample(0, {}, 50_000), _sample(5, {"s": 500}, 60_000), _sample(10, {"s": 1000}, 61_000)]
    ok = bs.ConfigResult("identity", "bench-identity", walls=[0.1] * 5 + [0.105] * 5, samples=flat)
    checks = {c.name: c for c in bs.checks_for(ok, native, 5)}
    assert checks["late"].passed and checks["late"].detail == "1.05x"
    assert checks["rss"].passed and checks["rss"].detail == "60 MB"
    assert checks["state"].passed
    grows = [_sample(0, {}), _sample(5, {"s": 500}), _sample(10, {"s": 2000}, 200_000)]
    slow = bs.ConfigResult("window", "bench-window", walls=[0.1] * 5 + [0.3] * 5, samples=grows)
    checks = {c.name: c for c in bs.checks_for(slow, native, 5)}
    assert not checks["late"].passed and not checks["rss"].passed and not checks["state"].passed
    budget = bs.ConfigResult("budget", "transcript-budget", walls=[0.1] * 5 + [0.125] * 5, samples=flat)
    (late, *_) = bs.checks_for(budget, native, 5)
    assert late.passed and late.target == "late <= 1.3x native"
    over = bs.ConfigResult("budget", "transcript-budget", walls=[0.1] * 5 + [0.135] * 5, samples=flat)
    assert not bs.checks_for(over, native, 5)[0].passed


def test_the_lossless_configuration_is_held_to_1_5x_native_and_runs_only_when_named():
    native = bs.ConfigResult("native", None, walls=[0.1] * 10)
    flat = [_sample(0, {}, 50_000), _sample(5, {"s": 500}, 60_000), _sample(10, {"s": 1000}, 61_000)]
    (late, *_) = bs.checks_for(bs.ConfigResult("lossless", "lossless", walls=[0.1] * 5 + [0.145] * 5, samples=flat), native, 5)
    assert late.passed and late.target == "late <= 1.5x native"
    assert not bs.checks_for(bs.ConfigResult("lossless", "lossless", walls=[0.1] * 5 + [0.155] * 5, samples=flat), native, 5)[0].passed
    assert bs.CONFIGS["lossless"] == "lossless" and "lossless" not in bs.DEFAULT_CONFIGS
    table = tomllib.loads(bs.lossless_table())["engines"]["lossless"]
    assert table == {"summary_model": SUMMARY_MODEL, "summary_max_calls_per_hour": 0}, "bench-lossless's table, the engine's defaults otherwise"


def _user(text: str) -> dict:
    return {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}


def test_the_router_answers_the_engines_summary_calls_as_no_turns_request():
    router = bs.ScaleRouter(bs.build_script(10))
    router.begin(5)  # a turn with a shell call: a summary call arriving now must not get it
    sources = [Source("msg_1", "user · turn 1", "Remember that the pool size is 12."), Source("msg_2", "assistant · turn 1", "Noted.")]
    single = router(_user(summary_prompt(0, (1, 1), (0, 0), sources, 200)))
    assert isinstance(single, Text) and "pool size is 12" in single.text
    batch = router(_user(batch_prompt([(0, (1, 1), (0, 0), sources[:1], 100), (0, (2, 2), (0, 0), sources[1:], 100)])))
    assert isinstance(batch, Text) and set(parse_batch(batch.text, 2)) == {1, 2}
    assert router.kinds == ["summary", "summary"] and router.request_turns == [-1, -1]
    turn = router(_user(bs.build_script(10)[5].prompt))
    assert not isinstance(turn, Text) and router.kinds[-1] == "tool-call" and router.request_turns[-1] == 5


def test_py_spy_raw_stacks_are_summed_by_own_and_inclusive_samples():
    raw = "main (a.py:1);run (a.py:5);work (b.py:9) 30\nmain (a.py:1);run (a.py:5) 10\nmain (a.py:1);idle (c.py:2) 60\n"
    total, own, incl = bs.summarize_raw(raw)
    assert total == 100
    assert own[0] == ("idle (c.py:2)", 60)
    assert dict(incl)["run (a.py:5)"] == 40 and dict(incl)["main (a.py:1)"] == 100


# --------------------------------------------------------------------- live


@pytest.mark.codex
@pytest.mark.skipif(CODEX_BIN is None, reason="real codex not installed: run `make setup`")
def test_six_turns_of_each_configuration_give_a_report_read_from_the_run(tmp_path, capsys):
    out, keep = tmp_path / "report.json", tmp_path / "run"
    code = bs.main(["--turns", "6", "--block", "2", "--sample-every", "2", "--session-starts", "1", "--home", "empty", "--json", str(out), "--keep", str(keep), "--codex-bin", CODEX_BIN])
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 0, {k: v["error"] for k, v in data["configs"].items()}
    assert set(data["configs"]) == {"native", "identity", "window", "budget"}
    assert data["edge"] == 3
    script = bs.build_script(6)
    native = data["configs"]["native"]
    for name, c in data["configs"].items():
        walls = c["turnWallSeconds"]
        assert len(walls) == 6 and all(w > 0 for w in walls)
        assert c["earlyMs"] == pytest.approx(statistics.median(walls[:3]) * 1000)
        assert c["lateMs"] == pytest.approx(statistics.median(walls[-3:]) * 1000)
        assert c["lateOverNativeLate"] == pytest.approx(c["lateMs"] / native["lateMs"])
        # Each turn's parts come from the fake model's own clock readings and add up to the turn.
        for w, a, b, d in zip(walls, c["preModelSeconds"], c["modelSeconds"], c["postModelSeconds"], strict=True):
            assert a > 0 and b > 0 and a + b + d == pytest.approx(w)
        assert c["modelRequests"] == len(script) + sum(1 for t in script if t.command)
        assert c["codexRssEndKb"] > 10_000
        assert c["restart"]["resumeMs"] > 0 and c["restart"]["turnMs"] > 0, "a new process resumed the thread and ran a turn"
        assert f"\n{name} " in text
    for name in ("identity", "window", "budget"):
        c = data["configs"][name]
        assert isinstance(c["rebuilds"], int)
        assert c["sidecarPeakRssKb"] > 10_000
        assert len(c["holdMs"]) == 6, "one inspect record a turn"
        assert [s["turn"] for s in c["samples"]] == [0, 2, 4, 6]
        assert all(s["rollouts"] >= 1 and s["codex_home_bytes"] > 0 for s in c["samples"][1:])
        state = keep / "runs" / name / "state"
        last = c["samples"][-1]["files"]
        assert last and last == {k: v for k, v in last.items() if (state / k).exists()}
        assert c["samples"][-1]["stateBytes"] == sum(last.values())
        mirror = b"".join((state / k).read_bytes() for k in last if k.startswith("sessions"))
        assert all(t.prompt.encode() in mirror for t in script), "the state dir sampled is this run's"
        assert len(c["stateBytesPerTurn"]) == 3
        assert {ch["name"] for ch in c["checks"]} == {"late", "rss", "state"}
    assert native["rebuilds"] is None and native["sidecarPeakRssKb"] is None
    (real, empty) = data["sessionStarts"]
    assert real["home"] == "real" and empty["home"] == "empty"
    assert len(real["answer_ms"]) == len(empty["answer_ms"]) == 1 and empty["cpu_ms"]
    assert "Codex session start" in text and "late/native" in text


@pytest.mark.codex
@pytest.mark.skipif(CODEX_BIN is None, reason="real codex not installed: run `make setup`")
def test_six_lossless_turns_give_its_store_in_the_state_dir_its_peak_rss_and_its_late_ratio(tmp_path, capsys):
    out, keep = tmp_path / "report.json", tmp_path / "run"
    args = "--configs native,lossless --turns 6 --block 2 --sample-every 2 --session-starts 0 --no-restart --home empty".split()
    code = bs.main([*args, "--json", str(out), "--keep", str(keep), "--codex-bin", CODEX_BIN])
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 0, {k: v["error"] for k, v in data["configs"].items()}
    assert set(data["configs"]) == {"native", "lossless"}
    c, native = data["configs"]["lossless"], data["configs"]["native"]
    assert c["engine"] == "lossless" and len(c["turnWallSeconds"]) == 6
    assert c["lateOverNativeLate"] == pytest.approx(c["lateMs"] / native["lateMs"])
    assert c["sidecarPeakRssKb"] > 10_000 and len(c["holdMs"]) == 6
    assert {ch["name"]: ch["target"] for ch in c["checks"]}["late"] == "late <= 1.5x native"
    state = keep / "runs" / "lossless" / "state"
    assert "summary_model" in (keep / "runs" / "lossless" / "sidecar.toml").read_text()
    last = c["samples"][-1]["files"]
    store = {k: v for k, v in last.items() if k.startswith("engines/lossless/lossless.sqlite3")}
    assert "engines/lossless/lossless.sqlite3" in store, "the engine's own store, in the run's state dir, is sampled"
    assert (state / "engines" / "lossless" / "lossless.sqlite3").is_file(), "(its WAL is folded in at close)"
    assert sum(v for k, v in last.items() if k.startswith("engines")) == sum(store.values())
    assert "\nlossless " in text and "lossless: state dir" in text
