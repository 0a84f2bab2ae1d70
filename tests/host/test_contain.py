"""An engine's BaseException becomes an Exception; a cancellation stays one."""

from __future__ import annotations

import pytest
import trio

from sidecar.host.contain import EngineBaseException, contained, contained_sync, is_cancellation
from sidecar.host.engine_tools import engine_specs


def caught(fn) -> BaseException:
    """What ``fn`` raised, whatever it was: a KeyboardInterrupt that got
    through must fail this test, not end the test session."""
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the point of the test
        return exc
    raise AssertionError("nothing raised")


@pytest.mark.parametrize(
    "exc",
    [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), BaseExceptionGroup("g", [SystemExit(1), ValueError()])],
    ids=lambda e: type(e).__name__,
)
def test_a_base_exception_out_of_an_engine_comes_out_as_an_exception_named_after_it(exc):
    async def engine_call():
        raise exc

    async def main():
        await contained(engine_call())

    got = caught(lambda: trio.run(main))
    assert isinstance(got, EngineBaseException) and type(got).__name__ == type(exc).__name__
    assert got.__cause__ is exc

    def sync():
        raise exc

    got = caught(lambda: contained_sync(sync))
    assert isinstance(got, EngineBaseException) and got.__cause__ is exc


def test_exceptions_pass_unchanged():
    error = ValueError("x")

    def sync():
        raise error

    assert caught(lambda: contained_sync(sync)) is error


async def test_a_deadline_still_cancels_an_engine_call():
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(0.01):
            await contained(trio.sleep_forever())


def test_only_pure_cancellations_count_as_cancellations():
    async def main():
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled as cancelled:
                assert is_cancellation(cancelled)
                assert is_cancellation(BaseExceptionGroup("g", [cancelled]))
                assert not is_cancellation(BaseExceptionGroup("g", [cancelled, SystemExit()]))
                raise

    trio.run(main)
    assert not is_cancellation(SystemExit())


def test_an_engine_whose_tools_exit_runs_without_tools():
    class Engine:
        def tools(self):
            raise SystemExit(1)

        async def call_tool(self, params):
            return None

    assert engine_specs(Engine()) == []


async def test_binding_an_engine_that_exits_falls_back_to_legacy(tmp_path):
    from sidecar.host import SidecarHost, bind_engine

    class Engine:
        async def bind(self, host):
            raise SystemExit(2)

    assert await bind_engine(Engine(), SidecarHost(str(tmp_path)), 5.0) is False
