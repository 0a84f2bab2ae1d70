"""The transcript mirror: a thread's history as an OpenClaw session file.

Layout (OpenClaw's session format, tree version 4)::

    {"type":"session","version":4,"id":<session id>,"timestamp":<ISO>,"cwd":<cwd>}
    {"type":"message","id","parentId","timestamp","message":{<AgentMessage>},"idempotencyKey"}
    {"type":"compaction","id","parentId","timestamp","summary","firstKeptEntryId",
     "tokensBefore","tokensAfter"?,"details"?,"idempotencyKey"}
    {"type":"custom","id","parentId","timestamp","customType","data","idempotencyKey"}

Each append's ``parentId`` is the previous leaf (the last entry in the file),
so the file is one linear branch of OpenClaw's tree; entries written by other
tools (``model_change``, ``custom_message``, ...) are kept and skipped by the
context view. A rewind makes a ``custom`` entry under an earlier entry the
leaf, so what it takes off stays in the file on a side branch.

Two layers, one file. :class:`SessionFile` (first below) is the file as an
append-only, keyed log: opening, creating and forking it, the session header,
the index of its lines (entries by id and by idempotency key, the leaf, the
path to it), locking, torn lines, and writing one line.
:class:`TranscriptMirror` adds what the entries mean to a model: the message
view OpenClaw builds from the path to the leaf (kept cached across this
mirror's own appends), and the appends of messages, compactions, custom
entries and translated records.

Idempotency
    Every entry written here carries its idempotency key (top-level
    ``idempotencyKey``) and an id derived from it (the first 16 hex digits of
    its SHA-256), so there are no random ids and the same key always yields
    the same entry. Appending a key that is already in the file is a no-op
    that returns ``False``. The keys are rebuilt by scanning the file on open
    (and re-checked under the file lock before every append), so a replay
    after a restart, or by a second object or process on the same file, is
    deduplicated too.

Durability
    Each append is one ``os.write`` of one complete line on an ``O_APPEND``
    descriptor, with no buffering in between: once an append returns, the
    entry is in the kernel, and SIGKILL at any instant loses at most the line
    being written. A torn last line (a kill mid-write, a full disk) is skipped
    when reading, and the next append starts on a fresh line. A write error
    raises :class:`MirrorError` and leaves everything written before intact;
    the entry it was writing is not recorded as present, so a retry writes it
    again. ``fsync=True`` adds an ``fsync`` per append for power-loss safety.
    Appends hold an exclusive ``flock`` so concurrent writers never interleave.

Permissions
    Files are created 0600 and missing directories 0700: transcripts hold
    prompts and tool output.

Nothing here logs entry contents; logs carry paths, ids, counts and errnos.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Self

import msgspec

from engines.api import AGENT_MESSAGE_ROLES, AgentMessage, CompactionSummaryMessage, from_openclaw, to_openclaw

from ..translate import MirrorMessage, NativeCompaction, Translated
from .private import private_dir

log = logging.getLogger("codex_sidecar.mirror")

__all__ = [
    "SESSION_VERSION",
    "EntryBuilder",
    "MirrorError",
    "SessionFile",
    "TranscriptMirror",
    "Writer",
    "entry_id_for_key",
    "iso_timestamp",
    "now_ms",
    "session_path",
]

SESSION_VERSION = 4
FILE_MODE = 0o600
ID_HEX_CHARS = 16

Writer = Callable[[int, "bytes | memoryview"], int]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


class MirrorError(Exception):
    """The mirror cannot read or write its file (full disk, not a session file, ...)."""


def entry_id_for_key(key: str) -> str:
    """The entry id the mirror uses for an idempotency key (deterministic)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:ID_HEX_CHARS]


