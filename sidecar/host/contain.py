"""An engine's ``BaseException`` kept inside the call that raised it.

Every engine call fails open on ``Exception``. An engine that raises
``SystemExit`` (a library calling ``sys.exit``), ``KeyboardInterrupt``,
``GeneratorExit`` or a ``BaseExceptionGroup`` of them would go past those
handlers and end the relay with the client's turn in flight. :func:`contained`
turns such an exception into an :class:`EngineBaseException`, an ordinary
``Exception`` whose class bears the original's name (the logs say
``SystemExit``), so the same handlers fail open and log it.

A trio cancellation is the one ``BaseException`` left alone: it is how a
deadline (``trio.fail_after``) or the sidecar's shutdown stops the call, and
swallowing it would break both.

``KeyboardInterrupt`` is contained like ``SystemExit``: while the relay runs,
SIGINT goes to codex (``sidecar.child.FORWARDED_SIGNALS``) and the relay ends
with it, so trio never raises a person's Ctrl-C inside an engine call. One
that comes out of an engine is the engine's own doing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import trio

T = TypeVar("T")


class EngineBaseException(Exception):
    """An engine's ``BaseException`` (not a cancellation), made an ``Exception``."""


_classes: dict[str, type[EngineBaseException]] = {}


def is_cancellation(exc: BaseException) -> bool:
    """A trio cancellation, or a group holding nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


def as_exception(exc: BaseException) -> EngineBaseException:
    """``exc`` as an ``Exception`` named after it (``SystemExit``...)."""
    name = type(exc).__name__
    cls = _classes.get(name)
    if cls is None:
        cls = _classes[name] = type(name, (EngineBaseException,), {"__module__": __name__})
    return cls(name)


def raise_contained(exc: BaseException) -> NoReturn:
    """Raise ``exc``, caught out of an engine call, as its caller must see
    it: a cancellation as it is, anything else as an :class:`EngineBaseException`.
    For a caller that awaits the engine itself (``except Exception: raise``,
    then ``except BaseException as exc: raise_contained(exc)``), so the
    common path, an answer, never comes here."""
    if is_cancellation(exc):
        raise exc
    raise as_exception(exc) from exc


async def contained(awaitable: Awaitable[T]) -> T:
    """Await an engine call; a ``BaseException`` out of it that is not a
    cancellation comes out as an :class:`EngineBaseException`."""
    try:
        return await awaitable
    except Exception:
        raise
    except BaseException as exc:
        raise_contained(exc)


def contained_sync(fn: Callable[[], T]) -> T:
    """:func:`contained` for an engine's synchronous method (``tools()``)."""
    try:
        return fn()
    except Exception:
        raise
    except BaseException as exc:
        raise_contained(exc)
