"""Test helpers: a scriptable engine (``RecordingEngine``) and host (``FakeHost``).

It records every call (method name and params, in call order), answers with
configurable results, and can be told to fail or hang in any method, or to
lack any method.  That is what a lifecycle test needs to assert "the sidecar
called bootstrap, then assemble, then after_turn" or "without after_turn the
sidecar falls back to ingest_batch", and to exercise the sidecar's error and
timeout paths, without timing assumptions: tests wait for calls with
:meth:`RecordingEngine.wait_for_call` and release hangs with events.

Engine authors may subclass it.  Behaviour goes in ``handle_<method>``
(``handle_assemble`` and so on); the public lifecycle methods are fixed so
that recording, failures and hangs always apply, and a subclass that
overrides one is refused at class creation.  Setting a lifecycle method to
``None`` in a subclass is allowed and means "this engine lacks it".

The engine is also a valid entry-point factory (its constructor takes the
config mapping); see :class:`RecordingEngine` for the keys it reads.

:class:`FakeHost` is an :class:`~engines.api.EngineHost` for testing engines
without a sidecar: a private temporary ``state_dir``, exact ``count_tokens``
(:mod:`engines.tokens`), and a ``complete`` whose answers are scripted (a
text, an :class:`~engines.api.EngineHostError`, or a hang).
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import trio

from .api import (
    AfterTurnParams,
    AssembleParams,
    AssembleResult,
    BootstrapParams,
    BootstrapResult,
    CompactParams,
    CompactResult,
    CompleteParams,
    CompleteResult,
    EngineHostError,
    EngineInfo,
    IngestBatchParams,
    IngestBatchResult,
    IngestParams,
    IngestResult,
    MaintainParams,
    MaintainResult,
    SessionResetParams,
)
from .engine import OPTIONAL_METHODS, REQUIRED_METHODS, BaseContextEngine

__all__ = ["HANG", "LIFECYCLE_METHODS", "Call", "FakeHost", "RecordingEngine"]

LIFECYCLE_METHODS: tuple[str, ...] = REQUIRED_METHODS + OPTIONAL_METHODS

_MISSING = object()


class Call(NamedTuple):
    """One recorded call; ``params`` is ``None`` for ``dispose``."""

    method: str
    params: Any


class _Failure:
    def __init__(self, exc: BaseException | Callable[[], BaseException], times: int | None) -> None:
        self.exc = exc
        self.remaining = times

    def take(self) -> BaseException | None:
        if self.remaining is not None:
            if self.remaining <= 0:
                return None
            self.remaining -= 1
        exc = self.exc
        # An exception instance re-raised twice accumulates tracebacks; a
        # factory gives a fresh one per call.
        return exc() if callable(exc) and not isinstance(exc, BaseException) else exc


class RecordingEngine(BaseContextEngine):
    """Records calls; results, failures, hangs and missing methods are scriptable.

    Constructor keywords (all optional):

    * ``info``: the :class:`EngineInfo` to report (default id ``recording``);
    * ``results``: ``{method: value}``, as for :meth:`set_result`;
    * ``omit``: method names the engine should lack (``getattr`` raises
      ``AttributeError`` for them, so even a ``hasattr`` test sees them absent).

    The config mapping may carry ``id``, ``name``, ``version``,
    ``owns_compaction``, ``turn_maintenance_mode`` and ``omit`` (a list), so an
    entry point ``recording = "engines.testkit:RecordingEngine"`` can be
    configured from a sidecar config file.  Keyword arguments win over config.
    """

    _omitted: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in LIFECYCLE_METHODS:
            if name in cls.__dict__ and cls.__dict__[name] is not None:
                raise TypeError(
                    f"{cls.__qualname__} overrides {name}(); override handle_{name}() instead so "
                    f"that calls are still recorded (or set {name} = None to leave it out)"
                )

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        info: EngineInfo | None = None,
        results: Mapping[str, Any] | None = None,
        omit: Iterable[str] = (),
    ) -> None:
        super().__init__(config)
        cfg = self.config
        self.info = info or EngineInfo(
            id=str(cfg.get("id", "recording")),
            name=str(cfg.get("name", "Recording test engine")),
            version=str(cfg.get("version", "0")),
            owns_compaction=bool(cfg.get("owns_compaction", False)),
            turn_maintenance_mode=cfg.get("turn_maintenance_mode", "foreground"),
        )
        omitted = frozenset(omit) | frozenset(cfg.get("omit", ()))
        unknown = omitted - set(LIFECYCLE_METHODS)
        if unknown:
            raise ValueError(f"cannot omit unknown methods {sorted(unknown)}; known: {LIFECYCLE_METHODS}")
        self._omitted = omitted
        self.calls: list[Call] = []
        self._results: dict[str, Any] = {}
        self._failures: dict[str, _Failure] = {}
        self._hangs: dict[str, trio.Event | None] = {}
        self._changed = trio.Event()
        for method, value in (results or {}).items():
            self.set_result(method, value)

    # -- hiding omitted methods -------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        # Only lifecycle names pay for the check; omitted ones truly vanish.
        if name in _LIFECYCLE_SET and name in object.__getattribute__(self, "_omitted"):
            raise AttributeError(f"{type(self).__name__} was configured without {name}()")
        return object.__getattribute__(self, name)

    # -- scripting --------------------------------------------------------

    @staticmethod
    def _check(method: str) -> None:
        if method not in _LIFECYCLE_SET:
            raise ValueError(f"unknown engine method {method!r}; known: {LIFECYCLE_METHODS}")

    def set_result(self, method: str, value: Any) -> None:
        """Answer ``method`` with ``value`` from now on.

        A callable is called with the params (with nothing for ``dispose``)
        and its return value, awaited if awaitable, is the answer; use it for
        answers that depend on the input.  To return a callable itself, wrap it
        in a lambda.
        """
        self._check(method)
        self._results[method] = value

    def fail(
        self,
        method: str,
        exc: BaseException | Callable[[], BaseException],
        *,
        times: int | None = None,
    ) -> None:
        """Raise ``exc`` (or a fresh one from a factory) from ``method``.

        ``times=None`` fails every call; ``times=n`` fails the next ``n``
        calls, then behaves normally.  The call is recorded before it fails.
        """
        self._check(method)
        self._failures[method] = _Failure(exc, times)

    def hang(self, method: str, release: trio.Event | None = None) -> None:
        """Make ``method`` block (cancellably) until ``release`` is set, or forever.

        The call is recorded before it blocks, so a test can
        ``await engine.wait_for_call(method)`` and then exercise the caller's
        timeout or cancellation.  After release the call completes normally.
        """
        self._check(method)
        self._hangs[method] = release

    def reset(self, method: str | None = None) -> None:
        """Drop scripted results, failures and hangs (of one method, or all)."""
        methods = LIFECYCLE_METHODS if method is None else (method,)
        for name in methods:
            self._check(name)
            self._results.pop(name, None)
            self._failures.pop(name, None)
            self._hangs.pop(name, None)

    # -- inspection -------------------------------------------------------

    @property
    def method_names(self) -> list[str]:
        """The names of the recorded calls, in call order."""
        return [call.method for call in self.calls]

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in order."""
        self._check(method)
        return [call for call in self.calls if call.method == method]

    async def wait_for_call(self, method: str, count: int = 1) -> Call:
        """Wait until ``method`` has been called ``count`` times; return that call.

        Wrap it in the test's own ``trio.fail_after`` if the call might never
        come; no timeout is built in, by design.
        """
        self._check(method)
        while True:
            matching = self.calls_to(method)
            if len(matching) >= count:
                return matching[count - 1]
            await self._changed.wait()

    # -- the lifecycle ----------------------------------------------------

    async def _dispatch(self, method: str, params: Any) -> Any:
        self.calls.append(Call(method, params))
        changed, self._changed = self._changed, trio.Event()
        changed.set()
        failure = self._failures.get(method)
        if failure is not None:
            exc = failure.take()
            if exc is not None:
                raise exc
        if method in self._hangs:
            release = self._hangs[method]
            if release is None:
                await trio.sleep_forever()
            else:
                await release.wait()
        value = self._results.get(method, _MISSING)
        if value is _MISSING:
            handler = getattr(self, f"handle_{method}")
            return await (handler() if params is None else handler(params))
        if callable(value):
            value = value() if params is None else value(params)
            if inspect.isawaitable(value):
                value = await value
        return value

    async def ingest(self, params: IngestParams) -> IngestResult:
        return await self._dispatch("ingest", params)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        return await self._dispatch("assemble", params)

    async def compact(self, params: CompactParams) -> CompactResult:
        return await self._dispatch("compact", params)

    async def bootstrap(self, params: BootstrapParams) -> BootstrapResult:
        return await self._dispatch("bootstrap", params)

    async def ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        return await self._dispatch("ingest_batch", params)

    async def after_turn(self, params: AfterTurnParams) -> None:
        return await self._dispatch("after_turn", params)

    async def maintain(self, params: MaintainParams) -> MaintainResult:
        return await self._dispatch("maintain", params)

    async def dispose(self) -> None:
        return await self._dispatch("dispose", None)

    async def on_session_reset(self, params: SessionResetParams) -> None:
        return await self._dispatch("on_session_reset", params)

    # -- default behaviour (override these in subclasses) -----------------

    async def handle_ingest(self, params: IngestParams) -> IngestResult:
        return IngestResult(ingested=True)

    async def handle_assemble(self, params: AssembleParams) -> AssembleResult:
        """Pass the messages through unchanged."""
        return AssembleResult(messages=list(params.messages), estimated_tokens=0)

    async def handle_compact(self, params: CompactParams) -> CompactResult:
        return CompactResult(ok=True, compacted=False, reason="recording engine does not compact")

    async def handle_bootstrap(self, params: BootstrapParams) -> BootstrapResult:
        return BootstrapResult(bootstrapped=True, imported_messages=0)

    async def handle_ingest_batch(self, params: IngestBatchParams) -> IngestBatchResult:
        return IngestBatchResult(ingested_count=len(params.messages))

    async def handle_on_session_reset(self, params: SessionResetParams) -> None:
        return None

    async def handle_after_turn(self, params: AfterTurnParams) -> None:
        return None

    async def handle_maintain(self, params: MaintainParams) -> MaintainResult:
        return MaintainResult(changed=False)

    async def handle_dispose(self) -> None:
        return None


