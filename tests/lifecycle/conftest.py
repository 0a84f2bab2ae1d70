"""The lifecycle suite's projection modes.

Tests that take the ``sidecar`` fixture run once per mode in ``MODES``:
``per_turn`` and ``auto``, the default users get (``delta`` unless the engine
asks otherwise). A test whose assertion holds in one mode only carries
``@pytest.mark.only_mode("per_turn", reason=...)``: its other
parametrizations still appear, skipped with that reason.
"""

from __future__ import annotations

import msgspec
import pytest

from tests.support.lifecycle import sidecar as open_sidecar

MODES = ("per_turn", "auto")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "only_mode(mode, reason): the test's assertions hold in this projection mode only (tests/lifecycle)"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("only_mode")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None or "projection_mode" not in callspec.params:
            continue
        (mode,) = marker.args
        if callspec.params["projection_mode"] != mode:
            item.add_marker(pytest.mark.skip(reason=f"{mode} only: {marker.kwargs['reason']}"))


@pytest.fixture(params=MODES)
def projection_mode(request) -> str:
    return request.param


@pytest.fixture
def sidecar(projection_mode):
    """``tests.support.lifecycle.sidecar`` with the lifecycle in ``projection_mode``
    (given ``options`` keep everything else)."""

    def open_in_mode(tmp_path, engine, *, options=None, **kwargs):
        if options is not None:
            options = msgspec.structs.replace(options, projection_mode=projection_mode)
        return open_sidecar(tmp_path, engine, options=options, mode=projection_mode, **kwargs)

    return open_in_mode
