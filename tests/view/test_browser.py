"""``codex-sidecar view``'s page in a real browser (headless Chromium).

A recorded session (``fixtures/view-session/``: the state dir ``make demo``
left), a long synthetic one with a planted phrase, its redacted page, and a
live ``make demo ENGINE=lossless`` run: the DOM holds the turns, the plots
draw, search finds the phrase, the redacted page holds none of it, and a
screenshot of each is kept (``.artifacts/view/``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sidecar.view import gather, write_report
from tests.support.codex import CODEX_BIN, MISSING
from tools.view_session import PLANTED, SESSION, write_session

pytestmark = pytest.mark.browser

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "view-session"
RECORDED_THREAD = "01a23462-68c3-7233-ade6-3a4707476553"

SEARCH = """new Promise(done => {
  const box = document.getElementById('q');
  box.value = %r;
  box.dispatchEvent(new Event('input'));
  setTimeout(() => done({
    hits: document.getElementById('hits').textContent,
    turns: [...document.querySelectorAll('.turn.hit')].map(e => e.id),
    marks: [...document.querySelectorAll('mark')].map(m => m.textContent),
    hidden: [...document.querySelectorAll('.turn')].filter(e => e.style.display === 'none').length,
  }), 600);
})"""

PLOTS = """[...document.querySelectorAll('svg.chart')].map(svg => {
  const r = svg.getBoundingClientRect();
  const lines = [...svg.querySelectorAll('polyline, circle, rect')].filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; });
  return {id: svg.id, width: r.width, height: r.height, drawn: lines.length};
})"""


def _open(browser, path: Path) -> None:
    browser.open(path.as_uri())


def test_a_recorded_session_shows_its_turns_plots_and_what_the_model_was_given(tmp_path, browser, shoot):
    state = tmp_path / "state"
    shutil.copytree(RECORDED, state)
    page = tmp_path / "recorded.html"
    report = write_report(state, RECORDED_THREAD, page)
    _open(browser, page)
    assert browser.evaluate("document.querySelectorAll('details.turn').length") == len(report.turns) == 4
    plots = browser.evaluate(PLOTS)
    assert {p["id"] for p in plots} >= {"timeline", "plot-tokens", "plot-cached", "plot-budget"}
    assert all(p["width"] > 300 and p["height"] > 50 and p["drawn"] > 0 for p in plots), plots
    shoot("recorded-overview")
    found = browser.evaluate(SEARCH % "forest walks")
    # turn 3 said it; turn 4's context gave it to the model again
    assert found["turns"] == ["turn-3", "turn-4"] and "forest walks" in [m.lower() for m in found["marks"]]
    # the turn opened: what the engine assembled beside what Codex was given
    shown = browser.evaluate("document.getElementById('turn-4').open = true, document.getElementById('turn-4').scrollIntoView(), document.getElementById('turn-4').innerText")
    assert "Engine assembled" in shown and "Sidecar gave Codex" in shown and "OpenClaw assembled context" in shown
    shoot("recorded-turn")


def test_search_finds_a_planted_phrase_in_a_long_session(tmp_path, browser, shoot):
    write_session(tmp_path / "state", turns=300, threads=3)
    page = tmp_path / "long.html"
    write_report(tmp_path / "state", SESSION, page)
    _open(browser, page)
    assert browser.evaluate("document.querySelectorAll('details.turn').length") == 300
    found = browser.evaluate(SEARCH % PLANTED.upper())  # case does not matter
    assert found["turns"] == ["turn-7"] and found["marks"] == [PLANTED] and found["hits"] == "1 turn, 0 summaries"
    assert browser.evaluate("document.getElementById('turn-7').open") is True
    browser.evaluate("document.getElementById('only').click()")
    hidden = browser.evaluate(SEARCH % PLANTED)["hidden"]
    assert hidden == 299
    shoot("long-search")


def test_a_redacted_page_shows_sizes_and_holds_no_planted_text(tmp_path, browser, shoot):
    write_session(tmp_path / "state", turns=60, threads=2)
    page = tmp_path / "redacted.html"
    write_report(tmp_path / "state", SESSION, page, redact=True)
    data = page.read_bytes()
    for text in (PLANTED, "Lisbon", "euros", "OpenClaw assembled context"):
        assert text.encode() not in data
    _open(browser, page)
    assert browser.evaluate("document.querySelectorAll('details.turn').length") == 60
    assert browser.evaluate(SEARCH % PLANTED)["turns"] == []
    browser.evaluate("document.getElementById('q').value = '', document.getElementById('turn-7').open = true, document.getElementById('turn-7').scrollIntoView()")
    assert "characters, redacted]" in browser.evaluate("document.getElementById('turn-7').innerText")
    shoot("redacted-turn")


@pytest.mark.codex
@pytest.mark.skipif(CODEX_BIN is None, reason=MISSING)
async def test_a_live_lossless_demo_run_shows_its_summary_dag_and_recall(tmp_path, browser, shoot, capsys):
    from tools import demo_lossless

    assert CODEX_BIN is not None
    assert await demo_lossless.run(CODEX_BIN, tmp_path) == 0
    capsys.readouterr()
    state = tmp_path / "state"
    thread = next((state / "inspect").iterdir()).stem
    report = gather(state, thread)
    assert report.lossless is not None and report.lossless.summaries
    page = tmp_path / "lossless.html"
    write_report(state, thread, page)
    _open(browser, page)
    assert browser.evaluate("document.querySelectorAll('details.turn').length") == len(report.turns)
    assert browser.evaluate("document.querySelectorAll('details.sum').length") == len(report.lossless.summaries)
    assert browser.evaluate("document.querySelectorAll('#summary-map rect').length") == len(report.lossless.summaries)
    shoot("lossless-overview")
    # the recall: the lcm_grep call and the engine's answer, in its turn and in the table
    calls = browser.evaluate("[...document.querySelectorAll('#lossless table.calls tr')].slice(1).map(r => r.innerText)")
    assert calls and "lcm_grep" in calls[0] and "Hotel Avenida Palace" in calls[0]
    # a summary opened down to its text and the messages it covers
    top = report.lossless.summaries[0].id
    text = browser.evaluate(
        f"(() => {{ const s = document.getElementById({top!r}); s.open = true; s.querySelectorAll('details').forEach(d => d.open = true);"
        f" document.getElementById('lossless').scrollIntoView(); return s.innerText; }})()"
    )
    assert "Hotel Avenida Palace" in text and "covers" in text
    shoot("lossless-dag")
    last = len(report.turns)
    browser.evaluate(f"document.getElementById('turn-{last}').open = true, document.getElementById('turn-{last}').scrollIntoView()")
    shoot("lossless-recall-turn")
