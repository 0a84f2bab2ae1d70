"""Backing threads: the Codex threads behind a client's thread, mapped at the child's edge.

With ``rebuild = "fresh"``, a ``delta`` rebuild does not revert the Codex
thread in place: it switches the client's thread onto a *spare*, a Codex
thread started ahead of time with the client's own ``thread/start`` params,
and the rebuild's turn is that thread's first. Codex's revert starts a new
session on the turn's path and gets slower with every revert of a thread
(``docs/research/history-rebuild.md`` §5); a spare is started off the path.

The client never sees the Codex thread ids behind its own. :class:`BackingThreads`
maps them at the child edge, on bytes:

* to Codex: the client's thread id becomes the current backing thread's
  (requests the sidecar sends about a retired thread bypass this);
* from Codex, notifications and server requests naming a retired or spare
  thread are dropped (the client's own id names a retired Codex thread after
  the first switch); in everything else, backing ids become the client's;
* ``thread/list`` and ``thread/loaded/list`` answers lose their retired and
  spare entries before that; one Codex answers while a thread the sidecar
  starts for itself is unanswered waits for that answer first
  (:mod:`sidecar.history.starts`).

Threads the sidecar runs for itself (the engine's model calls,
``sidecar.host.completion``) are hidden the same way (:meth:`BackingThreads.own`),
and each frame about one goes to its listener instead of the client.

Only thread-id members are mapped or looked at (``threadId``, ``id``,
``sessionId``, ``forkedFromId``, ... whose value is a UUID: the
``thread_keys`` column of :data:`sidecar.methods.METHODS`, handed to
:class:`BackingThreads` by ``serve``): a regex and a dict lookup, and
never a string the model or the client wrote (a reply that happens to be a
thread id is text, not routing); ids inside other strings (a rollout path, a
cursor) are left alone.

The map is one small JSON file per client thread under
``<state_dir>/backing/``, written (fsync, rename; newer snapshots win) before
a switch is used. A switch stays *pending* until Codex accepts its turn:
before that the new thread has no rollout (Codex 0.169.0 writes none for a
thread without an accepted turn), so a restart, or a resume after Codex
unloaded it, goes back to the previous thread (:meth:`BackingThreads.rollback`)
and the next turn rebuilds.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from protocol import encode

from ..store.private import private_dir
from .starts import LIST_METHODS, OwnStarts

log = logging.getLogger("codex_sidecar.backing")

_UUID_TEXT = rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UUID = re.compile(rb'"(' + _UUID_TEXT + rb')"')


def keyed_members(keys: Iterable[str]) -> re.Pattern[bytes]:
    """A thread-id member, ``(key and colon, id)``, for any of ``keys``."""
    names = b"|".join(re.escape(k.encode()) for k in keys)
    return re.compile(rb'("(?:' + names + rb')"\s*:\s*)"(' + _UUID_TEXT + rb')"')


class ThreadKeys(NamedTuple):
    """The members that carry thread ids (the table's ``thread_keys``
    column; only these are mapped)."""

    listed: tuple[str, ...]
    pattern: re.Pattern[bytes]
    """As a pattern in bytes (:func:`keyed_members`)."""
    names: frozenset[str]
    """As a set (decoded: :func:`map_thread_ids`)."""


@functools.cache
def thread_keys(keys: tuple[str, ...]) -> ThreadKeys:
    """``keys`` (``sidecar.rows.thread_id_keys(METHODS)``) as listed, as a pattern, as a set."""
    return ThreadKeys(keys, keyed_members(keys), frozenset(keys))


class _Routed(msgspec.Struct):
    params: Any = None


_routing_decoder = msgspec.json.Decoder(_Routed)


def routing_ids(line: bytes) -> list[str]:
    """The thread a frame is about: ``params.threadId`` and ``params.thread.id``
    (never an id the model or the client wrote, say in a tool's arguments)."""
    try:
        params = _routing_decoder.decode(line).params
    except msgspec.DecodeError:
        return []
    if not isinstance(params, dict):
        return []
    out = []
    if isinstance(params.get("threadId"), str):
        out.append(params["threadId"])
    thread = params.get("thread")
    if isinstance(thread, dict) and isinstance(thread.get("id"), str):
        out.append(thread["id"])
    return out


#: ``turn/start`` params Codex keeps "for this turn and subsequent turns"
#: (codex 0.169.0's TurnStartParams): replayed on a new backing thread's first turn.
STICKY_TURN_KEYS = (
    "approvalPolicy",
    "approvalsReviewer",
    "cwd",
    "effort",
    "model",
    "sandboxPolicy",
    "serviceTier",
    "summary",
    "disabledPluginIds",
    "personality",
    "collaborationMode",
    "environments",
    "permissions",
    "runtimeWorkspaceRoots",
)

#: Notifications a ``thread/start`` emits that name no thread.
UNATTRIBUTED_START_NOTIFICATIONS = (b'"configWarning"', b'"remoteControl/status/changed"')

THREAD_METHODS = ("thread/read", "thread/resume", "thread/unarchive")
"""Answers that show one thread (``result.thread``)."""
ARCHIVED_DIR = f"{os.sep}archived_sessions{os.sep}"
"""Where Codex keeps an archived thread's rollout (under its home)."""


class Alias(msgspec.Struct):
    client: str
    start: dict[str, Any]
    """The client's ``thread/start`` params: a spare is started with them."""
    current: str = ""
    retired: list[str] = msgspec.field(default_factory=list)
    spare: str | None = None
    sticky: dict[str, Any] = msgspec.field(default_factory=dict)
    name: str | None = None
    pending: bool = False
    """The last switch's turn was not accepted by Codex yet (the current
    thread may have no rollout)."""
    listed: dict[str, Any] = msgspec.field(default_factory=dict)
    """The client's thread as Codex showed it before any switch
    (``preview``, ``createdAt``, ``path``): the current backing thread's
    ``thread/list`` entry and its ``thread/read``, ``thread/resume`` and
    ``thread/unarchive`` answers show these instead of its own."""

    def as_json(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "current": self.current or self.client,
            "retired": self.retired,
            "spare": self.spare,
            "start": self.start,
            "sticky": self.sticky,
            "name": self.name,
            "listed": self.listed,
            "pending": self.pending,
        }


def _unswitched(alias: Alias) -> bool:
    """The alias maps and hides no id: the client thread is its own backing
    thread, with no retired thread, spare or pending switch."""
    return alias.current in ("", alias.client) and not alias.retired and alias.spare is None and not alias.pending


def backing_ids(state_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Every Codex thread behind a client's thread, from the map on disk
    (``backing/``): backing id (current, retired, spare) -> the client's
    thread id. For ``engines lossless import``: such a thread's rollout
    is a second copy of the client thread's conversation. An unreadable
    entry is left out."""
    out: dict[str, str] = {}
    folder = Path(state_dir) / "backing"
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            data = json.loads((folder / name).read_text())
            client = data["client"]
            ids = [data.get("current"), *(data.get("retired") or []), data.get("spare")]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(client, str):
            continue
        for thread in ids:
            if isinstance(thread, str) and thread != client:
                out[thread] = client
    return out


def _valid_id(thread_id: str) -> bool:
    return _UUID.fullmatch(b'"' + thread_id.encode() + b'"') is not None


LIST_WAIT = 20.0
"""Seconds a client's thread list waits at most for the sidecar's own
thread starts (``serve`` gives the engine deadline, whose default this is)."""


class BackingThreads:
    def __init__(self, state_dir: str | os.PathLike[str], keys: Iterable[str] | Callable[[], Iterable[str]], *, list_wait: float = LIST_WAIT) -> None:
        """``keys``: the members that carry thread ids (the method table's
        ``thread_keys`` column, ``sidecar.rows.thread_id_keys(METHODS)``), or
        what gives them on first use: the edge is asked only while some
        thread is switched, so a relay need not build the table (it imports
        every job) before it starts. ``list_wait``: seconds a client's
        thread list waits at most for the sidecar's own thread starts."""
        self.dir = Path(state_dir) / "backing"
        self._keys_of = keys if callable(keys) else (lambda given=tuple(keys): given)
        self._keys: ThreadKeys | None = None
        self.aliases: dict[str, Alias] = {}
        self._to_codex: dict[bytes, bytes] = {}
        """Client id -> its current backing id, for switched threads only."""
        self.maps_to_codex = False
        """Some client thread is switched (``_to_codex`` is not empty)."""
        self._to_client: dict[bytes, bytes] = {}
        """Current and retired backing ids -> the client's id (responses)."""
        self._hidden: set[bytes] = set()
        """Retired and spare ids: a notification naming one is not the client's."""
        self.spare_starts = 0
        """Spares being started: their unattributed notifications are dropped."""
        self._owned: dict[str, Callable[[bytes], None]] = {}
        """Threads the sidecar runs for itself (``sidecar.host.completion``):
        hidden like a spare, and each frame about one goes to its listener."""
        self.own_starts: OwnStarts[Any] = OwnStarts(list_wait)
        """The sidecar's own thread starts unanswered, and the client's list
        answers held for them (the relay holds the answers)."""
        self.dropped = 0
        self.rolled_back: set[str] = set()
        """Client threads moved back from a pending switch: their ledger is unknown."""
        self._versions = 0
        self._written: dict[str, int] = {}
        self._write_lock = threading.Lock()
        self._load()

    # ------------------------------------------------------------ the map

    @property
    def keys(self) -> ThreadKeys:
        """The thread-id members, read on first use."""
        if self._keys is None:
            self._keys = thread_keys(tuple(self._keys_of()))
        return self._keys

    def _load(self) -> None:
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return
        for name in names:
            if name.endswith(".json"):
                alias = self._read(name)
                if alias is not None and not _unswitched(alias):
                    self.aliases[alias.client] = alias  # its ids route

    def _read(self, name: str) -> Alias | None:
        """The alias a map file holds, indexed (a spare an earlier process
        started is retired: not loaded in this one's Codex), not kept."""
        try:
            data = json.loads((self.dir / name).read_text())
            alias = Alias(
                client=data["client"],
                start=data.get("start") or {},
                current=data.get("current") or data["client"],
                retired=list(data.get("retired") or []),
                spare=data.get("spare"),
                sticky=data.get("sticky") or {},
                name=data.get("name"),
                listed=data.get("listed") or {},
                pending=bool(data.get("pending")),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable backing-thread map entry skipped", extra={"fields": {"file": name, "error": type(exc).__name__}})
            return None
        spare, alias.spare = alias.spare, None
        self.aliases[alias.client] = alias  # rollback and _index find it here
        self._index(alias)
        if alias.pending:
            self.rollback(alias.client)  # before the spare joins the retired list
        if spare:
            alias.retired.append(spare)
            self._index(alias)
        del self.aliases[alias.client]
        return alias

    def alias(self, client: str) -> Alias | None:
        """The client thread's alias: held, or read back from its map file
        (a thread never switched is not held while Codex has it unloaded,
        :meth:`park`) and held again (the thread is being resumed)."""
        held = self.aliases.get(client)
        if held is not None or not _valid_id(client):
            return held
        alias = self._read(f"{client}.json")
        if alias is not None:
            self.aliases[client] = alias
        return alias

    def park(self, client: str) -> None:
        """Codex unloaded the client's thread: a thread never switched maps
        and hides nothing, so its alias (the client's ``thread/start``
        params: OpenClaw's are ~120 KB of tools) is not held until
        :meth:`alias` reads it back for a resume. Its map file keeps it."""
        alias = self.aliases.get(client)
        if alias is not None and _unswitched(alias):
            del self.aliases[client]

    def _index(self, alias: Alias) -> None:
        client = alias.client.encode()
        current = (alias.current or alias.client).encode()
        if current != client:
            self._to_codex[client] = current
            self._to_client[current] = client
        else:
            self._to_codex.pop(client, None)
        self.maps_to_codex = bool(self._to_codex)
        self._hidden.discard(current)
        for old in alias.retired:
            self._to_client[old.encode()] = client
            self._hidden.add(old.encode())
        if alias.spare:
            self._hidden.add(alias.spare.encode())

    def _path(self, client: str) -> Path:
        if not _valid_id(client):
            raise ValueError(f"not a thread id: {client!r}")
        return self.dir / f"{client}.json"

    def snapshot(self, alias: Alias) -> tuple[str, int, bytes]:
        """The alias as it is now, numbered: take it where the alias changes
        (the event loop), write it anywhere (:meth:`write`)."""
        self._path(alias.client)  # a bad id fails here, not in a worker
        self._versions += 1
        return alias.client, self._versions, json.dumps(alias.as_json(), sort_keys=True, separators=(",", ":")).encode()

    def write(self, client: str, version: int, data: bytes) -> None:
        """Write a snapshot durably (temporary file, fsync, rename, fsync
        dir), one writer at a time; a snapshot older than the one on disk is
        skipped, so overlapping saves never publish a stale map."""
        path = self._path(client)
        with self._write_lock:
            if version <= self._written.get(client, 0):
                return
            private_dir(self.dir)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            self._written[client] = version

    def save(self, alias: Alias) -> None:
        """:meth:`snapshot` then :meth:`write` (both here)."""
        self.write(*self.snapshot(alias))

    def remember_start(self, client: str, params: dict[str, Any]) -> Alias | None:
        """A thread the client started here: a spare can be made like it."""
        if not _valid_id(client) or client in self.aliases:
            return self.aliases.get(client)
        alias = Alias(client=client, start={k: v for k, v in params.items() if k != "threadId"}, current=client)
        self.aliases[client] = alias
        return alias

    def current(self, client: str) -> str:
        alias = self.aliases.get(client)
        return alias.current if alias is not None and alias.current else client

    def hide(self, client: str, thread_id: str) -> None:
        """A Codex thread started for the client but never to be used (a
        spare that came too late): hidden like a retired one."""
        alias = self.aliases.get(client)
        if alias is None:
            self._hidden.add(thread_id.encode())
            return
        alias.retired.append(thread_id)
        self._index(alias)

    def own(self, thread_id: str, listener: Callable[[bytes], None]) -> None:
        """A thread the sidecar started for itself: hidden from the client
        for the life of the process, its frames handed to ``listener``."""
        self._hidden.add(thread_id.encode())
        self._owned[thread_id] = listener

    def disown(self, thread_id: str) -> None:
        """No one listens any more; the thread stays hidden."""
        self._owned.pop(thread_id, None)

    def note_spare(self, client: str, spare: str) -> None:
        """Hide the spare at once (its ``thread/started`` follows the answer)."""
        self._hidden.add(spare.encode())
        alias = self.aliases.get(client)
        if alias is not None:
            alias.spare = spare

    def switch(self, client: str) -> tuple[str, str]:
        """Make the spare the client's current thread: (old, new) backing ids.
        The caller persists (:meth:`save`) before anything uses the switch."""
        alias = self.aliases[client]
        if not alias.spare:
            raise LookupError("no spare thread")
        old, new = alias.current or client, alias.spare
        alias.retired.append(old)
        alias.current, alias.spare, alias.pending = new, None, True
        self._index(alias)
        return old, new

    def confirm(self, client: str) -> bool:
        """Codex accepted the switch turn: the current thread is resumable."""
        alias = self.aliases.get(client)
        if alias is None or not alias.pending:
            return False
        alias.pending = False
        return True

    def rollback(self, client: str) -> bool:
        """Back from a pending switch to the thread before it (which still
        holds its turns); the abandoned one stays hidden. The caller
        persists it and has the next turn rebuild."""
        alias = self.aliases.get(client)
        if alias is None or not alias.pending or not alias.retired:
            return False
        abandoned = alias.current
        previous = alias.retired.pop()
        alias.retired.append(abandoned)
        alias.current, alias.pending = previous, False
        self._to_client.pop(previous.encode(), None)
        self._hidden.discard(previous.encode())
        self._index(alias)
        if previous == client:
            self._to_client.pop(client.encode(), None)
        self.rolled_back.add(client)
        return True

    def unswitch(self, client: str, old: str, new: str) -> None:
        """Undo :meth:`switch` (the map could not be persisted)."""
        alias = self.aliases[client]
        if alias.retired and alias.retired[-1] == old:
            alias.retired.pop()
        alias.current, alias.spare, alias.pending = old, new, False
        self._to_client.pop(new.encode(), None)
        self._hidden.discard(old.encode())
        self._index(alias)

    # ---------------------------------------------------- the child's edge

    @property
    def active(self) -> bool:
        return bool(self._to_codex or self._hidden or self.spare_starts)

    def sidecar_request(self, call_id: str, method: str) -> None:
        """The sidecar sent a request of its own (:meth:`OwnStarts.requested`)."""
        self.own_starts.requested(call_id, method)

    def sidecar_answered(self, call_id: str) -> list[Any]:
        """Codex answered it, the answer read: the held answers that go on."""
        return self.own_starts.answered(call_id)

    def hold(self, method: str, answer: Any) -> float | None:
        """Whether a client's answer to ``method`` waits (the seconds at most)."""
        return self.own_starts.hold(method, answer)

    def overdue(self, answer: Any) -> list[Any]:
        """``answer`` waited long enough: it goes on, with any that waited as it did."""
        return self.own_starts.overdue(answer)

    def release_all(self) -> list[Any]:
        """Codex is gone: every held answer goes on."""
        return self.own_starts.release_all()

    def to_codex(self, line: bytes) -> bytes:
        if not self._to_codex:
            return line
        return _map_ids(line, self._to_codex, self.keys.pattern)

    def request_params(self, params: Any) -> Any:
        """A decoded client request's params as Codex gets them: the same
        members as :meth:`to_codex` maps in bytes, mapped in the value (the
        router encodes the request once, with its other changes)."""
        if not self._to_codex:
            return params
        return map_thread_ids(params, {k.decode(): v.decode() for k, v in self._to_codex.items()}, self.keys.names)

    def notification(self, line: bytes) -> bytes | None:
        """A notification or server request from Codex, as the client gets
        it; None when it is about a thread the client does not know."""
        if self.spare_starts and any(m in line[:64] for m in UNATTRIBUTED_START_NOTIFICATIONS):
            self.dropped += 1
            return None
        if not (self._hidden or self._to_client):
            return line
        members = list(self.keys.pattern.finditer(line))  # one scan: it decides, then it splices
        if not members:
            return line
        if any(m[2] in self._hidden for m in members):
            routed = [r for r in routing_ids(line) if r.encode() in self._hidden]
            if routed:
                self.dropped += 1
                listener = self._owned.get(routed[0]) if self._owned else None
                if listener is not None:
                    try:
                        listener(line)
                    except Exception:
                        log.exception("listener of a sidecar-owned thread failed")
                return None
        return _splice(line, members, self._to_client)

    def response(self, line: bytes, method: str | None) -> bytes:
        """A response from Codex, as its requester gets it."""
        if not (self._hidden or self._to_client):
            return line
        if method in LIST_METHODS and self._hidden:
            line = self._filter_list(line, method)
        if not self._to_client:
            return line
        if method in THREAD_METHODS:
            line = self._thread_answer(line)
        return _map_ids(line, self._to_client, self.keys.pattern)

    def client_listed(self, codex_id: Any, thread: dict[str, Any]) -> dict[str, Any]:
        """``thread`` (Codex's, about ``codex_id``) as the client's: where
        ``codex_id`` is a client thread's current backing thread, with the
        ``preview``, ``createdAt`` and ``path`` the client's own thread had
        (:attr:`Alias.listed`; Codex shows the backing thread's first prompt
        and rollout file). An archived thread's rollout lies next to the
        backing one's (``archived_sessions``)."""
        client = self._to_client.get(codex_id.encode()) if isinstance(codex_id, str) else None
        alias = self.aliases.get(client.decode()) if client is not None else None
        if alias is None or alias.current != codex_id or alias.current == alias.client or not alias.listed:
            return thread
        listed = {k: v for k, v in alias.listed.items() if k in thread}
        path, own = listed.get("path"), thread.get("path")
        if isinstance(path, str) and isinstance(own, str) and ARCHIVED_DIR in own and ARCHIVED_DIR not in path:
            listed["path"] = os.path.join(os.path.dirname(own), os.path.basename(path))
        return {**thread, **listed}

    def _thread_answer(self, line: bytes) -> bytes:
        """A one-thread answer about a backing thread, as the client's (before its ids are mapped)."""
        if not any(a.listed and a.current and a.current != a.client and a.current.encode() in line for a in self.aliases.values()):
            return line  # about no switched thread: not parsed
        try:
            msg = json.loads(line)
        except ValueError:
            return line
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict) or not isinstance(result.get("thread"), dict):
            return line
        thread = self.client_listed(result["thread"].get("id"), result["thread"])
        return line if thread is result["thread"] else encode({**msg, "result": {**result, "thread": thread}})

    def fragment_to_codex(self, data: bytes) -> bytes:
        """A piece of a line too long to parse, on its way to Codex (an id
        cut by a piece boundary is not mapped)."""
        return _map_ids(data, self._to_codex, self.keys.pattern) if self._to_codex else data

    def fragment_to_client(self, data: bytes) -> bytes:
        """A piece of a line too long to parse, on its way to the client:
        mapped, never dropped (it cannot be taken back)."""
        return _map_ids(data, self._to_client, self.keys.pattern) if self._to_client else data

    def _filter_list(self, line: bytes, method: str | None) -> bytes:
        try:
            msg = json.loads(line)
        except ValueError:
            return line
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict):
            return line
        data = result.get("data")
        if not isinstance(data, list):
            return line
        hidden = {h.decode() for h in self._hidden}

        def visible(entry: Any) -> bool:
            thread_id = entry if isinstance(entry, str) else entry.get("id") if isinstance(entry, dict) else None
            return thread_id not in hidden

        kept = [e for e in data if visible(e)]
        to_client = {k.decode(): v.decode() for k, v in self._to_client.items()}
        patched = [self.client_listed(e.get("id"), e) if isinstance(e, dict) else to_client.get(e, e) if isinstance(e, str) else e for e in kept]
        changes: dict[str, Any] = {}
        states = result.get("readStates")
        if isinstance(states, dict):
            # Keyed by thread id: the client's keys, hidden threads' left out.
            keyed = {to_client.get(k, k): v for k, v in states.items() if k not in hidden}
            if keyed != states:
                changes["readStates"] = keyed
        if len(kept) != len(data) or patched != kept:
            changes["data"] = patched
        if not changes:
            return line
        return encode({**msg, "result": {**result, **changes}})  # (decoded here once, encoded once)


def map_thread_ids(value: Any, table: dict[str, str], keys: frozenset[str]) -> Any:
    """``value`` (decoded JSON) with the ids of its thread-id members
    (``keys``, at any depth) that ``table`` maps replaced, as
    :func:`_map_ids` does in bytes; ``value`` itself when none is, and never
    modified (a changed container is a copy)."""
    if type(value) is dict:
        out: dict[str, Any] | None = None
        for key, child in value.items():
            if key in keys and type(child) is str:
                new = table.get(child)
            elif type(child) is dict or type(child) is list:
                new = map_thread_ids(child, table, keys)
                new = None if new is child else new
            else:
                new = None
            if new is not None:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if type(value) is list:
        items: list[Any] | None = None
        for i, child in enumerate(value):
            new = map_thread_ids(child, table, keys)
            if new is not child:
                if items is None:
                    items = list(value)
                items[i] = new
        return value if items is None else items
    return value


def _map_ids(line: bytes, table: dict[bytes, bytes], pattern: re.Pattern[bytes]) -> bytes:
    """``line`` with the thread-id members (``pattern``) found in ``table`` replaced."""
    return _splice(line, pattern.finditer(line), table)


def _splice(line: bytes, members: Iterable[re.Match[bytes]], table: dict[bytes, bytes]) -> bytes:
    """``line`` with the ids of ``members`` (its thread-key matches, in
    order) that ``table`` maps replaced; ``line`` itself when none is."""
    parts: list[bytes] = []
    last = 0
    for m in members:
        new = table.get(m[2])
        if new is not None:
            start, end = m.span(2)
            parts += (line[last:start], new)
            last = end
    if not parts:
        return line
    parts.append(line[last:])
    return b"".join(parts)
