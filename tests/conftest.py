"""Fixtures shared by every test folder (helpers live in ``tests/support/``)."""

from __future__ import annotations

import logging

import pytest

from tests.support.codex import CODEX_BIN, MISSING


@pytest.fixture
def codex_bin() -> str:
    """The real codex binary's path; the test is skipped when it is not installed."""
    if CODEX_BIN is None:
        pytest.skip(MISSING)
    return CODEX_BIN


@pytest.fixture
def logs(caplog):
    """Every log record of every logger at DEBUG, whatever setup_logging did before."""
    sidecar_logger = logging.getLogger("codex_sidecar")
    saved = sidecar_logger.propagate, sidecar_logger.level, list(sidecar_logger.handlers)
    sidecar_logger.propagate = True
    sidecar_logger.handlers[:] = []
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="codex_sidecar")
    yield caplog
    sidecar_logger.propagate, sidecar_logger.level, sidecar_logger.handlers[:] = saved[0], saved[1], saved[2]
