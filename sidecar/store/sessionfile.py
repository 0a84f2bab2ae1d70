"""The session file: an OpenClaw session file as an append-only, keyed log.

Layout (OpenClaw's session format, tree version 4)::

    {"type":"session","version":4,"id":<session id>,"timestamp":<ISO>,"cwd":<cwd>}
    {"type":"message","id","parentId","timestamp","message":{<AgentMessage>},"idempotencyKey"}
    {"type":"compaction","id","parentId","timestamp","summary","firstKeptEntryId",
     "tokensBefore","tokensAfter"?,"details"?,"idempotencyKey"}
    {"type":"custom","id","parentId","timestamp","customType","data","idempotencyKey"}

Each append's ``parentId`` is the previous leaf (the last entry in the file),
so the file is one linear branch of OpenClaw's tree; entries written by other
tools (``model_change``, ``custom_message``, ...) are kept as they are.

:class:`SessionFile` is the file: opening, creating and forking it, the
session header, the index of its lines (entries by id and by idempotency
key, the leaf, the path to it), locking, torn lines, and writing one line.
What the entries mean to a model is :mod:`sidecar.store.mirror`'s.

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

Nothing here logs entry contents; logs carry paths, ids, line numbers, counts
and errnos.
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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Self

import msgspec

from .private import private_dir
from .records import skipped

log = logging.getLogger("codex_sidecar.mirror")

SESSION_VERSION = 4
FILE_MODE = 0o600
ID_HEX_CHARS = 16

Writer = Callable[[int, "bytes | memoryview"], int]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(dict[str, Any]).decode
"""A line is a JSON object (typed: anything else does not decode)."""


class EntryHead(msgspec.Struct):
    """What the index needs of every entry but the header, whatever its
    type (OpenClaw's own ``model_change``, ``custom_message``, ... too): a
    ``type`` and an ``id``, both strings. The rest of the entry is kept as
    written: it is copied verbatim into a fork, and what a ``message`` or
    ``compaction`` means is the mirror's to read."""

    type: str
    id: str


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
        self._lines = 0  # complete lines before _size: the next line's number is one more

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
        for number, raw in enumerate(lines, self._lines + 1):
            if raw.strip():
                self._index_line(raw, number)
        self._lines += len(lines)
        if tail:
            # No newline at the end: a writer died mid-write (or the disk
            # filled). A strict prefix of a JSON object never parses, so the
            # tail is either a whole entry that only lacks its newline (kept)
            # or a torn line (skipped). Either way the next append starts
            # with a newline.
            self._torn_tail = True
            if self._complete_entry(tail):
                self._index_line(tail, self._lines + 1)
            else:
                log.warning("mirror ends in a torn line; skipped", extra={"fields": {"path": str(self.path), "line": self._lines + 1}})
        elif data:
            self._torn_tail = False
        self._size = offset + len(data)

    @staticmethod
    def _complete_entry(raw: bytes) -> bool:
        try:
            _decode(raw)
            return True
        except (msgspec.DecodeError, UnicodeDecodeError):
            return False

    def _index_line(self, raw: bytes, number: int) -> None:
        try:
            obj = _decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            self._skipped += 1
            skipped(self.path, number, exc)
            return
        if obj.get("type") == "session":
            if not self.header:
                self.header = obj
            return
        if not self.header:
            raise MirrorError(f"{self.path} is not an OpenClaw session file (no session header first)")
        try:
            entry_id = msgspec.convert(obj, EntryHead).id
        except msgspec.ValidationError as exc:
            self._skipped += 1
            skipped(self.path, number, exc)
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
        """Every entry in file order, as OpenClaw JSON objects read from the file
        (the index may lack what a subclass keeps decoded: the mirror's messages)."""
        self.refresh()
        with self._read_only(self.path) as file:
            return file._entries

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
        self._lines += 2 if self._torn_tail else 1
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
