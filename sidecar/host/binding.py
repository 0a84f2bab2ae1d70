"""The :class:`~engines.api.EngineHost` the sidecar gives an engine, and ``bind``.

* ``state_dir``: ``<state dir>/engines/<engine id>/``, made with mode 0700
  (and set to it if it existed);
* ``count_tokens``: exact o200k counts from :mod:`engines.tokens` (every
  current OpenAI model uses o200k, so ``model`` is accepted and not used);
  a missing tokenizer raises ``TokenizerUnavailable``, never an estimate;
* ``complete``: :class:`~.completion.Completions`, once the relay runs
  (before that, and with no app-server, it raises ``EngineHostError``).

``bind`` is called once, after the engine loads and before the relay reads
the client's first line, under the engine deadline. An engine whose
``bind`` raises or overruns runs as ``legacy`` (as one that fails to load
does): an engine that asked for a host and did not get one is in a state
nobody tested, while ``legacy`` keeps the client's turns exactly as they
would be without the sidecar.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import trio

from engines import CompleteParams, CompleteResult, EngineHostError, optional_method
from engines.tokens import count_tokens

from ..store.private import private_dir
from .completion import Completions
from .contain import contained

log = logging.getLogger("codex_sidecar.host")

_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


def engine_state_dir(state_dir: str | os.PathLike[str], engine_id: str) -> Path:
    """``<state_dir>/engines/<engine id>`` (the id made safe for a file
    name), created with mode 0700."""
    name = _SAFE_ID.sub("_", engine_id).lstrip(".") or "_"
    path = Path(state_dir) / "engines" / name
    private_dir(path)  # each missing folder 0700, the state dir itself included
    os.chmod(path, 0o700)  # the engine's own folder stays private even if loosened
    return path


class SidecarHost:
    """What ``bind(host)`` hands the engine."""

    def __init__(self, state_dir: str, completions: Completions | None = None) -> None:
        """``completions``: how ``complete`` asks the relay's app-server
        (None: there is none, e.g. ``doctor``'s bind check)."""
        self.state_dir = state_dir
        self.completions = completions

    def count_tokens(self, text: str, model: str | None = None) -> int:
        return count_tokens(text)

    async def complete(self, params: CompleteParams) -> CompleteResult:
        if self.completions is None:
            raise EngineHostError("the sidecar has no app-server to ask")
        return await self.completions.complete(params)


_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]*@", re.I)


def bind_failure(exc: BaseException) -> str:
    """What the engine said when its bind failed (its first line: "psycopg is
    not installed: pip install ..."), a URL's password masked; the error's
    type for an exception with no words (a deadline: ``TooSlowError``)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return _URL_PASSWORD.sub(r"\1***@", line)[:500]


async def bind_engine(engine: Any, host: SidecarHost, deadline: float) -> bool:
    """Give the engine its host (if it has ``bind``). False: it raised or
    overran the deadline, and the caller runs ``legacy`` instead."""
    bind = optional_method(engine, "bind")
    if bind is None:
        return True
    engine_id = getattr(getattr(engine, "info", None), "id", "?")
    try:
        with trio.fail_after(deadline):
            await contained(bind(host))
    except Exception as exc:  # TooSlowError included
        log.error(
            "context engine bind failed; running legacy",
            extra={"fields": {"engineId": engine_id, "error": type(exc).__name__, "message": bind_failure(exc)}},
        )
        return False
    log.info("context engine bound to the host", extra={"fields": {"engineId": engine_id, "stateDir": host.state_dir}})
    return True
