"""Which session each Codex thread belongs to, on disk.

One small JSON file a thread, ``<state_dir>/bindings/<thread id>.json``
(0600, folder 0700): ``{"thread", "session", "via"}``. Written when the
binding is made or changes (write to a temporary file, fsync, rename: a
SIGKILL leaves the old binding or the new one, never half of one), before
the thread's first turn is forwarded, so a later process that resumes the
thread finds its session even when ``thread/resume`` carries no clue.
Reading one thread's binding is one small read; listing a session's threads
(``inspect``) reads the folder.

Beside them, ``<state_dir>/relays/<relay id>.json`` (``{"relay", "session",
"thread", "via"}``): the session an OpenClaw hook relay id names now, when it
is not the relay id itself: after OpenClaw reset the session (``via``
``reset``: the new thread's session), or when a relay id nothing knew was
matched to a known session by content (``continuity``). Written like a
binding, before the turn that decided it goes on; nothing is ever deleted
(the session before a reset keeps its files).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from .inspect import inspect_path
from .mirror import session_path
from .private import private_dir
from .records import decode_file

_encode = msgspec.json.Encoder()


class Binding(msgspec.Struct, frozen=True):
    """``bindings/<thread>.json``: the thread's session, and how it was bound."""

    thread: str
    session: str
    via: str = ""


_binding = msgspec.json.Decoder(Binding)


def bindings_dir(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / "bindings"


def binding_path(state_dir: str | os.PathLike[str], thread_id: str) -> Path:
    """Beside the session mirrors; the same id rules (no path tricks)."""
    return bindings_dir(state_dir) / (session_path(state_dir, thread_id).stem + ".json")


def load(state_dir: str | os.PathLike[str], thread_id: str) -> Binding | None:
    """The thread's persisted binding; None when there is none (or it is
    unreadable: the thread then is its own session, as before any binding)."""
    try:
        path = binding_path(state_dir, thread_id)
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    binding = decode_file(data, _binding, path)
    if binding is None or binding.thread != thread_id:
        return None
    try:
        session_path(state_dir, binding.session)
    except ValueError:
        return None  # not a usable session id: never a path out of the folder
    return binding


def save(state_dir: str | os.PathLike[str], binding: Binding) -> None:
    """Persist ``binding`` atomically (raises OSError / ValueError)."""
    _write_atomic(binding_path(state_dir, binding.thread), binding)


def _write_atomic(path: Path, obj: Binding | RelaySession) -> None:
    """Write, fsync, rename: a SIGKILL leaves the old record or the new one."""
    private_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, _encode.encode(obj) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _all(state_dir: str | os.PathLike[str]) -> Iterator[Binding]:
    """Every readable binding on disk, in thread id order (a file whose name
    is not its thread's is left out)."""
    with contextlib.suppress(OSError):
        for entry in sorted(bindings_dir(state_dir).iterdir()):
            if entry.suffix != ".json":
                continue
            try:
                binding = decode_file(entry.read_bytes(), _binding, entry)
            except OSError:
                continue
            if binding is not None and entry.stem == binding.thread:
                yield binding


def threads_of(state_dir: str | os.PathLike[str], session_id: str) -> list[Binding]:
    """Every thread bound to ``session_id``, in thread id order."""
    return [binding for binding in _all(state_dir) if binding.session == session_id]


def served(state_dir: str | os.PathLike[str]) -> dict[str, str]:
    """What the sidecar has served, for ``engines lossless import``: id ->
    ``"session"`` for each session it keeps a transcript mirror of
    (``sessions/<session>.jsonl``: a thread that is its own session, or an
    OpenClaw session by its relay id), each session a binding names and each
    relay id it recorded; ``"bound"`` for each thread bound to a session
    (``bindings/``). An unreadable binding is left out."""
    out: dict[str, str] = {}
    state = Path(state_dir)
    with contextlib.suppress(OSError):
        for entry in (state / "sessions").iterdir():
            if entry.suffix == ".jsonl":
                out[entry.stem] = "session"
    with contextlib.suppress(OSError):
        for entry in (state / "relays").iterdir():
            if entry.suffix == ".json":
                out[entry.stem] = "session"
    for binding in _all(state):
        out[binding.session] = "session"
        out.setdefault(binding.thread, "bound")
    return out


def session_threads(state_dir: str | os.PathLike[str], name: str) -> tuple[str, list[Binding]]:
    """The session ``name`` stands for (a thread's bound session, else
    ``name`` itself) and its Codex threads, oldest binding first: the
    threads bound to it, and the session id itself when a thread of that id
    left a record (a session that began as a plain thread). Raises
    ``ValueError`` for a name unusable as an id."""
    bound = load(state_dir, name)
    session = bound.session if bound is not None else name
    session_path(state_dir, session)  # the id rules (raises ValueError)
    threads = threads_of(state_dir, session)

    def when(b: Binding) -> tuple[int, str]:
        try:
            return binding_path(state_dir, b.thread).stat().st_mtime_ns, b.thread
        except OSError:
            return 0, b.thread

    threads.sort(key=when)
    if all(b.thread != session for b in threads) and _has_records(state_dir, session):
        threads.insert(0, Binding(session, session, "thread"))
    return session, threads


def _has_records(state_dir: str | os.PathLike[str], thread_id: str) -> bool:
    return inspect_path(state_dir, thread_id).exists()


class RelaySession(msgspec.Struct, frozen=True):
    """``relays/<relay>.json``: the session a relay id names now, the thread
    that decided it, and why (``reset``, ``continuity``)."""

    relay: str
    session: str
    thread: str = ""
    via: str = ""


_relay = msgspec.json.Decoder(RelaySession)


def relay_path(state_dir: str | os.PathLike[str], relay: str) -> Path:
    return Path(state_dir) / "relays" / (session_path(state_dir, relay).stem + ".json")


def load_relay(state_dir: str | os.PathLike[str], relay: str) -> RelaySession | None:
    """The session ``relay`` names now, when a reset or a content match
    moved it; None when it names itself (or the record is unreadable)."""
    try:
        path = relay_path(state_dir, relay)
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    record = decode_file(data, _relay, path)
    if record is None or record.relay != relay:
        return None
    try:
        session_path(state_dir, record.session)
    except ValueError:
        return None
    return record


def save_relay(state_dir: str | os.PathLike[str], record: RelaySession) -> None:
    """Persist ``record`` atomically (raises OSError / ValueError)."""
    _write_atomic(relay_path(state_dir, record.relay), record)
