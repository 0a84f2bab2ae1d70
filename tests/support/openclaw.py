"""OpenClaw's whole agent for the live tests: where it is, and the marks a
module that drives it carries.

``OPENCLAW`` is None only when make did not export the variables (the tests
skip); ``MISSING`` says why when make said it is installed and it is not
(every test fails).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.codex_home import find_codex_bin
from tools.openclaw_home import OpenClawMissing, find_openclaw

try:
    OPENCLAW = find_openclaw()
    MISSING: str | None = None
except OpenClawMissing as exc:
    OPENCLAW, MISSING = None, str(exc)
CODEX_BIN = find_codex_bin()

MARKS = [
    pytest.mark.openclaw,
    pytest.mark.codex,
    pytest.mark.skipif(OPENCLAW is None and MISSING is None, reason="OpenClaw env not set: run through `make test` or `make test-openclaw`"),
]
"""A module's ``pytestmark``."""


TIMED_OUT = "codex app-server request timed out"
"""OpenClaw's words when its codex harness did not answer in time (a loaded machine: the turn is tried again)."""
UNREACHABLE = "Gateway not reachable"
"""OpenClaw's words when a turn sent to the gateway found none."""
SETTLED = "startup outcomes:"
"""The gateway's log line once its start-up work is done (a turn sent
before it, on a loaded machine, timed out connecting)."""


def require_tools() -> tuple[str, Path, str]:
    """OpenClaw's executable, its template state and the real codex; the
    test fails when one is missing (make said they are installed)."""
    if MISSING is not None:
        pytest.fail(MISSING, pytrace=False)
    assert OPENCLAW is not None
    if CODEX_BIN is None:
        pytest.fail("the OpenClaw tests need the real codex too: run `make setup`")
    return (*OPENCLAW, CODEX_BIN)
