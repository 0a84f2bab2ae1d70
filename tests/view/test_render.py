"""``sidecar/view/render.py`` and ``plots.py``: the page, pure."""

from __future__ import annotations

import re

import pytest

from sidecar.view import gather, render
from sidecar.view.plots import line_chart
from tools.view_session import PLANTED, SESSION, write_session


@pytest.fixture
def state(tmp_path):
    write_session(tmp_path, turns=60, threads=2)
    return tmp_path


def test_the_page_holds_every_turn_the_plots_and_the_planted_text(state):
    page = render(gather(state, SESSION))
    assert len(re.findall(r'<details class="turn" id="turn-\d+"', page)) == 60
    for plot in ("plot-tokens", "plot-cached", "plot-budget", "timeline"):
        assert f'id="{plot}"' in page
    assert page.count("<polyline") >= 4
    assert PLANTED in page


def test_the_page_loads_nothing_from_anywhere(state):
    page = render(gather(state, SESSION))
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "default-src 'none'" in page  # and the page forbids itself any fetch


def test_text_is_escaped(tmp_path):
    write_session(tmp_path, turns=3, threads=1)
    path = tmp_path / "sessions" / f"{SESSION}.jsonl"
    path.write_text(path.read_text().replace("tell me about", "<script>alert(1)</script> tell me about"))
    page = render(gather(tmp_path, SESSION))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_redacted_page_has_sizes_and_none_of_the_text(state):
    page = render(gather(state, SESSION, redact=True))
    assert PLANTED not in page and "Lisbon" not in page and "euros" not in page
    assert "characters, redacted]" in page and "redacted</b> (sizes only)" in page


def test_the_same_report_renders_to_the_same_bytes(state):
    assert render(gather(state, SESSION)) == render(gather(state, SESSION))


def test_a_chart_breaks_its_line_where_a_value_is_missing():
    svg = line_chart("t", [("s", "#000", [1.0, 2.0, None, 3.0, 4.0])])
    assert svg.count("<polyline") == 2
    single = line_chart("t", [("s", "#000", [1.0, None, 3.0])])
    assert single.count("<circle") == 2 and "<polyline" not in single


def test_the_lossless_part_nests_each_summary_under_the_one_that_condenses_it():
    from sidecar.view.gather import Lossless, MessageText, Report, Summary, Text, ToolCall, TurnView

    def summary(sid, depth, lo, hi, parent=None, children=(), fallback=False):
        covered = [(lo, MessageText("user", Text(5, f"said {lo}")))] if depth == 0 else []
        return Summary(sid, depth, (lo, hi), 10, 100, fallback, parent, list(children), Text(7, f"text of {sid}"), covered, hi - lo + 1, 1)

    rows = [summary("sum_top", 1, 1, 4, children=["sum_a", "sum_b"]), summary("sum_a", 0, 1, 2, "sum_top"), summary("sum_b", 0, 3, 4, "sum_top", fallback=True), summary("sum_c", 0, 5, 6)]
    turn = TurnView(n=1, thread="t", turn_id="u", recorded=True, engine_tools=[ToolCall("lcm_grep", Text(2, "{}"), Text(6, "3 hits"), True, 1.0)], marks=["recall"])
    page = render(Report(session="s", asked="s", threads=[], turns=[turn], lossless=Lossless(6, 60, rows, 1, 10, 1, 1500, "here")))
    top = page.index('id="sum_top"')
    assert top < page.index('id="sum_a"') < page.index('id="sum_b"') < page.index('id="sum_c"')
    assert page.count('<details class="sum') == 4 and page.count('<details class="sum fb"') == 1
    assert page.count('class="sbar') == 4 and "said 3" in page and "text of sum_c" in page
    assert "<td>lcm_grep</td>" in page and "3 hits" in page
