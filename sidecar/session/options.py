"""The lifecycle's settings (``[sidecar]`` keys and ``CODEX_SIDECAR_*``)."""

from __future__ import annotations

import msgspec

PROJECTION_MODES = ("auto", "per_turn", "epoch", "delta")


class LifecycleOptions(msgspec.Struct):
    engine_deadline: float = 20.0
    """Seconds one engine call may take before the sidecar falls back."""
    token_budget: int | None = None
    """An explicit budget for the engine; None: the window minus ``token_reserve``."""
    token_reserve: int = 20_000
    """Tokens the default budget keeps out of the model's window (OpenClaw's reserve)."""
    session_key_template: str = "{thread_id}"
    citations_mode: str | None = None
    """OpenClaw's ``memory.citations`` (``auto``, ``on``, ``off``), passed to ``assemble``."""
    previous_turn_wait: float = 120.0
    """How long a turn waits for the previous turn's finalisation at most."""
    spare_wait: float = 0.15
    """fresh: how long a rebuild waits for a spare whose ``thread/start`` is
    on its way (Codex answers one in 11-15 ms) before it reverts in place
    instead (23-43 ms, then a cold first request)."""
    stale_slack: float = 0.10
    """delta: content the engine dropped may stay in the thread, instead of a
    rebuild, while it is at most this share of what the thread holds. A
    rebuild costs Codex a new session (~36 ms of CPU, a login-shell
    snapshot) and a cold first request, and costs a provider's prompt cache
    the whole history once; stale content costs its tokens on each request,
    cached after the first (docs/projection.md, "Stale content and the slack")."""
    stale_floor_chars: int = 4000
    """...and always this many characters (about 1,000 tokens), so a young
    thread, where 10% is less than one recalled snippet, does not rebuild on
    every turn. ``stale_slack`` 0 means exact: rebuild on any drop."""
    projection_mode: str = "auto"
    """``per_turn``, ``epoch``, ``delta``, or ``auto``: what the engine's
    assemble result asks for (``thread_bootstrap`` means epoch, an explicit
    ``per_turn`` means per turn), else ``delta``."""
    rebuild: str = "fresh"
    """``fresh``: a rebuild switches the client's thread onto a spare Codex
    thread (``sidecar.rebuild.fresh``), or reverts in place when it cannot;
    ``revert``: it always reverts the Codex thread in place."""
