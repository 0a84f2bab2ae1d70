"""The JSON-RPC relay between the client and the app-server child.

It knows nothing of turns or threads: a sans-IO :class:`Router` (pending
requests, id aliases, gates, hook chains, the optional :class:`Edge`
edge, ``sidecar/...`` control dispatch) driven by a thin trio shell,
:class:`Proxy` (pumps, outbox writers, the child, signals, supervised tasks).
See ``docs/relay.md``.
"""

from .control import ControlMethods
from .edge import Edge
from .messages import HANDLED, Decision, Hooks, Message, PendingRequest, RpcError, Slot
from .router import Router
from .shell import Proxy, ProxyOptions

__all__ = [
    "HANDLED",
    "ControlMethods",
    "Decision",
    "Edge",
    "Hooks",
    "Message",
    "PendingRequest",
    "Proxy",
    "ProxyOptions",
    "Router",
    "RpcError",
    "Slot",
]