_LIFECYCLE_SET = frozenset(LIFECYCLE_METHODS)


# --------------------------------------------------------------------------
# FakeHost
# --------------------------------------------------------------------------


class _Hang:
    """The :data:`HANG` marker's type."""

    def __repr__(self) -> str:
        return "HANG"


#: Script a :meth:`FakeHost.complete` call to block (cancellably) until the
#: caller's own deadline cancels it, or until :meth:`FakeHost.release_hangs`.
HANG: Any = _Hang()

#: What a scripted answer may be: a text, a :class:`CompleteResult`, an
#: exception (instance or class) to raise, :data:`HANG`, or a callable taking
#: the :class:`CompleteParams` and returning one of those (awaited if needed).
Answer = Any


class FakeHost:
    """An :class:`~engines.api.EngineHost` for tests.

    * ``state_dir``: the folder given, or a fresh 0700 temporary folder that
      :meth:`close` (or leaving the ``with`` block) removes;
    * ``count_tokens``: exact o200k counts from :mod:`engines.tokens` (the
      ``model`` argument is accepted and ignored, as every current model uses
      o200k);
    * ``complete``: answers from :meth:`push` (one call each, in order), else
      from :meth:`answer_with` (every call), else ``default_text``. Every call
      is recorded in ``calls`` before it is answered.
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, default_text: str = "fake summary") -> None:
        self._owned = state_dir is None
        self.state_dir: str = tempfile.mkdtemp(prefix="engine-state-") if state_dir is None else os.fspath(state_dir)
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.default_text = default_text
        self.calls: list[CompleteParams] = []
        self._queue: deque[Answer] = deque()
        self._always: Answer | None = None
        self._release = trio.Event()

    # -- scripting ---------------------------------------------------------

    def push(self, *answers: Answer) -> None:
        """Answer the next calls with these, one each, before anything else."""
        self._queue.extend(answers)

    def answer_with(self, answer: Answer | None) -> None:
        """Answer every call (after the pushed ones) with ``answer``; None resets."""
        self._always = answer

    def fail_all(self, exc: BaseException | type[BaseException] = EngineHostError) -> None:
        """Make every later call raise ``exc`` (default :class:`EngineHostError`)."""
        self._always = exc

    def hang_all(self) -> None:
        """Make every later call hang until cancelled or released."""
        self._always = HANG

    def release_hangs(self) -> None:
        """Let the calls hanging now go on (they then answer ``default_text``)."""
        self._release.set()
        self._release = trio.Event()

    # -- the EngineHost interface -----------------------------------------

    def count_tokens(self, text: str, model: str | None = None) -> int:
        from .tokens import count_tokens

        return count_tokens(text)

    async def complete(self, params: CompleteParams) -> CompleteResult:
        self.calls.append(params)
        if self._queue:
            answer = self._queue.popleft()
        elif self._always is not None:
            answer = self._always
        else:
            answer = self.default_text
        if callable(answer) and not isinstance(answer, type):
            answer = answer(params)
            if inspect.isawaitable(answer):
                answer = await answer
        if answer is HANG:
            await self._release.wait()
            answer = self.default_text
        if isinstance(answer, BaseException) or (isinstance(answer, type) and issubclass(answer, BaseException)):
            raise answer("scripted failure") if isinstance(answer, type) else answer
        if isinstance(answer, CompleteResult):
            return answer
        if not isinstance(answer, str):
            raise TypeError(f"a scripted answer must be a str, CompleteResult, exception or HANG, not {type(answer).__name__}")
        return CompleteResult(text=answer)

    # -- clean-up ------------------------------------------------------------

    def close(self) -> None:
        """Remove the temporary ``state_dir`` (a folder given by the caller is kept)."""
        if self._owned:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> FakeHost:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
