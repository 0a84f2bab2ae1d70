"""Finding, trusting and instantiating context engines.

Engines are ordinary Python distributions that declare an entry point in the
group ``openclaw.context_engines``: the entry point's name is the engine id and
its value a factory ``factory(config) -> engine``.  Discovery uses
:mod:`importlib.metadata` only, so anything importable with a ``*.dist-info``
(or ``*.egg-info``) on ``sys.path`` is seen, installed or not.

Trust
-----
Loading an engine imports and runs its code inside the sidecar, which sees
every prompt.  :func:`load_engine` therefore takes an ``allowlist`` of
distribution names (compared after PEP 503 normalisation):

* ``None``: no allowlist configured; every installed distribution may supply
  an engine, and a warning names the distribution that did (as OpenClaw warns
  when ``plugins.allow`` is empty);
* a collection (possibly empty): only those distributions, plus the sidecar's
  own distribution, which ships the built-ins and is always trusted.

A built-in id (``legacy``, ``lossless``, ...) always resolves to the built-in,
even if another distribution registers the same name: otherwise any installed
package could silently replace the "do nothing" engine.  A built-in is loaded
without reading any entry point (importing :mod:`importlib.metadata` and
reading every distribution's metadata is ~15 ms of each session's start-up);
``codex-sidecar engines`` and ``doctor`` show a distribution that registers a
built-in id, and that it is ignored.

Failures
--------
Every way an engine can fail to load (unknown id, refused by the allowlist,
ambiguous id, import error, factory error, wrong shape) raises
:class:`EngineLoadError` with a message meant for the operator.
:func:`load_engine_or_legacy` turns any such failure into a loud warning and
the legacy engine, because a broken plugin must not take the Codex session
down: the spec's compatibility rule is that Codex then behaves as without
an engine.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, cast

import msgspec

from .engine import EXTENSION_METHODS, OPTIONAL_METHODS, REQUIRED_METHODS, ContextEngine
from .legacy import BUILTIN_DISTRIBUTION, LEGACY_ENGINE_ID, LegacyEngine, _builtin_version

if TYPE_CHECKING:
    import importlib.metadata

__all__ = [
    "BUILTIN_ENGINES",
    "ENTRY_POINT_GROUP",
    "EngineEntry",
    "EngineLoadError",
    "list_engines",
    "load_engine",
    "load_engine_or_legacy",
    "validate_engine",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "openclaw.context_engines"

#: Built-in engine ids and their factories: what a session loads for these
#: ids (without reading any entry point), and what the sidecar's own
#: distribution declares in pyproject.toml (kept equal by a test), which
#: ``list_engines`` shows.
BUILTIN_ENGINES: Mapping[str, str] = {
    LEGACY_ENGINE_ID: "engines.legacy:LegacyEngine",
    "transcript-budget": "engines.budget:TranscriptBudgetEngine",
    "lossless": "engines.lossless:LosslessEngine",
}

_TURN_MAINTENANCE_MODES = ("foreground", "background")


class EngineLoadError(Exception):
    """An engine could not be found, trusted, built or validated."""


class EngineEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One discoverable engine, as shown by ``list_engines()``.

    ``distribution`` and ``version`` are ``None`` when the entry point came
    from metadata without a distribution (rare custom finders).
    """

    id: str
    distribution: str | None
    version: str | None
    value: str
    builtin: bool = False


def _normalize(name: str) -> str:
    """PEP 503 name normalisation, so ``My_Engine`` matches ``my-engine``."""
    return re.sub(r"[-_.]+", "-", name).lower()


_BUILTIN_NORMALIZED = _normalize(BUILTIN_DISTRIBUTION)


def _discover() -> list[tuple[EngineEntry, importlib.metadata.EntryPoint]]:
    """All entry points of the group, plus built-ins the metadata lacks."""
    import importlib.metadata  # ~9 ms: when an engine is looked for, not when the package is imported

    found: list[tuple[EngineEntry, importlib.metadata.EntryPoint]] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        dist_name: str | None = None
        version: str | None = None
        if dist is not None:
            try:
                dist_name = dist.metadata["Name"]
                version = dist.version
            except Exception:  # broken METADATA must not hide other engines
                dist_name = getattr(dist, "name", None)
        builtin = dist_name is not None and _normalize(dist_name) == _BUILTIN_NORMALIZED
        found.append(
            (
                EngineEntry(
                    id=ep.name, distribution=dist_name, version=version, value=ep.value, builtin=builtin
                ),
                ep,
            )
        )
    for engine_id, value in BUILTIN_ENGINES.items():
        if not any(entry.builtin and entry.id == engine_id for entry, _ in found):
            ep = importlib.metadata.EntryPoint(name=engine_id, value=value, group=ENTRY_POINT_GROUP)
            found.append(
                (
                    EngineEntry(
                        id=engine_id,
                        distribution=BUILTIN_DISTRIBUTION,
                        version=_builtin_version(),
                        value=value,
                        builtin=True,
                    ),
                    ep,
                )
            )
    found.sort(key=lambda pair: (pair[0].id, not pair[0].builtin, pair[0].distribution or ""))
    return found


