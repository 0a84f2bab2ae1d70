"""What the relay notices in passing for ``sidecar/status``: Codex's version
and the threads it has seen. Response and notification hooks that never
change a message, installed by the router from the relay's rows of the
method table (:data:`sidecar.relay.router.RELAY_ROWS`)."""

from __future__ import annotations

import re

from .messages import Decision, Message, PendingRequest

_USER_AGENT_VERSION = re.compile(r"/(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)")


def codex_version_from_user_agent(user_agent: str) -> str | None:
    """``"codex_cli_rs/0.169.0 (Linux ...)"`` -> ``"0.169.0"`` (what OpenClaw checks)."""
    m = _USER_AGENT_VERSION.search(user_agent)
    return m.group(1) if m else None


class Observed:
    def __init__(self) -> None:
        self.codex_version: str | None = None
        self.user_agent: str | None = None
        self.threads_seen: set[str] = set()

    def on_initialize(self, msg: Message, pending: PendingRequest) -> Decision:
        result = msg.result()
        if isinstance(result, dict) and isinstance(result.get("userAgent"), str):
            self.user_agent = result["userAgent"]
            self.codex_version = codex_version_from_user_agent(self.user_agent)
        return None

    def on_thread_result(self, msg: Message, pending: PendingRequest) -> Decision:
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if isinstance(thread, dict) and isinstance(thread.get("id"), str):
            self.threads_seen.add(thread["id"])
        return None

    def on_thread_started(self, msg: Message) -> Decision:
        params = msg.params()
        thread = params.get("thread") if isinstance(params, dict) else None
        if isinstance(thread, dict) and isinstance(thread.get("id"), str):
            self.threads_seen.add(thread["id"])
        return None
