"""sidecar.thread.planner: the plan for a turn, from the ledger and the assembly alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.thread.planner import Slack, ThreadHoldings, assembled_tokens, plan_turn, within_slack

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


SLACK = Slack(stale_slack=0.10, stale_floor_chars=4000)  # the defaults


def test_a_held_message_the_assembly_repeats_later_is_stale_and_projected_again():
    # A retrieval engine hands back the snippet it retrieved last turn, at the
    # end again: the held copy stays as stale slack, the new one is the tail.
    held = ["u1", "a1", "S", "u2", "a2"]
    plan = delta(ledger(held), ["u1", "a1", "u2", "a2", "S"], slack=SLACK)
    assert plan.action == "tail" and plan.tail_from == 4 and plan.stale == 1 and plan.drops_content
    assert plan.held_after == ("u1", "a1", "S", "u2", "a2", "S")


def test_a_repeated_message_plans_like_a_different_one():
    held = ["u1", "a1", "S", "u2", "a2"]
    repeated = delta(ledger(held), ["u1", "a1", "u2", "a2", "S"], slack=SLACK)
    different = delta(ledger(held, sizes={"T": 100}), ["u1", "a1", "u2", "a2", "T"], slack=SLACK)
    assert (repeated.action, repeated.tail_from, repeated.stale) == (different.action, different.tail_from, different.stale)


def test_stale_copies_of_a_repeated_message_all_count_against_the_slack():
    # Each turn's repeat leaves one more stale copy in the thread: past the
    # slack the thread rebuilds, exactly as for distinct dropped messages.
    slack = Slack(stale_slack=0.10, stale_floor_chars=250)
    held = ["u1", "a1", "S", "u2", "a2", "S", "u3", "a3"]
    assert delta(ledger(held), ["u1", "a1", "u2", "a2", "u3", "a3", "S"], slack=slack).action == "tail"
    held += ["S", "u4", "a4"]
    plan = delta(ledger(held), ["u1", "a1", "u2", "a2", "u3", "a3", "u4", "a4", "S"], slack=slack)
    assert plan.action == "rebuild"


def test_a_summary_in_front_of_the_messages_it_keeps_raw_rebuilds_within_the_slack():
    # The live summary engine (tests/support/live.py) at turn 4: the six
    # messages it summarises (~420 characters each, under the 4,000-character
    # floor) become one summary before the two it keeps raw. A tail would hold
    # u3 and a3 twice, the second time after the summary: it replaces held
    # content, however little.
    held = ["u1", "a1", "u2", "a2", "u3", "a3"]
    plan = delta(ledger(held, size=420, sizes={"S4": 40}), ["S4", "u3", "a3"], slack=SLACK)
    assert plan.action == "rebuild" and plan.held_after == ("S4", "u3", "a3")
    # Turn 6: a new summary in front of the last turn, on a thread rebuilt at turn 4.
    held = ["S4", "u3", "a3", "u4", "a4", "u5", "a5"]
    plan = delta(ledger(held, size=420, sizes={"S8": 40}), ["S8", "u5", "a5"], slack=SLACK)
    assert plan.action == "rebuild"


def test_a_summary_that_keeps_the_thread_s_head_still_rebuilds():
    held = ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert delta(ledger(held), ["u1", "S", "u3", "a3"], slack=SLACK).action == "rebuild"


def test_content_inserted_before_held_messages_rebuilds_within_the_slack():
    assert delta(ledger(["a", "b", "c"]), ["a", "x", "b", "c"], slack=SLACK).action == "rebuild"


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
        # The thread keeps what it holds; the assembly's head is held in
        # order (the rest of the held messages are stale) and its tail is new.
        assert list(plan.held_after) == held + assembly[plan.tail_from :]
        rest = iter(held)
        assert all(f in rest for f in assembly[: plan.tail_from])
        assert plan.stale == len(held) - plan.tail_from
        # A message projected again was held before content kept in place,
        # never among the messages the thread ends with.
        kept = set(assembly[: plan.tail_from])
        last = max((i for i, f in enumerate(held) if f in kept), default=-1)
        assert not set(assembly[plan.tail_from :]) & set(held[last + 1 :])
    else:
        assert plan.action == "rebuild" and list(plan.held_after) == assembly


@given(fps, fps)
def test_the_plan_is_deterministic(held, assembly):
    assert delta(ledger(held), assembly, slack=Slack(0.3, 150)) == delta(ledger(held), assembly, slack=Slack(0.3, 150))


@given(fps)
def test_exact_mode_rebuilds_on_any_drop(held):
    if held:
        assert delta(ledger(held), held[1:]).action == "rebuild"