def list_engines() -> list[EngineEntry]:
    """Every engine that could be loaded, sorted by id (built-ins included).

    The list is not filtered by any allowlist: it is what an operator needs to
    see to decide what to trust.  Several entries may share an id when more
    than one distribution registers it.
    """
    return [entry for entry, _ in _discover()]


def _is_trusted(entry: EngineEntry, allowlist: Collection[str] | None) -> bool:
    if entry.builtin or allowlist is None:
        return True
    if entry.distribution is None:
        return False
    return _normalize(entry.distribution) in {_normalize(name) for name in allowlist}


def _describe(entry: EngineEntry) -> str:
    dist = entry.distribution or "<unknown distribution>"
    version = f" {entry.version}" if entry.version else ""
    return f"{entry.id!r} ({entry.value} from {dist}{version})"


def _is_async_callable(obj: Any) -> bool:
    """True for ``async def`` functions/methods and objects with an async ``__call__``."""
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(type(obj), "__call__", None)  # noqa: B004 - the class's __call__, to see whether it is async
    return call is not None and inspect.iscoroutinefunction(call)


def validate_engine(engine: object, expected_id: str | None = None) -> ContextEngine:
    """Check that ``engine`` has the contract's shape; return it unchanged.

    Collects every problem before raising, so an author sees them all at once.
    Optional methods may be missing or ``None``, but if present they must be
    async too (a sync ``after_turn`` would otherwise fail only after a turn).
    An ``info.id`` different from the entry-point name is only warned about:
    an id is a label, and refusing would break harmless aliases.
    """
    problems: list[str] = []
    try:
        info = engine.info  # type: ignore[attr-defined]  # an object of unknown shape, being checked
    except Exception as exc:  # a missing attribute or a failing property
        info = None
        problems.append(f"has no usable 'info' attribute ({type(exc).__name__}: {exc})")
    if info is not None:
        for field in ("id", "name", "version"):
            value = getattr(info, field, None)
            if not isinstance(value, str):
                problems.append(f"info.{field} must be a str, got {type(value).__name__}")
            elif field != "version" and not value:
                problems.append(f"info.{field} must not be empty")
        owns = getattr(info, "owns_compaction", False)
        if not isinstance(owns, bool):
            problems.append(f"info.owns_compaction must be a bool, got {type(owns).__name__}")
        mode = getattr(info, "turn_maintenance_mode", "foreground")
        if mode not in _TURN_MAINTENANCE_MODES:
            problems.append(f"info.turn_maintenance_mode must be one of {_TURN_MAINTENANCE_MODES}, got {mode!r}")
    for name in REQUIRED_METHODS:
        method = getattr(engine, name, None)
        if method is None:
            problems.append(f"required method {name}() is missing")
        elif not _is_async_callable(method):
            problems.append(f"{name}() must be an async method (async def)")
    for name in OPTIONAL_METHODS + EXTENSION_METHODS:
        method = getattr(engine, name, None)
        if method is None:
            continue
        if name == "tools":  # the one synchronous optional method
            if not callable(method) or _is_async_callable(method):
                problems.append("optional method tools() must be a plain (not async) method or absent")
        elif not _is_async_callable(method):
            problems.append(f"optional method {name}() must be async (async def) or absent")
    if problems:
        raise EngineLoadError(
            f"engine object {type(engine).__qualname__} does not have the context-engine shape:\n  - "
            + "\n  - ".join(problems)
        )
    actual_id = getattr(info, "id", None)
    if expected_id is not None and actual_id != expected_id:
        logger.warning(
            "context engine loaded as %r reports info.id %r; using it under %r",
            expected_id,
            actual_id,
            expected_id,
        )
    return cast(ContextEngine, engine)  # validated above, member by member


def _import_value(value: str) -> Any:
    """The object an entry point's value (``module:attr.attr``) names, as
    ``EntryPoint.load`` finds it, without :mod:`importlib.metadata`."""
    module, _, attrs = value.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for name in filter(None, attrs.strip().split(".")):
        obj = getattr(obj, name)
    return obj


