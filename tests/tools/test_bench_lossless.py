"""``make bench-lossless`` at a tiny size, and its pure pieces.

The live test runs the benchmark for a few turns through the real codex
(native, and the sidecar with the ``lossless`` engine) and checks that the
report's figures are derived from what happened: the planted facts come back
through a real ``lcm_grep`` call answered by the sidecar, the totals add up
from the per-request figures, the framing and the bound come from native's
first request. The other tests pin the fake model's rules, the
cache-weighted arithmetic and the script without processes. No timing is
asserted anywhere.
"""

from __future__ import annotations

import json

import pytest

from tools import bench_lossless as bl
from tools.codex_home import find_codex_bin
from tools.fake_model import FunctionCall, Rules, ShellCall, Text, request_prompt
from tools.lossless_table import SUMMARY_MODEL

CODEX_BIN = find_codex_bin()

_GREP_TOOL = {"type": "function", "name": "lcm_grep", "parameters": {"type": "object"}}


def _msg(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _req(*items: dict, tools: list | None = None, key: str = "k") -> dict:
    return {"input": list(items), "tools": tools if tools is not None else [], "prompt_cache_key": key}


# ------------------------------------------------------------ the fake model's rules


def test_a_use_tool_prompt_calls_the_named_tool_only_when_offered_then_quotes_its_output():
    rules = Rules(seed=3)
    env = _msg("user", "<environment_context>\n  <cwd>/x</cwd>\n</environment_context>")
    ask = _msg("user", "Earlier I said something. Use lcm_grep to find the staging host.")
    kind, step = rules.decide(_req(env, ask, tools=[_GREP_TOOL]))
    assert kind == "tool-call" and isinstance(step, FunctionCall)
    assert step.name == "lcm_grep" and step.arguments == {"query": "the staging host"}
    again = rules.decide(_req(env, ask, tools=[_GREP_TOOL]))[1]
    assert again == step, "deterministic call id"
    call = {"type": "function_call", "name": "lcm_grep", "arguments": "{}", "call_id": step.call_id}
    out = {"type": "function_call_output", "call_id": step.call_id, "output": "1 hit: host pg-kestrel-07"}
    kind, answer = rules.decide(_req(env, ask, call, out, tools=[_GREP_TOOL]))
    assert kind == "tool-answer" and isinstance(answer, Text) and "pg-kestrel-07" in answer.text
    kind, native = rules.decide(_req(env, ask, tools=[{"type": "function", "name": "exec_command"}]))
    assert kind == "no-tool" and isinstance(native, Text) and "lcm_grep" in native.text


def test_a_run_prompt_runs_the_shell_and_other_prompts_get_seeded_prose():
    rules = Rules(seed=3, reply_words=(50, 60))
    run = _msg("user", "Run `cat logs/job-01.log` and tell me what stands out.")
    kind, step = rules.decide(_req(run))
    assert kind == "shell-call" and isinstance(step, FunctionCall) and step.arguments["cmd"] == "cat logs/job-01.log"
    assert step == ShellCall("cat logs/job-01.log", call_id=step.call_id, login=False)
    out = {"type": "function_call_output", "call_id": step.call_id, "output": "ERROR job=1 step=3"}
    kind, answer = rules.decide(_req(run, {"type": "function_call", "call_id": step.call_id}, out))
    assert kind == "shell-answer" and "ERROR job=1 step=3" in answer.text
    a = rules.decide(_req(_msg("user", "Tell me about caches.")))[1]
    b = rules.decide(_req(_msg("user", "Tell me about queues.")))[1]
    assert isinstance(a, Text) and 50 <= len(a.text.split()) <= 60
    assert a.text != b.text and rules.decide(_req(_msg("user", "Tell me about caches.")))[1] == a
    assert Rules(seed=4, reply_words=(50, 60)).decide(_req(_msg("user", "Tell me about caches.")))[1] != a


def test_a_summary_prompt_gets_the_head_of_each_block_within_its_length():
    prompt = "Summarise these 2 messages (turns 1-2) in at most 40 tokens.\n\n[msg_1 turn 1 user]\nalpha beta gamma\n\n[msg_2 turn 2 assistant]\ndelta epsilon"
    kind, step = Rules().decide(_req(_msg("developer", "You write the memory"), _msg("user", prompt)))
    assert kind == "summary" and step.text == "Summary: alpha beta gamma; delta epsilon"
    assert "msg_1" not in step.text
    assert request_prompt(_req(_msg("user", "q"), _msg("assistant", "a")))[0] == "q"


# ------------------------------------------------------------ cache-weighted input


def test_the_cached_prefix_is_what_the_previous_request_of_the_same_key_shares():
    ledger = bl.Ledger()
    tools = [{"type": "function", "name": "exec_command", "description": "run a command"}]
    a, b, c = _msg("user", "first prompt here"), _msg("assistant", "a reply of some words"), _msg("user", "second prompt")
    first = ledger.add(0, "reply", _req(a, tools=tools))
    assert first.cached == 0 and first.tokens > 0
    second = ledger.add(1, "reply", _req(dict(a, id="msg_1"), b, c, tools=tools))
    assert second.cached == first.tokens, "ids are not content: the whole first request is the prefix"
    assert second.weighted == pytest.approx(second.tokens - first.tokens + 0.1 * first.tokens)
    other = ledger.add(1, "summary", _req(a, b, c, tools=tools, key="other"))
    assert other.cached == 0, "another cache key starts cold"
    changed = ledger.add(2, "reply", _req(_msg("user", "a different head"), b, c, tools=tools))
    assert 0 < changed.cached < changed.tokens, "only the tools survive a changed first item"
    assert ledger.add(3, "reply", _req(a, tools=[])).cached == 0


def test_the_script_plants_facts_early_and_asks_for_every_one_at_the_end():
    script = bl.build_script(300)
    assert script == bl.build_script(300)
    plants = [i for i, t in enumerate(script) if t.kind == "plant"]
    recalls = [i for i, t in enumerate(script) if t.kind == "recall"]
    assert len(plants) == len(bl.FACTS) and max(plants) < 20
    assert {script[i].fact for i in recalls[-len(bl.FACTS):]} == set(range(len(bl.FACTS)))
    assert recalls[-len(bl.FACTS)] == 300 - len(bl.FACTS) and recalls[0] == 150
    for i in plants:
        assert bl.FACTS[script[i].fact].text in script[i].prompt
    for i in recalls:
        tool = "lcm_expand_query" if i == 151 else "lcm_grep"
        assert script[i].tool == tool and f"Use {tool} to find {bl.FACTS[script[i].fact].query}." in script[i].prompt
    assert sum(t.kind == "shell" for t in script) > 80
    small = bl.build_script(8)
    assert [t.kind for t in small].count("plant") == 2 and [t.kind for t in small][-2:] == ["recall", "recall"]
    assert [t.tool for t in small][-2:] == ["lcm_expand_query", "lcm_grep"]


def test_the_expand_query_call_gets_the_excerpt_sentence_that_answers_it_and_its_id():
    prompt = (
        "Question: Orion launch code name\n\nAnswer in at most 750 tokens, then the Sources line.\n\n"
        "Excerpts (2 messages, oldest first):\n\n"
        "[msg_00000000000000aa turn 5 assistant 2026-11-27T07:00Z]\nThe launch slipped. Nothing about names here.\n\n"
        "[msg_00000000000000bb turn 6 user 2026-11-27T07:01Z]\nAbout the queue: it stalled. "
        "Write this down: the Orion launch code name is BLUE HERON. The owner agreed."
    )
    rules = bl.BenchRules(seed=3)
    kind, step = rules.decide(_req(_msg("developer", "You answer one question"), _msg("user", prompt)))
    assert kind == "expand-query" and isinstance(step, Text)
    assert "BLUE HERON" in step.text and "The owner agreed" not in step.text
    assert step.text.endswith("Sources: msg_00000000000000bb")
    # Other prompts keep the plain rules.
    assert rules.decide(_req(_msg("user", "Question: what now?")))[0] == "reply"


def test_an_expand_query_recall_reports_how_much_the_main_context_grew():
    script = [bl.Turn("x " + bl.FACTS[1].text, "plant", 1), bl.Turn("Use lcm_expand_query to find it.", "recall", 1, "lcm_expand_query")]
    ask = _msg("user", "Use lcm_expand_query to find it.")
    call = {"type": "function_call", "name": "lcm_expand_query", "arguments": '{"query": "it"}', "call_id": "q"}
    out = {"type": "function_call_output", "call_id": "q", "output": "From the excerpts: the code name is BLUE HERON.\n\n[ids used: msg_00000000000000bb]"}
    first, after = _req(ask), _req(ask, call, out)
    (fact,) = bl.fact_checks(script, {1: [("tool-call", first), ("tool-answer", after)]}, sidecar=True)
    assert fact["tool"] == "lcm_expand_query" and fact["toolCalled"] and fact["inToolOutput"] and fact["inInputAfterCall"]
    assert fact["contextGrowth"] == bl.body_tokens(after) - bl.body_tokens(first) > 0


def test_a_fact_counts_as_found_only_through_this_turns_own_lcm_grep_call():
    script = [bl.Turn("x " + bl.FACTS[0].text, "plant", 0), bl.Turn("talk", "talk"), bl.Turn("Use lcm_grep to find it.", "recall", 0)]
    key = bl.FACTS[0].key
    old_call = {"type": "function_call", "name": "lcm_grep", "arguments": "{}", "call_id": "old"}
    old_out = {"type": "function_call_output", "call_id": "old", "output": f"- msg_0123456789abcdef · user · turn 1 · t: {key}"}
    ask = _msg("user", "Use lcm_grep to find it.")
    # An earlier turn's call and output still in the thread's history: not this turn's recall.
    (fact,) = bl.fact_checks(script, {2: [("no-tool", _req(old_call, old_out, ask))]}, sidecar=True)
    assert not fact["toolCalled"] and not fact["inToolOutput"] and fact["inInputWhenAsked"]
    call = {"type": "function_call", "name": "lcm_grep", "arguments": "{}", "call_id": "new"}
    out = {"type": "function_call_output", "call_id": "new", "output": f"1 hit:\n- msg_0123456789abcdef · user · turn 1 · t: {key} etc"}
    (fact,) = bl.fact_checks(script, {2: [("tool-call", _req(ask)), ("tool-answer", _req(ask, call, out))]}, sidecar=True)
    assert fact["toolCalled"] and fact["inToolOutput"] and fact["inInputAfterCall"] and not fact["inInputWhenAsked"]
    assert fact["hitTurns"] == [(1, 1)] and fact["hitCoversPlantedTurn"] and fact["plantedTurn"] == 1
    miss = {"type": "function_call_output", "call_id": "new", "output": "No match for 'it' in this conversation."}
    (fact,) = bl.fact_checks(script, {2: [("tool-call", _req(ask)), ("tool-answer", _req(ask, call, miss))]}, sidecar=True)
    assert fact["toolCalled"] and not fact["inToolOutput"] and not fact["inInputAfterCall"]


# ------------------------------------------------------------ the live bench


SMALL = ["fresh_tail_tokens=1200", "leaf_chunk_tokens=1200", "leaf_summary_tokens=100", "condensed_summary_tokens=150", "condense_fanout=2"]
"""Sizes for the live run's 5,000-token budget (`--budget`), which ten turns outgrow, so the run summarises and rebuilds."""


@pytest.mark.codex
@pytest.mark.skipif(CODEX_BIN is None, reason="real codex not installed (make setup)")
def test_a_short_run_reports_figures_taken_from_the_run(tmp_path, capsys):
    out = tmp_path / "report.json"
    args = ["--turns", "10", "--budget", "5000", "--json", str(out), "--keep", str(tmp_path / "run")]
    for setting in SMALL:
        args += ["--engine-setting", setting]
    code = bl.main(args)
    text = capsys.readouterr().out
    assert code == 0, text
    data = json.loads(out.read_text())
    assert data["budget"] == 5000 and "token_budget=5000" in data["engineSettings"]
    native, lossless = data["sides"]["native"], data["sides"]["lossless"]
    for side in (native, lossless):
        assert side["error"] is None and side["turns"] == 10 and len(side["walls"]) == 10
        reqs = side["requests"]
        assert side["all"]["inputTokens"] == sum(r["tokens"] for r in reqs)
        weighted = sum(r["tokens"] - r["cached"] + 0.1 * r["cached"] for r in reqs)
        assert side["all"]["cacheWeightedInput"] == pytest.approx(weighted, abs=0.1)
        assert sum(v["cacheWeightedInput"] for v in side["breakdown"].values()) == pytest.approx(weighted, abs=1)
        assert any(r["cached"] > 0 for r in reqs), "later requests of one thread reuse the earlier ones"
    # The recall turns: the sidecar's lcm_grep and lcm_expand_query answered,
    # the fact came back into the model's input.
    assert len(lossless["facts"]) == 2
    for fact in lossless["facts"]:
        assert fact["toolCalled"] and fact["inToolOutput"] and fact["inInputAfterCall"], fact
        assert fact["plantedTurn"] < fact["askedTurn"]
    query, grep = sorted(lossless["facts"], key=lambda f: f["tool"])
    assert grep["tool"] == "lcm_grep" and grep["hitCoversPlantedTurn"]
    assert query["tool"] == "lcm_expand_query" and 0 < query["contextGrowth"] < 1000
    assert data["checks"]["expandQueryGrowthBelowMax"] is True
    kinds = [r["kind"] for r in lossless["requests"]]
    assert kinds.count("tool-call") == 2 and kinds.count("tool-answer") == 2 and kinds.count("expand-query") == 1
    assert "tool-call" not in [r["kind"] for r in native["requests"]] and [r["kind"] for r in native["requests"]].count("no-tool") == 2
    assert not any(f["toolCalled"] for f in native["facts"])
    assert data["checks"]["everyFactFound"] is True
    # Summaries and rebuilds happened, and the report counts them from the store, the host and the records.
    completions = lossless["host"]["completions"]
    assert kinds.count("summary") + kinds.count("expand-query") == completions["calls"] - completions["failed"] > 1
    depths = data["summariesByDepth"]
    assert sum(d["total"] for d in depths.values()) >= kinds.count("summary")
    assert data["fallbackSummaries"] == sum(d["fallback"] for d in depths.values())
    assert lossless["store"]["compactionSteps"] >= 1
    assert lossless["rebuilds"] == len(lossless["rebuiltTurns"]) >= 1
    assert lossless["cacheKeys"] > native["cacheKeys"] == 1
    # The bound comes from native's first request; the largest request is a measured one.
    assert data["framingTokens"] > 1000
    assert data["largestBound"] == 5000 + data["framingTokens"]  # no slack
    # Every summary call asked for the bench's summary_model, no turn request did.
    assert data["checks"]["summaryCallsOnSummaryModel"] is True
    assert set(lossless["models"]["summary"]) == {SUMMARY_MODEL} and SUMMARY_MODEL not in lossless["models"]["reply"]
    assert data["rebuildsPer10Turns"] == lossless["rebuilds"] * 10 / 10
    assert data["largestTurnRequest"] == max(r["tokens"] for r in lossless["requests"] if r["kind"] not in ("summary", "compaction"))
    assert data["cacheWeightedRatio"] == pytest.approx(lossless["all"]["cacheWeightedInput"] / native["all"]["cacheWeightedInput"])
    assert "pg-kestrel-07" in text and "BLUE HERON" in text
    # The targets, one row each, pass or FAIL; the rebuild floor from the run's own turn size.
    assert "targets (issues 27 and 35):" in text and "floor for this conversation and budget" in text
    from engines.lossless.engine import own_tokens

    own = own_tokens(bl.parse_config({}))  # the tool specs, beside the assembly in every request
    assert data["rebuildFloorPer10Turns"] == pytest.approx(10 * data["tokensPerTurn"] / (5000 - own))
    # The cost's floor: the framing and the specs read on every request, the new tokens once.
    assert 0 < data["cacheWeightedFloorRatio"] < data["cacheWeightedRatio"]
    assert f"(floor: {data['cacheWeightedFloorRatio']:.3f}x)" in text
    assert "cacheWeightedDefaultRun" not in data["checks"]  # 10 turns at 5k is not the default run


def test_a_turn_scale_shortens_prompts_replies_and_logs_and_one_keeps_the_standard_run(tmp_path):
    from engines.tokens import count_tokens

    assert bl.build_script(60, 19, 1.0) == bl.build_script(60)
    small = bl.build_script(60, 19, 0.35)
    assert [t.kind for t in small] == [t.kind for t in bl.build_script(60)]
    size = lambda script: sum(count_tokens(t.prompt) for t in script if t.kind in ("talk", "plant"))  # noqa: E731
    assert size(small) < 0.5 * size(bl.build_script(60))
    assert all(bl.FACTS[t.fact].text in t.prompt for t in small if t.kind == "plant")
    full, short = bl.make_workspace(tmp_path / "a"), bl.make_workspace(tmp_path / "b", scale=0.35)
    assert len((short / "logs" / "job-00.log").read_text().splitlines()) == 9
    assert len((full / "logs" / "job-00.log").read_text().splitlines()) == 26


def test_the_targets_table_says_pass_or_fail_for_each_target_and_the_rebuild_floor():
    checks = {
        "largestWithinBound": True,
        "rebuildsPer10TurnsAtMostOne": False,
        "cacheWeightedAtMostHalf": True,
        "cacheWeightedDefaultRun": False,
        "everyFactFound": True,
        "summaryCallsOnSummaryModel": True,
        "expandQueryGrowthBelowMax": True,
    }
    rows = bl.target_rows(checks, 0.31, 2.37, 1.02, 15_000, 15_793)
    verdicts = {row[0]: row[2] for row in rows}
    assert verdicts["at most 1 rebuild per 10 turns"] == "FAIL"
    assert verdicts["largest turn request <= budget + framing, no slack"] == "pass"
    assert verdicts["default run (300 turns, default budget) <= 0.3x"] == "FAIL"
    assert verdicts["every planted fact recalled"] == "pass"
    rebuilds = next(row for row in rows if "rebuild" in row[0])
    assert "2.37" in rebuilds[1] and "floor for this conversation and budget: 1.02" in rebuilds[1]
    assert ["largest turn request <= budget + framing, no slack", "15,000 / 15,793", "pass"] in rows
    # Without the default run's check (another budget or length) there is no row for it.
    del checks["cacheWeightedDefaultRun"]
    assert not any("default run" in row[0] for row in bl.target_rows(checks, 0.31, 0.5, None, 1, 2))


def test_the_floors_count_the_engines_tool_specs_and_what_every_request_reads():
    # 8k, ~920-token turns: ten turns outgrow what the budget leaves beside the specs.
    assert bl.rebuild_floor(923, 8_000, 783) == pytest.approx(10 * 923 / 7_217)
    assert bl.rebuild_floor(None, 8_000, 783) is None and bl.rebuild_floor(900, 500, 783) is None
    # The first request reads the framing uncached, the other 199 cached, plus the new tokens once.
    assert bl.cache_floor(200, 8_600, 50_000) == pytest.approx(8_600 + 0.1 * 8_600 * 199 + 50_000)
    rows = bl.target_rows({k: True for k in ("rebuildsPer10TurnsAtMostOne", "largestWithinBound", "cacheWeightedAtMostHalf", "everyFactFound",
                                             "summaryCallsOnSummaryModel", "expandQueryGrowthBelowMax")}, 0.61, 0.6, 0.42, 1, 2, 0.335)
    assert next(r for r in rows if "cache-weighted" in r[0])[1] == "0.610x (floor: 0.335x)"