def iso_timestamp(ms: int | float) -> str:
    """JavaScript's ``Date.toISOString()`` form, which OpenClaw writes."""
    moment = _dt.datetime.fromtimestamp(ms / 1000.0, tz=_dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    """The clock mirror entries are stamped with (wall time, ms)."""
    return int(time.time() * 1000)


def session_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """``<state_dir>/sessions/<thread id>.jsonl`` for a Codex thread id.

    The id must look like an id (letters, digits, ``.``, ``_``, ``-``, starting
    with a letter or digit, at most 200 characters): anything that could
    escape the folder (``/``, ``..``, NUL, a leading dot) is refused with
    ``ValueError`` rather than rewritten, so two ids never share a file.
    """
    if not isinstance(thread_id, str) or not _SAFE_ID.fullmatch(thread_id):
        raise ValueError("unsafe thread id for a session file name")
    return Path(state_dir) / "sessions" / f"{thread_id}.jsonl"


EntryBuilder = Callable[[str, "str | None"], dict[str, Any]]
"""Builds an entry from its id and its parent's id (the key is added after)."""


class SessionFile:
    """One session file, append-only, idempotent by key.

    Create with :meth:`open` (or :meth:`fork`); use as a context manager or
    call :meth:`close`. Methods are synchronous and do blocking file I/O:
    from trio, call them through ``trio.to_thread.run_sync``.

    Subclasses that cache what they derive from the entries extend
    :meth:`_reset_index` (the index was rebuilt: drop everything) and
    :meth:`_append_locked` (this object appended one entry).
    """

    def __init__(self, path: Path, fd: int, *, writer: Writer, fsync: bool) -> None:
        self.path = path
        self._fd: int | None = fd
        self._writer = writer
        self._fsync = fsync
        self._ident: tuple[int, int] = self._stat_ident(os.fstat(fd))
        self.existed_before = False
        self.header: dict[str, Any] = {}
        # What a header written by this object says (set by open()).
        self._new_header: dict[str, Any] | None = None
        # flock excludes other open files, not other threads on this one.
        self._thread_lock = threading.RLock()
        self._reset_index()

    # ------------------------------------------------------------------
    # opening

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        session_id: str,
        cwd: str | None = None,
        *,
        timestamp: int | None = None,
        parent_session: str | None = None,
        writer: Writer = os.write,
        fsync: bool = False,
    ) -> Self:
        """Open ``path``, creating it with a session header if it has none.

        ``existed_before`` is True when the file already held a session header
        before this call (an empty or header-less leftover counts as new):
        the spec's condition for bootstrapping a context engine. An existing
        header is kept as is (its ``id`` may differ from ``session_id``).
        ``timestamp`` (ms) dates a new header; default now.
        """
        path = Path(path)
        private_dir(path.parent)
        fd = cls._open_fd(path)
        file = cls(path, fd, writer=writer, fsync=fsync)
        header: dict[str, Any] = {
            "type": "session",
            "version": SESSION_VERSION,
            "id": session_id,
            "timestamp": iso_timestamp(now_ms() if timestamp is None else timestamp),
            "cwd": cwd or "",
        }
        if parent_session:
            header["parentSession"] = parent_session
        file._new_header = header
        try:
            with file._locked(write_header=False):  # reads the whole file
                file.existed_before = bool(file.header)
                file._ensure_header()
        except BaseException:
            file.close()
            raise
        log.debug(
            "mirror opened",
            extra={"fields": {"path": str(path), "entries": file.entry_count, "existed": file.existed_before}},
        )
        return file

    @staticmethod
    def _open_fd(path: Path) -> int:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            try:
                return os.open(path, flags)
            except OSError as exc:
                raise MirrorError(f"cannot open mirror {path}: {os.strerror(exc.errno or 0)}") from None
        except OSError as exc:
            raise MirrorError(f"cannot create mirror {path}: {os.strerror(exc.errno or 0)}") from None
        os.fchmod(fd, FILE_MODE)
        return fd

    @classmethod
    def fork(
        cls,
        parent_path: str | os.PathLike[str],
        child_path: str | os.PathLike[str],
        session_id: str,
        *,
        cwd: str | None = None,
        stop_before: Callable[[str], bool] | None = None,
        timestamp: int | None = None,
        writer: Writer = os.write,
        fsync: bool = False,
    ) -> Self:
        """Open ``child_path`` and copy the parent's entries into it (idempotent).

        Entries are copied verbatim (same ids, parents and keys), in file
        order, so compaction references stay valid and a repeated fork (after
        a crash mid-copy, or a replayed ``thread/fork``) copies only what is
        missing. ``stop_before(key)`` returning True stops the copy before
        that entry (e.g. ``thread/fork`` with ``beforeTurnId``: test the key
        against ``translate.turn_key_prefix``). A missing parent file gives a
        child with no entries. The child's header records ``parentSession``.
        """
        parent_path = Path(parent_path)
        parent_entries: list[dict[str, Any]] = []
        parent_cwd = None
        if parent_path.exists():
            with cls._read_only(parent_path) as parent:
                parent_entries = list(parent._entries)
                parent_cwd = parent.header.get("cwd")
        else:
            log.debug("fork parent has no mirror", extra={"fields": {"path": str(parent_path)}})
        child = cls.open(
            child_path,
            session_id,
            cwd=cwd if cwd is not None else parent_cwd,
            timestamp=timestamp,
            parent_session=str(parent_path),
            writer=writer,
            fsync=fsync,
        )
        try:
            copied = 0
            for entry in parent_entries:
                key = entry.get("idempotencyKey")
                if stop_before is not None and stop_before(key if isinstance(key, str) else ""):
                    break
                copied += child._copy(entry)
        except BaseException:
            child.close()
            raise
        log.debug("mirror forked", extra={"fields": {"path": str(child.path), "copied": copied}})
        return child

    @classmethod
    @contextlib.contextmanager
    def _read_only(cls, path: Path) -> Iterator[Self]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise MirrorError(f"cannot open mirror {path}: {os.strerror(exc.errno or 0)}") from None
        file = cls(path, fd, writer=os.write, fsync=False)
        try:
            with file._locked(shared=True):  # reads the whole file
                pass
            yield file
        finally:
            file.close()

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------
    # reading

    def _reset_index(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, str] = {}  # idempotency key -> entry id
        self._leaf_id: str | None = None
        self._size = 0
        self._torn_tail = False
        self._skipped = 0

    @staticmethod
    def _stat_ident(st: os.stat_result) -> tuple[int, int]:
        return (st.st_dev, st.st_ino)

    def _read(self, offset: int) -> bytes:
        assert self._fd is not None
        chunks: list[bytes] = []
        while True:
            chunk = os.pread(self._fd, 1 << 20, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def _scan_from(self, offset: int) -> None:
        """Index the lines from ``offset`` (a line start) to the end of the file."""
        if offset == 0:
            self._reset_index()
            self.header = {}
        data = self._read(offset)
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the data ends with a newline
        for raw in lines:
            if raw.strip():
                self._index_line(raw)
        if tail:
            # No newline at the end: a writer died mid-write (or the disk
            # filled). A strict prefix of a JSON object never parses, so the
            # tail is either a whole entry that only lacks its newline (kept)
            # or a torn line (skipped). Either way the next append starts
            # with a newline.
            self._torn_tail = True
            if self._complete_entry(tail):
                self._index_line(tail)
            else:
                log.warning("mirror ends in a torn line; skipped", extra={"fields": {"path": str(self.path)}})
        elif data:
            self._torn_tail = False
        self._size = offset + len(data)

    @staticmethod
    def _complete_entry(raw: bytes) -> bool:
        try:
            return isinstance(_decode(raw), dict)
        except (msgspec.DecodeError, UnicodeDecodeError):
            return False

    def _index_line(self, raw: bytes) -> None:
        try:
            obj = _decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            obj = None
        if not isinstance(obj, dict):
            self._skipped += 1
            log.warning("mirror line is not a JSON object; skipped", extra={"fields": {"path": str(self.path)}})
            return
        if obj.get("type") == "session":
            if not self.header:
                self.header = obj
            return
        if not self.header:
            raise MirrorError(f"{self.path} is not an OpenClaw session file (no session header first)")
        entry_id = obj.get("id")
        if not isinstance(entry_id, str) or not isinstance(obj.get("type"), str):
            self._skipped += 1
            log.warning("mirror entry without type or id; skipped", extra={"fields": {"path": str(self.path)}})
            return
        if entry_id in self._by_id:
            return  # a duplicate line (e.g. two racing forks without the lock): first one wins
        self._entries.append(obj)
        self._by_id[entry_id] = obj
        key = obj.get("idempotencyKey")
        if isinstance(key, str):
            self._keys.setdefault(key, entry_id)
        self._leaf_id = entry_id

    def refresh(self) -> None:
        """Pick up entries appended by another writer since the last look."""
        with self._locked(shared=True):
            pass  # _locked re-syncs with the file

    @property
    def entry_count(self) -> int:
        """Entries in the file (the header not counted)."""
        return len(self._entries)

    @property
    def leaf_id(self) -> str | None:
        """The id of the last entry (the next append's ``parentId``)."""
        return self._leaf_id

    @property
    def session_id(self) -> str | None:
        value = self.header.get("id")
        return value if isinstance(value, str) else None

    @property
    def skipped_lines(self) -> int:
        """Lines that were not valid entries (torn or foreign), for diagnostics."""
        return self._skipped + (1 if self._torn_tail else 0)

    def has_key(self, key: str) -> bool:
        return key in self._keys

    def entry_id(self, key: str) -> str | None:
        """The id of the entry stored under ``key``, if any."""
        return self._keys.get(key)

    def entries(self) -> list[dict[str, Any]]:
        """Every entry in file order, as OpenClaw JSON objects (copies)."""
        self.refresh()
        return [dict(e) for e in self._entries]

    def _path_to_leaf(self) -> list[dict[str, Any]]:
        """The entries from the root to the leaf, following ``parentId``."""
        path: list[dict[str, Any]] = []
        seen: set[str] = set()
        current = self._by_id.get(self._leaf_id) if self._leaf_id else None
        while current is not None and current["id"] not in seen:
            seen.add(current["id"])
            path.append(current)
            parent = current.get("parentId")
            current = self._by_id.get(parent) if isinstance(parent, str) else None
        path.reverse()
        return path


    # ------------------------------------------------------------------
    # writing

    @contextlib.contextmanager
    def _locked(self, *, shared: bool = False, write_header: bool = True) -> Iterator[None]:
        """Hold the file lock and bring the index up to date with the file.

        With the exclusive lock, a file that lost its header (deleted or
        replaced by an empty one since) gets this mirror's header back first.
        """
        with self._thread_lock:
            if self._fd is None:
                raise MirrorError(f"mirror {self.path} is closed")
            self._follow_replacement()
            assert self._fd is not None
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            except OSError as exc:
                raise MirrorError(f"cannot lock mirror {self.path}: {os.strerror(exc.errno or 0)}") from None
            try:
                size = os.fstat(self._fd).st_size
                if size < self._size:
                    log.warning("mirror file shrank; re-reading", extra={"fields": {"path": str(self.path)}})
                    self._scan_from(0)
                elif size > self._size:
                    self._scan_from(self._size)
                if write_header and not shared:
                    self._ensure_header()
                yield
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _ensure_header(self) -> None:
        """Write the session header if the file has none (exclusive lock held)."""
        if self.header or self._new_header is None:
            return
        if self._entries:
            raise MirrorError(f"{self.path} is not an OpenClaw session file (no session header first)")
        self._write_line(self._new_header)
        self.header = dict(self._new_header)

    def _follow_replacement(self) -> None:
        """Reopen when the path names another file (rewritten and renamed in
        place) or none (deleted: a fresh file with a new header is started)."""
        if self._fd is None or not self.header:
            return
        try:
            current: tuple[int, int] | None = self._stat_ident(os.stat(self.path))
        except FileNotFoundError:
            current = None
        if current == self._ident:
            return
        log.info(
            "mirror file was replaced or deleted; reopening",
            extra={"fields": {"path": str(self.path), "deleted": current is None}},
        )
        if current is None:
            private_dir(self.path.parent)
        fd = self._open_fd(self.path)
        os.close(self._fd)
        self._fd = fd
        self._ident = self._stat_ident(os.fstat(fd))
        self._reset_index()
        self.header = {}

    def _write_line(self, obj: Mapping[str, Any]) -> None:
        """Write one entry line (the caller holds the exclusive lock)."""
        assert self._fd is not None
        line = _encode(obj) + b"\n"
        if self._torn_tail:
            line = b"\n" + line  # never glue a new entry onto a torn line
        view = memoryview(line)
        try:
            while view:
                written = self._writer(self._fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "write returned no progress")
                view = view[written:]
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            log.error(
                "mirror write failed",
                extra={"fields": {"path": str(self.path), "errno": code, "bytes": len(line)}},
            )
            # Whatever reached the file is re-read (and a torn part skipped)
            # at the next append, which the size check in _locked triggers.
            raise MirrorError(
                f"cannot write mirror {self.path}: {os.strerror(exc.errno or 0)} ({code})"
            ) from None
        self._size += len(line)
        self._torn_tail = False

    def _append(self, key: str, build: EntryBuilder) -> bool:
        if not isinstance(key, str) or not key:
            raise ValueError("an idempotency key must be a non-empty string")
        with self._locked():
            return self._append_locked(key, build, self._leaf_id)

    def _append_locked(self, key: str, build: EntryBuilder, parent_id: str | None) -> bool:
        """Append under ``parent_id`` (the caller holds the exclusive lock)."""
        if key in self._keys:
            return False
        entry_id = entry_id_for_key(key)
        if entry_id in self._by_id:
            raise MirrorError(f"entry id {entry_id} of a new key is already taken in {self.path}")
        entry = build(entry_id, parent_id)
        entry["idempotencyKey"] = key
        self._write_line(entry)
        self._entries.append(entry)
        self._by_id[entry_id] = entry
        self._keys[key] = entry_id
        self._leaf_id = entry_id
        return True


    def _copy(self, entry: Mapping[str, Any]) -> int:
        """Append a copy of another file's entry unless it (or its key) is here."""
        entry_id = entry.get("id")
        if not isinstance(entry_id, str):
            return 0
        key = entry.get("idempotencyKey")
        with self._locked():
            if entry_id in self._by_id or (isinstance(key, str) and key in self._keys):
                return 0
            copy = dict(entry)
            self._write_line(copy)
            self._entries.append(copy)
            self._by_id[entry_id] = copy
            if isinstance(key, str):
                self._keys[key] = entry_id
            self._leaf_id = entry_id
        return 1


# -- the transcript mirror: what the entries mean -------------------------------


def _ms(iso: Any, default: int = 0) -> int:
    if isinstance(iso, (int, float)) and not isinstance(iso, bool):
        return int(iso)
    if not isinstance(iso, str):
        return default
    try:
        text = iso[:-1] + "+00:00" if iso.endswith("Z") else iso
        moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        return default
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return int(round(moment.timestamp() * 1000))


def _of_turn(key: str, turn_prefix: str, turn_id: str | None) -> bool:
    """``key`` starts with ``turn_prefix``, or (``turn_id`` given) is a key of
    that turn under any thread (a fork's mirror keeps its parent's keys for
    the turns it inherited)."""
    if key.startswith(turn_prefix):
        return True
    parts = key.split(":", 3)
    return turn_id is not None and len(parts) == 4 and parts[2] == turn_id


def _custom_builder(custom_type: str, data: Any, timestamp: int | None) -> EntryBuilder:
    when = now_ms() if timestamp is None else timestamp

    def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
        return {
            "type": "custom",
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": iso_timestamp(when),
            "customType": custom_type,
            "data": data,
        }

    return build


class _View(NamedTuple):
    """What :meth:`TranscriptMirror.messages` returned for a leaf and file size."""

    leaf: str | None
    size: int
    ident: tuple[int, int]
    messages: list[AgentMessage]
    compacted: bool


class TranscriptMirror(SessionFile):
    """One thread's OpenClaw session file: its context view and its appends.

    Create with :meth:`open` (or :meth:`fork`); use as a context manager or
    call :meth:`close`. Methods are synchronous and do blocking file I/O:
    from trio, call them through ``trio.to_thread.run_sync``.
    """

    def _reset_index(self) -> None:
        super()._reset_index()
        self._messages: dict[str, AgentMessage | None] = {}
        self._view: _View | None = None

    def _append_locked(self, key: str, build: EntryBuilder, parent_id: str | None) -> bool:
        view, size_before, leaf_before = self._view, self._size, self._leaf_id
        if not super()._append_locked(key, build, parent_id):
            return False
        assert self._leaf_id is not None
        self._follow_view(view, size_before, leaf_before, self._by_id[self._leaf_id], parent_id)
        return True

    # ------------------------------------------------------------------
    # the context view

    def _entry_message(self, entry: dict[str, Any]) -> AgentMessage | None:
        entry_id = entry["id"]
        if entry_id in self._messages:
            return self._messages[entry_id]
        message: AgentMessage | None = None
        raw = entry.get("message")
        role = raw.get("role") if isinstance(raw, dict) else None
        if role in AGENT_MESSAGE_ROLES:
            try:
                message = from_openclaw(raw)
            except msgspec.ValidationError as exc:
                log.warning(
                    "mirror message entry has a bad shape; skipped",
                    extra={"fields": {"path": str(self.path), "entryId": entry_id, "error": str(exc)[:200]}},
                )
        else:
            log.debug("mirror message role outside the contract; skipped", extra={"fields": {"role": str(role)[:64]}})
        self._messages[entry_id] = message
        return message

    def messages(self) -> list[AgentMessage]:
        """The session context along the leaf path, as OpenClaw builds it.

        Message entries become their AgentMessage; ``custom`` and other
        non-message entries are not context. After the latest ``compaction``
        entry on the path, the view is a ``CompactionSummaryMessage``, then
        the messages from ``firstKeptEntryId`` up to the compaction, then
        the messages after it.
        """
        with self._thread_lock:
            self.refresh()
            view = self._view
            if view is not None and view.leaf == self._leaf_id and view.size == self._size:
                return list(view.messages)
            out = self._extended(view) if view is not None else None
            compacted = False
            if out is None:
                out, compacted = self._compute_messages()
            self._view = _View(self._leaf_id, self._size, self._ident, out, compacted)
            return list(out)

    def cached_messages(self) -> list[AgentMessage] | None:
        """What :meth:`messages` returned last, if the file is still the same
        file and size (one ``stat`` and one ``fstat``; no lock, no read), else
        None. Lets the event loop skip a worker thread when nothing was
        written since, whoever the writer."""
        view, fd = self._view, self._fd
        if view is None or fd is None or view.leaf != self._leaf_id:
            return None
        try:
            st = os.fstat(fd)
            named = os.stat(self.path)
        except OSError:
            return None
        if st.st_size != view.size or self._stat_ident(named) != view.ident or self._stat_ident(st) != view.ident:
            return None
        return list(view.messages)

    def _extended(self, view: _View) -> list[AgentMessage] | None:
        """The last view plus the message entries appended after its leaf, when
        the new leaf descends from it through new entries only, none of them a
        compaction (the common case: a turn appended); else None."""
        if view.compacted or view.ident != self._ident or view.size > self._size:
            return None
        added: list[dict[str, Any]] = []
        current = self._by_id.get(self._leaf_id) if self._leaf_id else None
        budget = len(self._entries)
        while current is not None and current["id"] != view.leaf and budget > 0:
            if current.get("type") == "compaction":
                return None
            added.append(current)
            parent = current.get("parentId")
            current = self._by_id.get(parent) if isinstance(parent, str) else None
            budget -= 1
        if current is None and view.leaf is not None:
            return None  # not a descendant of the last view's leaf (a rewind, a branch)
        if current is not None and current["id"] != view.leaf:
            return None
        out = list(view.messages)
        for entry in reversed(added):
            if entry.get("type") == "message":
                message = self._entry_message(entry)
                if message is not None:
                    out.append(message)
        return out

    def _compute_messages(self) -> tuple[list[AgentMessage], bool]:
        """The whole path's view, and whether a compaction shaped it."""
        path = self._path_to_leaf()
        compaction_at = None
        for i in range(len(path) - 1, -1, -1):
            if path[i].get("type") == "compaction":
                compaction_at = i
                break
        out: list[AgentMessage] = []

        def add(entry: dict[str, Any]) -> None:
            if entry.get("type") == "message":
                message = self._entry_message(entry)
                if message is not None:
                    out.append(message)

        if compaction_at is None:
            for entry in path:
                add(entry)
            return out, False
        compaction = path[compaction_at]
        tokens_after = compaction.get("tokensAfter")
        out.append(
            CompactionSummaryMessage(
                summary=str(compaction.get("summary") or ""),
                tokens_before=int(compaction.get("tokensBefore") or 0),
                tokens_after=tokens_after if isinstance(tokens_after, int) else None,
                timestamp=_ms(compaction.get("timestamp")),
            )
        )
        first_kept = compaction.get("firstKeptEntryId")
        keeping = False
        for entry in path[:compaction_at]:
            keeping = keeping or entry["id"] == first_kept
            if keeping:
                add(entry)
        for entry in path[compaction_at + 1 :]:
            add(entry)
        return out, True

    def _follow_view(
        self, view: _View | None, size_before: int, leaf_before: str | None, entry: dict[str, Any], parent_id: str | None
    ) -> None:
        """Keep the cached view current across this mirror's own append of
        ``entry`` at the leaf (a message extends it, a custom entry leaves
        it as it is); anything else drops it."""
        self._view = None
        if view is None or view.size != size_before or view.leaf != leaf_before or parent_id != leaf_before:
            return
        kind = entry.get("type")
        if kind == "message":
            message = self._entry_message(entry)
            messages = [*view.messages, message] if message is not None else view.messages
        elif kind == "custom":
            messages = view.messages
        else:
            return
        self._view = view._replace(leaf=self._leaf_id, size=self._size, messages=messages)

    # ------------------------------------------------------------------
    # appending

    def append_message(self, message: AgentMessage, key: str) -> bool:
        """Append a ``message`` entry; False (nothing written) if ``key`` is present.

        The entry's timestamp is the message's own (ms).
        """
        body = to_openclaw(message)

        def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
            return {
                "type": "message",
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": iso_timestamp(message.timestamp),
                "message": body,
            }

        return self._append(key, build)

    def append_compaction(
        self,
        *,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        key: str,
        tokens_after: int | None = None,
        details: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> bool:
        """Append a ``compaction`` entry (model context: the summary replaces history).

        ``first_kept_entry_id`` names the first entry still sent after the
        summary; it must be an entry of this file. ``None`` keeps nothing
        from before the compaction (written as the compaction's own id, which
        OpenClaw's reader treats the same way).
        """
        if first_kept_entry_id is not None and first_kept_entry_id not in self._by_id:
            self.refresh()
            if first_kept_entry_id not in self._by_id:
                raise ValueError("first_kept_entry_id is not an entry of this mirror")
        when = now_ms() if timestamp is None else timestamp

        def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
            entry: dict[str, Any] = {
                "type": "compaction",
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": iso_timestamp(when),
                "summary": summary,
                "firstKeptEntryId": first_kept_entry_id or entry_id,
                "tokensBefore": tokens_before,
            }
            if tokens_after is not None:
                entry["tokensAfter"] = tokens_after
            if details is not None:
                entry["details"] = dict(details)
            return entry

        return self._append(key, build)

    def append_custom(self, custom_type: str, data: Any, key: str, *, timestamp: int | None = None) -> bool:
        """Append a ``custom`` entry (extension state; never model context)."""
        return self._append(key, _custom_builder(custom_type, data, timestamp))

    def rewind(
        self, turn_prefix: str, key: str, custom_type: str, data: Any, *, timestamp: int | None = None, turn_id: str | None = None
    ) -> bool:
        """Take the turn whose keys start with ``turn_prefix``, and every later
        one, off the session's context: a ``custom`` entry whose parent is the
        entry before that turn becomes the leaf, so the path to the leaf (what
        :meth:`messages` and OpenClaw read) skips them, and what comes next
        continues from there. The entries stay in the file (a branch, as
        OpenClaw's tree format allows). With ``turn_id``, that turn's keys
        under any thread id match too (a fork's inherited turns). False when
        ``key`` is present or the turn is not on the path."""
        with self._locked():
            if key in self._keys:
                return False
            path = self._path_to_leaf()
            at = next((i for i, e in enumerate(path) if _of_turn(str(e.get("idempotencyKey") or ""), turn_prefix, turn_id)), None)
            if at is None:
                return False
            parent = path[at - 1]["id"] if at > 0 else None
            return self._append_locked(key, _custom_builder(custom_type, data, timestamp), parent)

    def append_records(self, records: Iterable[Translated]) -> int:
        """Append translated records (``sidecar.translate``); returns how many were new.

        Stops at the first error (raised), so what came before it stays
        written and a retry with the same records appends only the rest.
        """
        added = 0
        for record in records:
            if isinstance(record, MirrorMessage):
                added += self.append_message(record.message, record.key)
            elif isinstance(record, NativeCompaction):
                added += self.append_custom(record.custom_type, record.data(), record.key, timestamp=record.timestamp)
            else:
                raise TypeError(f"not a mirror record: {type(record).__name__}")
        return added

    @classmethod
    def read_messages(cls, path: str | os.PathLike[str]) -> list[AgentMessage]:
        """The context view of the session file at ``path``, read under a
        shared lock without creating or writing anything (a file that does
        not exist or cannot be read raises ``MirrorError``)."""
        with cls._read_only(Path(path)) as file:
            return file.messages()
