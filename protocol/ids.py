"""The sidecar's own request-id space, sans I/O.

The sidecar sends requests of its own to the app-server (compaction,
injection, imports) on the same connection as the client. Their ids must
never collide with the client's, whatever ids the client picks. Internal ids
are strings under a fixed prefix; a client request whose id happens to fall
under that prefix is given an alias in the same space on the way in and its
original id back on the way out, so the child never sees two live requests
with one id and the client never notices.
"""

from __future__ import annotations

from .jsonrpc import RpcId

PREFIX = "codex-sidecar:"


class IdSpace:
    __slots__ = ("_next", "_next_alias", "_aliases")

    def __init__(self) -> None:
        self._next = 0
        self._next_alias = 0
        self._aliases: dict[str, RpcId] = {}

    @staticmethod
    def is_reserved(id: RpcId) -> bool:
        """True when ``id`` lies in the sidecar's namespace."""
        return isinstance(id, str) and id.startswith(PREFIX)

    def new_internal(self) -> str:
        self._next += 1
        return f"{PREFIX}{self._next}"

    def alias_client_id(self, client_id: RpcId) -> str:
        """Give a client id that clashes with the namespace a fresh alias."""
        self._next_alias += 1
        alias = f"{PREFIX}client:{self._next_alias}"
        self._aliases[alias] = client_id
        return alias

    def is_alias(self, id: RpcId) -> bool:
        return isinstance(id, str) and id in self._aliases

    def resolve_alias(self, alias: str) -> RpcId:
        """The client's original id for ``alias``; forgets the alias."""
        return self._aliases.pop(alias)
