"""The ``legacy`` engine: "no context engine", as an object.

Selecting ``legacy`` tells the sidecar to run *no* context-engine lifecycle at
all and to relay traffic unchanged, which keeps Codex behaving exactly as it
does without the sidecar (the spec's compatibility rule).  The sidecar checks
:func:`is_legacy` and skips bootstrap, assemble, projection, post-turn
ingestion and maintenance.

The methods still behave sanely, mirroring OpenClaw's own legacy engine, so
that code which calls them anyway (tests, tools, a future caller that forgot
the check) gets a harmless pass-through rather than an error: ``assemble``
returns the messages unchanged, ``ingest`` stores nothing, ``compact`` leaves
compaction to Codex.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

from .api import AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestParams, IngestResult
from .engine import BaseContextEngine

__all__ = ["BUILTIN_DISTRIBUTION", "LEGACY_ENGINE_ID", "LegacyEngine", "is_legacy"]

LEGACY_ENGINE_ID = "legacy"

# The distribution that ships the built-in engines; always trusted by the loader.
BUILTIN_DISTRIBUTION = "openclaw-codex-sidecar"


_DIST_INFO_PREFIX = BUILTIN_DISTRIBUTION.replace("-", "_") + "-"


@functools.cache
def _builtin_version() -> str:
    """Version of the sidecar distribution, or a local marker when not installed.

    Read from the name of the first ``openclaw_codex_sidecar-<version>.dist-info``
    folder on ``sys.path`` (what a wheel or an editable install writes), so a
    built-in engine's start does not import :mod:`importlib.metadata` (~9 ms of
    every session's start-up); asked of importlib.metadata when there is none.
    """
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:  # a zip, a folder that went away
            continue
        for name in sorted(names):
            if name.startswith(_DIST_INFO_PREFIX) and name.endswith(".dist-info"):
                return name[len(_DIST_INFO_PREFIX) : -len(".dist-info")]
    import importlib.metadata

    try:
        return importlib.metadata.version(BUILTIN_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class LegacyEngine(BaseContextEngine):
    """Pass-through engine whose presence means "do not run the lifecycle"."""

    #: Read by :func:`is_legacy`; a class attribute so it survives subclassing.
    passthrough: ClassVar[bool] = True

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.info = EngineInfo(
            id=LEGACY_ENGINE_ID,
            name="Legacy (no context engine)",
            version=_builtin_version(),
            owns_compaction=False,
        )

    async def ingest(self, params: IngestParams) -> IngestResult:
        """Nothing is stored: the OpenClaw transcript is the only history."""
        return IngestResult(ingested=False)

    async def assemble(self, params: AssembleParams) -> AssembleResult:
        """Return the pipeline's messages unchanged (a fresh list, same items).

        ``estimated_tokens`` is 0, as in OpenClaw's legacy engine: legacy makes
        no estimate, and an invented one would mislead budget decisions.
        """
        return AssembleResult(messages=list(params.messages), estimated_tokens=0)

    async def compact(self, params: CompactParams) -> CompactResult:
        """Decline politely: Codex's native compaction is the only compaction."""
        return CompactResult(
            ok=True,
            compacted=False,
            reason="legacy engine does not compact; Codex native compaction applies",
        )


def is_legacy(engine: object) -> bool:
    """Whether the sidecar must skip the whole lifecycle for ``engine``.

    True for :class:`LegacyEngine` (and subclasses) and for any engine whose
    ``info.id`` is ``legacy``; the loader never lets a third-party
    distribution claim that id, so the id test cannot be abused to disable a
    real engine by accident.
    """
    if getattr(type(engine), "passthrough", False) is True:
        return True
    info = getattr(engine, "info", None)
    return getattr(info, "id", None) == LEGACY_ENGINE_ID
