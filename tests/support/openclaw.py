"""OpenClaw's whole agent for the live tests: where it is, and the marks a
module that drives it carries.

``OPENCLAW`` is None only when make did not export the variables (the tests
skip); ``MISSING`` says why when make said it is installed and it is not
(every test fails).
"""

from __future__ import annotations

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
