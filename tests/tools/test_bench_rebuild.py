"""``make bench-rebuild`` at a tiny size: the variants do what they claim.

No timing is asserted: the live test checks, from the request bodies the
fake model recorded, that the ``revert`` variant really drops the earlier
turns on the same Codex thread and that ``fresh`` really moves to another
thread, both carrying the context the way the sidecar does.
"""

from __future__ import annotations

import json

import pytest

from sidecar.projection import CONTEXT_PART_BYTES
from tools import bench_context as bc
from tools import bench_rebuild as br


def test_context_block_is_split_like_the_sidecar_does():
    script = bc.build_script()
    block = br.context_block(script, 10, 13345)
    assert list(block) == sorted(block) and list(block)[0] == "openclaw_context"
    assert list(block)[1] == "openclaw_context_002"
    values = [v["value"] for v in block.values()]
    assert all(len(v.encode()) <= CONTEXT_PART_BYTES for v in values)
    assert sum(len(v) for v in values) == 13345
    assert "".join(values).endswith(script[9].reply[-50:]), "the newest turn is kept"
    assert block == br.context_block(script, 10, 13345), "deterministic"
    assert sum(len(v["value"]) for v in br.context_block(script[:1], 1, 20000).values()) == 20000, "padded when short"


def test_runs_are_bracketed_by_native_runs():
    assert br.order(2) == ["native", "revert", "native", "fresh", "native", "revert", "native", "fresh", "native"]
    runs = [br.Run("native", [10.0]), br.Run("revert", [13.0]), br.Run("native", [16.0]), br.Run("fresh", [8.0]), br.Run("native", [6.0])]
    ratios = br.bracketed(runs)
    assert ratios["revert"] == [pytest.approx(1.0)]  # 13 / mean(10, 16)
    assert ratios["fresh"] == [pytest.approx(8 / 11)]


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        br.main(["--at", "3,5", "--context-bytes", "100"])
    assert "--context-bytes gives 1 sizes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        br.main(["--at", "1", "--context-bytes", "100"])


def _user_texts(body: dict) -> str:
    """The request's conversation items (the context block left out)."""
    kept = [i for i in body.get("input") or [] if "<openclaw_context" not in json.dumps(i)]
    return json.dumps(kept)


def _context(body: dict) -> str:
    return json.dumps([i for i in body.get("input") or [] if "<openclaw_context" in json.dumps(i)])


@pytest.mark.parametrize("variant", ["revert", "fresh"])
def test_the_variants_rebuild_for_real(tmp_path, variant, codex_bin):
    import trio

    script = [bc.Turn(f"prompt number {i} about PAPAYA{i}", f"reply number {i}") for i in range(4)]
    at = {3: 500}
    bc.make_workspace(tmp_path / "work")
    (tmp_path / "home").mkdir()
    run = br.Run(variant)
    bodies = trio.run(br.session, run, script, at, tmp_path, codex_bin, 0)
    assert not run.failed and len(run.turn_ms) == 4
    assert len(bodies) == 4
    before, rebuilt, after = bodies[1], bodies[2], bodies[3]
    assert "PAPAYA0" in _user_texts(before)
    # The rebuild turn: no earlier turn in the input, the context block instead.
    assert "PAPAYA0" not in _user_texts(rebuilt) and "PAPAYA1" not in _user_texts(rebuilt)
    assert "PAPAYA1" in _context(rebuilt) and "PAPAYA2" in _user_texts(rebuilt)
    assert _context(before) == "[]"
    assert "PAPAYA2" in _user_texts(after) and "PAPAYA0" not in _user_texts(after)
    same_thread = rebuilt["prompt_cache_key"] == before["prompt_cache_key"]
    assert same_thread is (variant == "revert")
    assert after["prompt_cache_key"] == rebuilt["prompt_cache_key"]
    if variant == "revert":
        assert len(run.op_ms) == 1  # one thread/revert
    else:
        assert len(run.op_ms) >= 1  # spares started in the background


def test_growth_mode_reverts_one_thread_and_resumes_both(tmp_path, capsys, codex_bin):
    import trio

    (tmp_path / "home").mkdir()
    bc.make_workspace(tmp_path / "work")
    result = br.Growth()
    trio.run(br.growth, result, 3, tmp_path, codex_bin)
    assert result.failed == 0 and len(result.revert_ms) == 3
    assert set(result.resume_ms) == {"plain", "reverted", "plain again", "reverted again"}
    text = br.growth_report(result)
    assert "  1-3 " in text and "3 reverts of one thread" in text
    assert "ms per earlier revert" not in text, "no slope from overlapping windows"
    assert len(result.plain_ms) == 3 and len(result.after_restart_ms) == 3
    slope = br.growth_report(br.Growth(revert_ms=[10.0] * 10 + [float(10 + 2 * k) for k in range(1, 11)]))
    assert "+1.1 ms per earlier revert" in slope  # (mean 21 - 10) / 10 reverts apart
    # Each revert wrote Codex a new rollout segment of the reverted thread.
    rollouts = list((tmp_path / "growth-home").rglob("rollout-*.jsonl"))
    assert len(rollouts) >= 2 + 3, [p.name for p in rollouts]
