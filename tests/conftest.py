"""Fixtures shared by every test folder (helpers live in ``tests/support/``)."""

from __future__ import annotations

import logging

import pytest

from tests.support.codex import CODEX_BIN, MISSING
from tests.support.pyenv_lock import lock_path, stale_lock, stamp

_PYENV_LOCK = lock_path()
_PYENV_BEFORE = stamp(_PYENV_LOCK)


def pytest_sessionfinish(session, exitstatus):
    """The run fails if it left pyenv's rehash lock behind (a login shell
    SIGKILLed mid-rehash): every later codex session with the real HOME
    would wait 60 s for it (tests/support/pyenv_lock.py)."""
    if stale_lock(_PYENV_LOCK, _PYENV_BEFORE):
        session.config.get_terminal_writer().line(
            f"FAILED: a stale pyenv rehash lock appeared during the run: {_PYENV_LOCK} "
            "(a test SIGKILLed a login shell mid-rehash; remove the file once no rehash runs)",
            red=True,
        )
        session.exitstatus = 1


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
