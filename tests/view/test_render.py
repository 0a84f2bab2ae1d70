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
