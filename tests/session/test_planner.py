"""sidecar.session.planner: the plan for a turn, from the ledger and the assembly alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.session.planner import Slack, ThreadHoldings, assembled_tokens, plan_turn, within_slack

EXACT = Slack(stale_slack=0)


def ledger(held, size=100, **kw):
    return ThreadHoldings(held=held, sizes={f: size for f in held} | kw.pop("sizes", {}), **kw)


def delta(led, assembly, slack=EXACT, estimated=None, history_empty=False):
    return plan_turn(led, assembly, mode="delta", epoch=None, estimated_tokens=estimated, history_empty=history_empty, slack=slack)


def test_an_assembly_that_extends_the_thread_projects_only_its_tail():
    plan = delta(ledger(["a", "b"]), ["a", "b", "c", "d"])
    assert plan.action == "tail" and plan.tail_from == 2 and plan.held_after == ("a", "b", "c", "d")


def test_an_unchanged_assembly_projects_nothing_new():
    plan = delta(ledger(["a", "b"]), ["a", "b"])
    assert plan.action == "tail" and plan.tail_from == 2 and not plan.drops_content


def test_a_replaced_message_rebuilds():
    plan = delta(ledger(["a", "b"]), ["a", "x"])
    assert plan.action == "rebuild" and plan.held_after == ("a", "x")


def test_a_reordered_assembly_rebuilds():
    assert delta(ledger(["a", "b"]), ["b", "a"]).action == "rebuild"


def test_a_forced_rebuild_rebuilds_even_when_the_assembly_extends_the_thread():
    assert delta(ledger(["a"], force_rebuild=True), ["a", "b"]).action == "rebuild"


def test_a_small_drop_stays_within_the_slack():
    slack = Slack(stale_slack=0.10, stale_floor_chars=0)
    held = [f"m{i}" for i in range(20)]
    plan = delta(ledger(held), held[1:] + ["new"], slack=slack)
    assert plan.action == "tail" and plan.stale == 1 and plan.drops_content
    assert plan.held_after == (*held, "new")


def test_a_drop_past_the_slack_rebuilds():
    slack = Slack(stale_slack=0.10, stale_floor_chars=0)
    held = [f"m{i}" for i in range(20)]
    assert delta(ledger(held), held[5:], slack=slack).action == "rebuild"


def test_the_floor_keeps_a_young_thread_from_rebuilding_on_a_small_drop():
    slack = Slack(stale_slack=0.10, stale_floor_chars=4000)
    assert delta(ledger(["a", "b"], size=1000), ["b"], slack=slack).action == "tail"


def test_the_slack_never_takes_the_model_past_the_engine_s_budget():
    slack = Slack(stale_slack=0.5, stale_floor_chars=10_000, token_budget=60)
    # 2 x 100 chars kept (50 tokens) + 100 stale chars (25 tokens) > 60 tokens.
    assert delta(ledger(["a", "b", "c"]), ["b", "c"], slack=slack).action == "rebuild"
    assert delta(ledger(["a", "b", "c"]), ["b", "c"], slack=Slack(0.5, 10_000, token_budget=80)).action == "tail"


def test_stale_content_of_unknown_size_rebuilds():
    led = ThreadHoldings(held=["a", "b"], sizes={"b": 10})
    assert delta(led, ["b"], slack=Slack(0.9, 10_000)).action == "rebuild"


def test_an_empty_thread_and_an_empty_assembly_need_nothing():
    plan = delta(ledger(["a"], has_turns=False, force_rebuild=True), [], history_empty=True)
    assert plan.action == "nothing" and plan.held_after == ()


def test_epoch_mode_projects_nothing_within_an_epoch_and_rebuilds_on_a_new_one():
    led = ledger(["a"], projected_epoch="e1")
    same = plan_turn(led, ["x"], mode="epoch", epoch="e1", estimated_tokens=None, history_empty=False, slack=EXACT)
    assert same.action == "tail" and same.tail_from == 1 and same.held_after == ("a",)
    new = plan_turn(led, ["x"], mode="epoch", epoch="e2", estimated_tokens=None, history_empty=False, slack=EXACT)
    assert new.action == "rebuild" and new.epoch_pending == "e2" and new.held_after == ("x",)


def test_assembled_tokens_prefers_the_engine_s_estimate():
    assert assembled_tokens({"a": 400}, ["a"], 7) == 7
    assert assembled_tokens({"a": 401}, ["a"], None) == 101
    assert assembled_tokens({"a": 400}, ["a"], True) == 100  # a bool is no estimate


def test_no_stale_content_is_always_within_the_slack():
    assert within_slack({}, [], ["a"], ["a"], None, EXACT)


fps = st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=8)


@given(fps, fps)
def test_a_tail_plan_s_ledger_always_ends_with_the_assembly(held, assembly):
    plan = delta(ledger(held), assembly, slack=Slack(0.5, 1000))
    if plan.action == "tail":
        kept = [f for f in held if f in assembly]
        assert list(plan.held_after) == held + assembly[len(kept) :]
        assert [f for f in plan.held_after if f in assembly] == assembly
    else:
        assert plan.action == "rebuild" and list(plan.held_after) == assembly


@given(fps, fps)
def test_the_plan_is_deterministic(held, assembly):
    assert delta(ledger(held), assembly, slack=Slack(0.3, 150)) == delta(ledger(held), assembly, slack=Slack(0.3, 150))


@given(fps)
def test_exact_mode_rebuilds_on_any_drop(held):
    if held:
        assert delta(ledger(held), held[1:]).action == "rebuild"