def _select(engine_id: str, allowlist: Collection[str] | None) -> tuple[EngineEntry, Callable[[], Any]]:
    """The entry to load for ``engine_id`` and what imports its factory."""
    if engine_id in BUILTIN_ENGINES:
        value = BUILTIN_ENGINES[engine_id]
        entry = EngineEntry(id=engine_id, distribution=BUILTIN_DISTRIBUTION, version=_builtin_version(), value=value, builtin=True)
        return entry, lambda: _import_value(value)
    candidates = [pair for pair in _discover() if pair[0].id == engine_id]
    if not candidates:
        known = sorted({entry.id for entry, _ in _discover()})
        raise EngineLoadError(
            f"no context engine {engine_id!r} is installed (entry point group {ENTRY_POINT_GROUP!r}); "
            f"available: {', '.join(known) or 'none'}"
        )
    trusted = [pair for pair in candidates if _is_trusted(pair[0], allowlist)]
    if not trusted:
        offered = ", ".join(sorted({entry.distribution or "<unknown>" for entry, _ in candidates}))
        allowed = ", ".join(sorted(allowlist or ())) or "nothing but the built-ins"
        raise EngineLoadError(
            f"context engine {engine_id!r} is provided by distribution(s) {offered}, which the engine "
            f"allowlist does not trust (it allows: {allowed}); add the distribution name to the "
            f"allowlist to load it"
        )
    if len(trusted) > 1:
        raise EngineLoadError(
            f"context engine id {engine_id!r} is registered by more than one trusted distribution: "
            + "; ".join(_describe(entry) for entry, _ in trusted)
            + ". Uninstall one or narrow the allowlist."
        )
    entry, ep = trusted[0]
    if allowlist is None:
        logger.warning(
            "loading context engine %s with no engine allowlist configured: any installed "
            "distribution may supply engines; set an allowlist to restrict this",
            _describe(entry),
        )
    return entry, ep.load


def load_engine(
    engine_id: str,
    config: Mapping[str, Any] | None = None,
    allowlist: Collection[str] | None = None,
) -> ContextEngine:
    """Find, trust-check, build and validate the engine ``engine_id``.

    ``config`` is the engine's table from the sidecar config (a private copy
    is handed to the factory, so an engine cannot alter the sidecar's view).
    ``allowlist`` is described in the module docstring.  The factory must be
    synchronous: engines needing async set-up do it lazily in ``bootstrap``
    or their first call, because loading happens before the trio run.

    Raises :class:`EngineLoadError` for every failure, chained to the cause.
    """
    if not isinstance(engine_id, str) or not engine_id:
        raise EngineLoadError(f"engine id must be a non-empty string, got {engine_id!r}")
    entry, load = _select(engine_id, allowlist)
    where = _describe(entry)
    try:
        factory = load()
    except Exception as exc:
        raise EngineLoadError(f"cannot import context engine {where}: {type(exc).__name__}: {exc}") from exc
    if not callable(factory):
        raise EngineLoadError(f"context engine {where} does not name a callable factory")
    try:
        engine = factory(dict(config or {}))
    except Exception as exc:
        raise EngineLoadError(
            f"the factory of context engine {where} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if inspect.isawaitable(engine):
        close = getattr(engine, "close", None)
        if callable(close):
            close()  # avoid a "coroutine was never awaited" warning
        raise EngineLoadError(
            f"the factory of context engine {where} is async; it must return the engine directly"
        )
    try:
        return validate_engine(engine, expected_id=engine_id)
    except EngineLoadError as exc:
        raise EngineLoadError(f"context engine {where}: {exc}") from None


def load_engine_or_legacy(
    engine_id: str | None,
    config: Mapping[str, Any] | None = None,
    allowlist: Collection[str] | None = None,
) -> ContextEngine:
    """Like :func:`load_engine`, but never fails: falls back to :class:`LegacyEngine`.

    ``None``, ``""`` and ``"legacy"`` select the legacy engine without a
    warning.  Any failure to load another engine is logged at WARNING level
    (reaching stderr through the sidecar's logging, or Python's last-resort
    handler when logging is not configured) with the reason and the
    consequence, then the legacy engine is returned.
    """
    if not engine_id or engine_id == LEGACY_ENGINE_ID:
        return LegacyEngine(config if engine_id else None)
    try:
        return load_engine(engine_id, config, allowlist)
    except Exception as exc:
        logger.warning(
            "CONTEXT ENGINE %r NOT LOADED, falling back to 'legacy': the sidecar will relay Codex "
            "traffic unchanged and no context engine will see this session.\n  reason: %s",
            engine_id,
            exc,
        )
        return LegacyEngine()
