"""lcm_grep's work is bounded in a long session: full text ranks only the
newest ``FTS_CANDIDATES`` matches of the scope, a time range narrows the
stretch of the index read, a regex reads at most ``REGEX_SCAN_ROWS`` rows
(and says so) and skips pages that cannot match. Each on both backends
(the ``host`` fixture); ``make bench-lossless-long`` measures the times."""

from __future__ import annotations

import inspect
import re

import pytest

from engines.lossless import search as search_module
from engines.lossless.search import page_filter

from .conftest import T0, make_engine
from .test_grep_search import _ids, _say, grep

ROWS = [
    "first line\nstage 12 is kept",
    "nothing here",
    "ends with stage",
    "deploy 99\nmore",
]


@pytest.mark.parametrize(
    "regex",
    [r"stage \d+ is kept", r"^nothing", r"stage$", r"^more$", r"\d{2}$", r"(?i)DEPLOY", r"kept\Z", r"(?<=deploy )99", r"x*+y", r"absent"],
)
def test_a_page_searched_whole_never_hides_a_row_that_matches(regex):
    whole = page_filter(regex)
    row_match = any(re.search(regex, row) for row in ROWS)
    if whole is None:
        return  # rows searched one by one
    assert whole.search("\n".join(ROWS)) is not None or not row_match


def test_patterns_that_joining_could_hide_are_searched_row_by_row():
    for regex in (r"\Astage", r"kept\Z", r"(?<=a)b", r"(?<!a)b", r"a(?=b)", r"a(?!b)", r"(?>ab)c", r"a*+b", r"a++", r"a?+", r"a{2}+"):
        assert page_filter(regex) is None, regex
    assert page_filter(r"OPS-\d+") is not None and page_filter(r"^x$") is not None


async def test_full_text_ranks_the_newest_matches_of_a_common_word(host, monkeypatch):
    monkeypatch.setattr(search_module, "FTS_CANDIDATES", 4)
    engine = await make_engine(host)
    texts = [f"kestrel {'kestrel ' * (12 - n)}report number {n}" for n in range(12)]  # older ones say it more often
    await _say(engine, "s-a", "agent:main:a", *texts)
    result = await grep(engine, query="kestrel", limit=10)
    assert not result.is_error, result.text
    shown = re.findall(r"report number (\d+)", result.text)
    assert sorted(int(n) for n in shown) == [8, 9, 10, 11], result.text  # the newest four, best first
    rare = await grep(engine, query="number 0")  # an old message is still found by its own words
    assert "report number 0" in rare.text


async def test_a_time_range_reads_only_its_stretch_of_the_index(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", *[f"heron sighting {n}" for n in range(20)], step=3_600_000)
    since = T0 + 15 * 3_600_000
    lo = search_module.GrepQuery(match='"heron"', session_id="s-a", since=since)
    assert search_module._pk_range(engine.store, lo) is not None
    result = await grep(engine, query="heron", since="2023-11-15T10:00Z", before="2023-11-15T12:00Z", limit=50)
    assert sorted(int(n) for n in re.findall(r"heron sighting (\d+)", result.text)) == [12, 13], result.text
    empty = await grep(engine, query="heron", since="2030-01-01")
    assert "No match" in empty.text


async def test_a_regex_reads_a_bounded_number_of_rows_and_says_so(host, monkeypatch):
    monkeypatch.setattr(search_module, "REGEX_SCAN_ROWS", 5)
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", "OPS-1 is the oldest", *[f"filler {n}" for n in range(9)])
    result = await grep(engine, query=r"OPS-\d+", regex=True)
    assert "No match" in result.text and "5 older ones unread" in result.text, result.text
    near = await grep(engine, query=r"filler \d", regex=True, limit=3)
    assert len(_ids(near.text)) == 3 and "unread" not in near.text


async def test_newest_first_in_one_session_reads_only_its_newest_matches(host, monkeypatch):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", *[f"osprey {'osprey ' * (n % 5)}note {n}" for n in range(90)])
    asked: list[int] = []
    for name in ("_sqlite_hits", "_pg_ranked"):
        real = getattr(search_module, name)

        def spy(*args, _real=real, **kwargs):
            bound = inspect.signature(_real).bind(*args, **kwargs)
            if bound.arguments["table"] == "messages":
                asked.append(bound.arguments.get("candidates", search_module.FTS_CANDIDATES))
            return _real(*args, **kwargs)

        monkeypatch.setattr(search_module, name, spy)
    newest = await grep(engine, query="osprey", sort="newest", limit=5)
    assert [int(n) for n in re.findall(r"note (\d+)", newest.text)] == [89, 88, 87, 86, 85], newest.text
    assert asked == [5 + 64]  # the limit and the room for recall-tool messages, not FTS_CANDIDATES
    asked.clear()
    ranked = await grep(engine, query="osprey", limit=5)  # by relevance: the newest FTS_CANDIDATES are ranked
    assert len(_ids(ranked.text)) == 5 and asked == [search_module.FTS_CANDIDATES]
