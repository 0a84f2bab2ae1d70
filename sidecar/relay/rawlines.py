"""Lines too long to parse, streamed through in pieces, sans I/O.

The router parses every line up to its max line; a longer one reaches it as
pieces (``Oversized``, and a stream's torn tail as a ``Fragment``) and goes
on unparsed. Its head still routes it (see :mod:`.oversized`): a client
request gets a pending entry and, for an id in the sidecar's space, an
alias; codex's answer closes its entry, and an answer to one of the
sidecar's own requests fails that request instead of reaching the client.
Hooks never run on such a line: it passes unchanged, and that is logged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from protocol import Fragment, Oversized
from protocol.jsonrpc import PREFIX as INTERNAL_PREFIX

from . import oversized
from .messages import PendingRequest, RpcError

if TYPE_CHECKING:
    from .router import Counters, Router, Sink

log = logging.getLogger("codex_sidecar.proxy")

# The router's names for these (its module imports this one).
_CLIENT_TO_CODEX = "client>codex"
_CODEX_TO_CLIENT = "codex>client"
_CONTROL_PREFIX = "sidecar/"


class RawLines:
    """Both directions' line in pieces, if one is open, for one router."""

    __slots__ = ("_router", "_c2s_open", "_c2s_pending", "_s2c")

    def __init__(self, router: Router) -> None:
        self._router = router
        self._c2s_open = False
        """A client line too long to parse is being streamed to codex."""
        self._c2s_pending: PendingRequest | None = None
        """The request that client line carries."""
        self._s2c: str | None = None
        """The same from codex: "forward" it, or "drop" it (the sidecar's own answer)."""

    def from_client(self, ev: Oversized | Fragment) -> None:
        """A piece of a client line too long to parse, or its stream's torn tail."""
        router = self._router
        if type(ev) is Oversized:
            first = not self._c2s_open
            self._c2s_open = not ev.end
            if first:
                ev = Oversized(self._client_head(ev.data), ev.end)
            pending = self._c2s_pending
            if ev.end and pending is not None:
                # Codex gets the line's end: from now on it may have parsed
                # and run it, so its death is answered outcome unknown
                # (-32603), never -32001, which clients retry. Until then
                # codex holds no whole line: not delivered, safe to retry.
                self._c2s_pending = None
                if not router.child_gone:
                    pending.forwarded = True
        self._forward(ev, router.c2s, router.to_child, _CLIENT_TO_CODEX, "client")

    def _client_head(self, data: bytes) -> bytes:
        """A request too long to parse still gets what every request gets: a
        pending entry (its answer if codex dies: -32001 until codex has
        the whole line, outcome unknown after) and an alias for an id in
        the sidecar's namespace. Its hooks cannot run: it passes unchanged."""
        router = self._router
        head = oversized.request_head(data)
        if head is None:
            return data  # not a request whose id and method come before its params: as is
        client_id, name, span = head
        if name.startswith(_CONTROL_PREFIX) or router.child_gone:
            return data
        pending = router.pending.open(client_id, name)
        self._c2s_pending = pending
        if router.hooks.client_requests.get(name):
            log.warning("oversized request passed without the sidecar's hooks", extra={"fields": {"method": name, "maxLine": router.max_line}})
        if pending.wire_id is not client_id:
            data = oversized.replace_id(data, span, pending.wire_id)
        return data

    def from_child(self, ev: Oversized | Fragment) -> None:
        """A piece of a child line too long to parse, or its stream's torn tail."""
        router = self._router
        if type(ev) is Oversized:
            if self._s2c is None:
                data, self._s2c = self._child_head(ev.data)
                ev = Oversized(data, ev.end)
            keep = self._s2c == "forward"
            if ev.end:
                self._s2c = None
            if not keep:
                return  # an answer to the sidecar's own request: not the client's
        self._forward(ev, router.s2c, router.to_client, _CODEX_TO_CLIENT, "codex")

    def _child_head(self, data: bytes) -> tuple[bytes, str]:
        """A response too long to parse is still matched to its request: the
        request is no longer pending (no -32001 later), an aliased id goes
        back to the client's, and an answer to one of the sidecar's own
        requests fails that request instead of reaching the client.
        Response hooks cannot run on it: it passes unchanged."""
        router = self._router
        head = oversized.answer_head(data)
        if head is None:
            return data, "forward"  # not recognisably an answer: as is
        wire_id, span = head
        if type(wire_id) is str and wire_id.startswith(INTERNAL_PREFIX) and not router.pending.is_alias(wire_id):
            call = router.calls.live(wire_id)
            if call is not None:
                router.calls.end(call)
                call.settle(error=RpcError(-32603, f"response longer than the sidecar's max line ({router.max_line} bytes)"))
            log.warning("oversized response to a sidecar request dropped", extra={"fields": {"maxLine": router.max_line}})
            if router.edge is not None:  # answered all the same: what waited for it goes on
                router._release(router.edge.sidecar_answered(wire_id))
            return data, "drop"
        pending = router.pending.close(wire_id)
        if pending is None:
            return data, "forward"
        if router.hooks.responses.get(pending.method):
            log.warning("oversized response passed without the sidecar's hooks", extra={"fields": {"method": pending.method, "maxLine": router.max_line}})
        if pending.wire_id is not pending.client_id:
            data = oversized.replace_id(data, span, pending.client_id)
        return data, "forward"

    def _forward(self, ev: Oversized | Fragment, counters: Counters, out: Sink, direction: str, source: str) -> None:
        """A piece of an unparsable line, or a stream's unterminated tail: as is."""
        router = self._router
        if type(ev) is Oversized:
            if ev.end:
                counters.frames += 1
                counters.oversized += 1
                log.warning(f"oversized line from {source} forwarded unparsed", extra={"fields": {"maxLine": router.max_line}})
                if router.recorder is not None:
                    router.recorder.note(direction, "oversized line forwarded unparsed")
        else:
            counters.frames += 1
            counters.invalid += 1
            log.warning(f"{source} output ended inside a line; forwarding the fragment")
            if source == "codex":
                # The sidecar's own -32001 answers follow: end the torn line
                # so that they reach the client as lines of their own.
                counters.bytes += len(ev.data)
                out.put(ev.data + b"\n")
                return
        data = ev.data
        if router.edge is not None and type(ev) is Oversized:
            # Thread ids in the piece, as in a parsed line (one a piece
            # boundary cuts is not mapped; nothing can be dropped).
            data = router.edge.fragment_to_codex(data) if source == "client" else router.edge.fragment_to_client(data)
        counters.bytes += len(data)
        if type(ev) is Oversized:
            out.put_raw(data, ev.end)
        else:
            out.put(data)
