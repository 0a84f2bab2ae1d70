"""What the client negotiated, and what the sidecar negotiates for it.

A client's ``initialize`` says what its connection may do:
``capabilities.experimentalApi`` (codex's experimental methods and fields)
and ``capabilities.optOutNotificationMethods`` (notifications codex must not
send it). With no engine the sidecar passes it untouched. With an engine,
the sidecar itself needs more than some clients ask for: it projects context
with ``turn/start.additionalContext`` and offers the engine's tools with
``thread/start.dynamicTools`` (both experimental in codex 0.169.0), and its
lifecycle reads notifications (``item/completed``, ``turn/completed``, ...)
that a client may have opted out of. So the sidecar declares to codex what
it needs and keeps the client's own connection as the client negotiated it:

* a request the client's connection could not have sent (an experimental
  method, or an experimental member with a value) is refused by the sidecar
  with codex's own error (-32600 "``<what>`` requires experimentalApi
  capability"), never forwarded;
* a notification the client opted out of never reaches it, nor one codex
  sends only to experimental connections (``thread/readState/changed``);
* a server request codex sends only to experimental connections
  (``currentTime/read``) is answered by the sidecar, as a client that knew
  it would.

The sidecar's own additions to a client's request travel on the sidecar's
negotiation, not the client's: the client sees the answer it would have
seen. Sans I/O: the router calls it and sends what it says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from protocol import encode_error, encode_response, experimental

from .messages import Decision, Message

log = logging.getLogger("codex_sidecar.proxy")

EXPERIMENTAL = "experimentalApi"
OPT_OUT = "optOutNotificationMethods"


class Negotiation:
    """One connection's negotiation: what the client declared, what codex was told."""

    def __init__(self, needs: Collection[str] | None, clock: Callable[[], float] = time.time) -> None:
        """``needs``: the notifications the sidecar's lifecycle reads, when it
        speaks for an engine (it then declares the experimental API to codex);
        None with no engine (the client's ``initialize`` passes untouched)."""
        self.needs = frozenset(needs) if needs is not None else None
        self.clock = clock
        self.client_experimental: bool | None = None
        """What the client's first ``initialize`` declared (None before it)."""
        self.opted_out: frozenset[str] = frozenset()
        """The notifications the client opted out of."""
        self.upgraded = False
        """The sidecar declared the experimental API for a client that did not."""
        self.screens = False
        """Client requests are checked against the experimental API (``upgraded``)."""
        self.hidden: frozenset[str] = frozenset()
        """Notifications codex now sends that the client opted out of: dropped."""

    def initialize(self, params: Any) -> Any:
        """The client's first ``initialize`` params: noted, and returned as
        they go to codex (the same object when nothing changes)."""
        if self.client_experimental is not None:
            return params  # codex refuses a second initialize itself
        caps = params.get("capabilities") if isinstance(params, dict) else None
        caps = caps if isinstance(caps, dict) else {}
        self.client_experimental = caps.get(EXPERIMENTAL) is True
        opt_out = caps.get(OPT_OUT)
        self.opted_out = frozenset(m for m in opt_out if isinstance(m, str)) if isinstance(opt_out, list) else frozenset()
        if self.needs is None or not isinstance(params, dict):
            return params
        keep_out = [m for m in opt_out if not (isinstance(m, str) and m in self.needs)] if isinstance(opt_out, list) else None
        hidden = self.opted_out & self.needs
        if self.client_experimental and not hidden:
            return params
        new_caps = dict(caps)
        new_caps[EXPERIMENTAL] = True
        if keep_out is not None:
            new_caps[OPT_OUT] = keep_out
        self.upgraded = self.screens = not self.client_experimental
        self.hidden = hidden | experimental.NOTIFICATIONS if self.upgraded else hidden
        if self.upgraded or hidden:
            log.info(
                "the sidecar negotiates for its engine",
                extra={"fields": {"clientExperimentalApi": self.client_experimental, "sidecarExperimentalApi": True, "notificationsHidden": sorted(self.hidden)}},
            )
        return {**params, "capabilities": new_caps}

    def on_initialize(self, msg: Message) -> Decision:
        """The hook on the client's ``initialize`` (a relay row of the method table)."""
        params = msg.params()
        sent = self.initialize(params)
        if sent is not params:
            msg.set_params(sent)
        return None

    def refuse(self, client_id: Any, method: str, params: Any) -> bytes | None:
        """Codex's own refusal of a request the client's connection could not
        send, or None (only while :attr:`screens`)."""
        what = experimental.refusal(method, params)
        if what is None:
            return None
        code, message = experimental.refusal_error(what)
        return encode_error(client_id, code, message)

    def answer_server_request(self, request_id: Any, method: str) -> bytes | None:
        """The sidecar's answer to a server request the client never
        negotiated (only while :attr:`screens`), or None to pass it on."""
        if method not in experimental.SERVER_REQUESTS:
            return None
        if method == "currentTime/read":
            return encode_response(request_id, {"currentTimeAt": int(self.clock())})
        return encode_error(request_id, -32601, f"{method} is not supported by this client (it did not declare the experimental API)")

    def status(self) -> dict[str, Any]:
        return {
            "clientExperimentalApi": self.client_experimental,
            "sidecarExperimentalApi": bool(self.upgraded or (self.client_experimental and self.needs is not None)),
            "optedOut": sorted(self.opted_out),
            "hiddenNotifications": sorted(self.hidden),
        }
