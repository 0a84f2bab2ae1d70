"""Pure decisions: identities, cuts, chunks, condensation groups, stand-ins."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from engines import AssistantMessage, TextBlock, Usage, UserMessage
from engines.lossless.compaction import condense_groups, fresh_tail_start, leaf_chunks
from engines.lossless.messages import content_identity, identities
from engines.lossless.store import SummaryRow
from engines.lossless.summarize import Source, extractive_summary
from engines.tokens import count_tokens

from .conftest import T0


def test_identity_ignores_metadata_a_replay_may_fill_in_but_not_content_or_time():
    plain = AssistantMessage(content=[TextBlock(text="done")], timestamp=T0)
    with_meta = AssistantMessage(
        content=[TextBlock(text="done")], timestamp=T0, model="gpt-5", stop_reason="stop",
        usage=Usage(input=1, output=2, cache_read=0, cache_write=0, total_tokens=3),
    )
    assert content_identity(plain) == content_identity(with_meta)
    assert content_identity(plain) != content_identity(AssistantMessage(content=[TextBlock(text="done!")], timestamp=T0))
    assert content_identity(plain) != content_identity(AssistantMessage(content=[TextBlock(text="done")], timestamp=T0 + 1))
    assert content_identity(plain) != content_identity(UserMessage(content=[TextBlock(text="done")], timestamp=T0))


def test_repeats_within_a_batch_get_distinct_stable_identities():
    m = UserMessage(content="again", timestamp=T0)
    ids = identities([m, m, m])
    assert len(set(ids)) == 3
    assert identities([m, m, m]) == ids
    assert identities([m])[0] == ids[0]


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=40),
    blocked=st.sets(st.integers(min_value=1, max_value=39)),
    chunk=st.integers(min_value=1, max_value=1500),
)
def test_leaf_chunks_cover_the_range_in_order_at_allowed_cuts(sizes, blocked, chunk):
    n = len(sizes)
    cuts = [i not in blocked for i in range(n + 1)]
    cuts[0] = cuts[n] = True
    chunks = leaf_chunks(sizes, cuts, n, chunk)
    assert chunks[0][0] == 0 and chunks[-1][1] == n
    for (a, b), (c, _) in zip(chunks, chunks[1:]):
        assert b == c
    for a, b in chunks:
        assert a < b and cuts[a] and cuts[b]
        # Over the size only when the first allowed cut already was.
        if sum(sizes[a:b]) > chunk:
            first = next(i for i in range(a + 1, n + 1) if cuts[i])
            assert b == first


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=40),
    blocked=st.sets(st.integers(min_value=1, max_value=39)),
    fresh=st.integers(min_value=1, max_value=3000),
    minimum=st.integers(min_value=0, max_value=5),
)
def test_the_fresh_tail_starts_at_an_allowed_cut_and_holds_its_minimum(sizes, blocked, fresh, minimum):
    n = len(sizes)
    cuts = [i not in blocked for i in range(n + 1)]
    cuts[0] = cuts[n] = True
    start = fresh_tail_start(sizes, cuts, fresh, minimum)
    assert cuts[start]
    assert n - start >= min(minimum, n)
    if start > 0:  # one more message would not have fitted
        assert sum(sizes[start - 1 :]) > fresh and n - start >= minimum
    for c in range(start + 1, n):  # the next cut would have cut a message that fits
        if cuts[c]:
            assert n - c < minimum or sum(sizes[c - 1 :]) <= fresh
            break


def _summary(i: int, depth: int, lo: int, hi: int, parent=None) -> SummaryRow:
    return SummaryRow(
        id=f"sum_{i:016x}", depth=depth, seq_lo=lo, seq_hi=hi, turn_lo=lo, turn_hi=hi, time_lo=lo, time_hi=hi,
        text="t", tokens=1, source_tokens=10, fallback=False, attempts=1, parent_id=parent,
    )


def test_condensation_takes_the_oldest_of_the_shallowest_depth_with_more_than_fanout():
    deep = _summary(0, 1, 1, 40)
    leaves = [_summary(i, 0, 41 + 10 * i, 50 + 10 * i) for i in range(1, 5)]
    assert condense_groups([deep, *leaves[:3]], 3) is None  # three is not more than three
    group = condense_groups([deep, *leaves], 3)
    assert [s.id for s in group] == [s.id for s in leaves[:3]]
    gap = [leaves[0], _summary(9, 0, 100, 110), leaves[2], leaves[3]]
    assert condense_groups(gap, 3) is None  # not consecutive: never condensed


def test_the_extractive_stand_in_is_deterministic_and_within_its_target():
    sources = [Source(f"msg_{i:016x}", f"msg_{i:016x} turn {i} user", "word " * (50 * i)) for i in range(1, 12)]
    first = extractive_summary(0, (1, 11), sources, 120, count_tokens)
    assert first == extractive_summary(0, (1, 11), sources, 120, count_tokens)
    assert first.startswith("(extractive summary")
    assert all(s.label in first for s in sources)
    assert count_tokens(first) <= 120 or first.count("\n") == len(sources)
