"""The browser for ``tests/view/test_browser.py``: Debian's headless
Chromium, driven over the DevTools pipe (``tools/browser.py``).

With ``CODEX_SIDECAR_TEST_CHROMIUM`` set (``make test`` sets it, after
``make browser`` installed the package) a missing browser fails the tests;
without it they are skipped when no chromium is on PATH. Screenshots go to
``.artifacts/view/`` (git-ignored); their paths are listed at the end of the run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.browser import Browser, find_chromium

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "view"
_SHOTS: list[Path] = []


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None or not os.path.exists(binary):
        if os.environ.get("CODEX_SIDECAR_TEST_CHROMIUM"):
            pytest.fail(f"CODEX_SIDECAR_TEST_CHROMIUM={os.environ['CODEX_SIDECAR_TEST_CHROMIUM']} is not there: run `make browser`")
        pytest.skip("no chromium on PATH: run `make browser` (Debian's chromium)")
    with Browser(binary) as b:
        yield b


@pytest.fixture
def shoot(browser):
    """Save a screenshot of the page as it is under ``.artifacts/view/NAME.png``."""

    def take(name: str, *, full_page: bool = False) -> Path:
        path = browser.screenshot(ARTIFACTS / f"{name}.png", full_page=full_page)
        _SHOTS.append(path)
        return path

    return take


def pytest_terminal_summary(terminalreporter):
    if _SHOTS:
        terminalreporter.write_sep("-", "view screenshots")
        for path in _SHOTS:
            terminalreporter.write_line(str(path))
