"""The JSON-RPC relay between the client and the app-server child."""

from .control import ControlMethods
from .router import HANDLED, Decision, Hooks, Message, PendingRequest, Proxy, ProxyOptions, RpcError

__all__ = ["HANDLED", "ControlMethods", "Decision", "Hooks", "Message", "PendingRequest", "Proxy", "ProxyOptions", "RpcError"]
