"""Fixtures for the relay's own tests: a router wired to collecting sinks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sidecar.relay import ProxyOptions, Router


class Sink:
    """Collects what the router puts out, as the lines a reader would see."""

    def __init__(self) -> None:
        self.data = bytearray()

    def put_line(self, line: bytes) -> bool:
        self.data += line + b"\n"
        return True

    def put(self, data: bytes) -> bool:
        self.data += data
        return True

    def put_raw(self, data: bytes, end: bool) -> bool:
        self.data += data
        return True

    def lines(self) -> list[bytes]:
        return bytes(self.data).split(b"\n")[:-1]

    def take(self) -> list[bytes]:
        lines = self.lines()
        self.data.clear()
        return lines


class Wired:
    """A router between two sinks; ``spawned`` holds what it asked to run."""

    def __init__(self, **kwargs: Any) -> None:
        self.child = Sink()
        self.client = Sink()
        self.spawned: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        settings = {k: kwargs.pop(k) for k in ("max_line", "engine_reads") if k in kwargs}
        self.router = Router(self.child, self.client, spawn=lambda fn, *args: self.spawned.append((fn, args)), options=ProxyOptions(**settings), **kwargs)


@pytest.fixture(scope="session")
def wire() -> Callable[..., Wired]:
    """``wire(**router_kwargs)``: a fresh router between two collecting sinks."""
    return Wired


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of the sidecar's loggers, whatever ``setup_logging`` did before."""
    sidecar_logger = logging.getLogger("codex_sidecar")
    saved = sidecar_logger.propagate, sidecar_logger.level, list(sidecar_logger.handlers)
    sidecar_logger.propagate = True
    sidecar_logger.handlers[:] = []
    caplog.set_level(logging.DEBUG, logger="codex_sidecar")
    yield caplog
    sidecar_logger.propagate, sidecar_logger.level, sidecar_logger.handlers[:] = saved[0], saved[1], saved[2]
