"""The real codex binary, for the tests that drive it.

``CODEX_BIN`` is found once per session the way every live test finds it
(``CODEX_SIDECAR_TEST_CODEX_BIN``, else the project install under
``.tools/``); ``needs_codex`` is the ``pytestmark`` of a module that cannot run
without it. ``tests/conftest.py`` offers the same as the ``codex_bin`` fixture.
"""

from __future__ import annotations

import pytest

from tools.codex_home import find_codex_bin

CODEX_BIN = find_codex_bin()
MISSING = "real codex not installed: run `make setup` or set CODEX_SIDECAR_TEST_CODEX_BIN"

needs_codex = [pytest.mark.codex, pytest.mark.skipif(CODEX_BIN is None, reason=MISSING)]
