"""The README's first screen takes a newcomer from a clone to a demo with no
account and no global codex, and then on to OpenClaw."""

from __future__ import annotations

from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:50])


def test_the_demo_comes_before_any_global_codex():
    assert "make demo" in FIRST_SCREEN
    assert FIRST_SCREEN.index("make demo") < FIRST_SCREEN.index("npm install -g")
    assert "no OpenAI account" in FIRST_SCREEN and "no global codex" in FIRST_SCREEN


def test_then_it_leads_to_openclaw():
    assert "codex-sidecar doctor" in FIRST_SCREEN
    assert "(#putting-it-in-front-of-openclaw)" in FIRST_SCREEN and "## Putting it in front of OpenClaw" in README
