"""OpenClaw context engines for the Codex sidecar.

The public plugin contract (``ENGINE_API.md``) lives in :mod:`engines.api`;
discovery and loading in :mod:`engines.loader`; the built-in ``legacy``
engine in :mod:`engines.legacy`; a scriptable test engine in
:mod:`engines.testkit` (imported lazily by users, not here, so that loading
the contract never imports test helpers).  Every contract name is re-exported
here: ``from engines import AssembleParams, BaseContextEngine, load_engine``.
"""

from .api import *  # noqa: F403 - the contract is re-exported wholesale
from .api import __all__ as _api_all
from .engine import *  # noqa: F403
from .engine import __all__ as _engine_all
from .legacy import BUILTIN_DISTRIBUTION, LEGACY_ENGINE_ID, LegacyEngine, is_legacy
from .loader import (
    BUILTIN_ENGINES,
    ENTRY_POINT_GROUP,
    EngineEntry,
    EngineLoadError,
    list_engines,
    load_engine,
    load_engine_or_legacy,
    validate_engine,
)

__all__ = [
    *_api_all,
    *_engine_all,
    "BUILTIN_DISTRIBUTION",
    "BUILTIN_ENGINES",
    "ENTRY_POINT_GROUP",
    "LEGACY_ENGINE_ID",
    "EngineEntry",
    "EngineLoadError",
    "LegacyEngine",
    "is_legacy",
    "list_engines",
    "load_engine",
    "load_engine_or_legacy",
    "validate_engine",
]
