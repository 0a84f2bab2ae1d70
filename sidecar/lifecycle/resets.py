"""OpenClaw's ``/new`` and ``/reset``: a new thread that begins a new engine session.

The rule is :func:`sidecar.session.identity.first_turn` (pure); this module
carries it out, in the order a SIGKILL at any instant leaves consistent:

1. the thread's binding (``bindings/<thread>.json``, via ``reset``): a later
   process resuming the thread finds the new session;
2. the relay id's session (``relays/<relay>.json``): OpenClaw's later threads
   of the session (a rotation, ``--local`` to the gateway) join the new
   session, not the one before the reset (a kill between 1 and 2 is repaired
   when the thread is opened again: ``repair_relay``);
3. the reset recorded in both transcripts (a ``custom`` entry
   ``codex-sidecar.reset``, keyed by the thread, so a replay adds nothing):
   the old session's says which session followed it, the new one's which it
   followed;
4. the engine's optional ``on_session_reset`` (under the deadline; an error is logged,
   nothing else changes).

Nothing of the old session is deleted: its transcript, its engine store and
its threads' records stay where they were.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from engines import SessionResetParams, optional_method

from ..session.identity import reset_session
from ..session.state import ThreadSession
from ..store import bindings
from ..store.mirror import MirrorError, TranscriptMirror, now_ms
from ..thread.files import Mirror
from ..thread.session_events import HistoryKnown, MirrorOpened
from ..thread.state import handle

if TYPE_CHECKING:
    from .sessions import Identity

log = logging.getLogger("codex_sidecar.lifecycle")

RESET_ENTRY = "codex-sidecar.reset"
"""The ``customType`` of the transcript entries that record a reset."""


async def begin(job: Identity, session: ThreadSession) -> bool:
    """Move the thread (its first turn not forwarded yet) onto a new engine
    session of its own. False, the thread left in its session, when the new
    session cannot be opened or bound (logged: the turn then goes on as a
    rotation would, fail open)."""
    old_id, old_key, old_via, old_mirror = session.session_id, session.session_key, session.via, session.mirror
    new_id = reset_session(session.thread_id)
    try:
        job.set_session(session, new_id, "reset")
        mirror = await trio.to_thread.run_sync(lambda: TranscriptMirror.open(session.path, new_id, session.cwd))
    except (OSError, MirrorError, ValueError) as exc:
        job.set_session(session, old_id, old_via)
        log.warning("OpenClaw reset the session but the new one could not be opened; the thread stays in the old one",
                    extra={"fields": job.calls.fields(session, error=type(exc).__name__)})
        return False
    if not await job.save_binding(session, "reset"):
        mirror.close()
        job.set_session(session, old_id, old_via)
        return False
    if session.relay is not None:
        await name_relay(job, session)
    handle(session, MirrorOpened(mirror))
    handle(session, HistoryKnown(False))
    await trio.to_thread.run_sync(_record, old_mirror, mirror, old_id, new_id, session.thread_id)
    if old_mirror is not None:
        old_mirror.close()
    log.info("OpenClaw reset the session: the thread begins a new engine session",
             extra={"fields": job.calls.fields(session, previousSessionId=old_id)})
    await _notify(job, session, old_id, old_key)
    return True


async def repair_relay(job: Identity, session: ThreadSession) -> None:
    """A thread that began a session at a reset, opened again: its relay id
    names that session unless a later reset moved it (a kill between the
    binding and the relay's record left none)."""
    if session.via != "reset" or session.relay is None:
        return
    known = await trio.to_thread.run_sync(bindings.load_relay, job.state_dir, session.relay)
    if known is None:
        await name_relay(job, session)


async def name_relay(job: Identity, session: ThreadSession) -> None:
    assert session.relay is not None
    record = bindings.RelaySession(session.relay, session.session_id, session.thread_id, session.via)
    try:
        await trio.to_thread.run_sync(bindings.save_relay, job.state_dir, record)
    except (OSError, ValueError) as exc:
        log.warning("the relay id's new session not persisted; a later thread of the session may join the old one",
                    extra={"fields": job.calls.fields(session, error=type(exc).__name__)})


def _record(old: Mirror | None, new: Mirror, old_id: str, new_id: str, thread_id: str) -> None:
    """The reset in both transcripts (best effort: the binding already holds it)."""
    key = f"reset:{thread_id}"
    at = now_ms()
    for mirror, data in ((old, {"nextSessionId": new_id, "threadId": thread_id}), (new, {"previousSessionId": old_id, "threadId": thread_id})):
        if mirror is None:
            continue
        try:
            mirror.append_custom(RESET_ENTRY, data, key, timestamp=at)
        except (OSError, MirrorError) as exc:
            log.warning("reset not recorded in a transcript", extra={"fields": {"threadId": thread_id, "error": type(exc).__name__}})


async def _notify(job: Identity, session: ThreadSession, old_id: str, old_key: str) -> None:
    """The engine's optional ``on_session_reset``: an engine without one sees the new
    session begin with an empty history, as any new session."""
    reset = optional_method(job.calls.engine, "on_session_reset")
    if reset is None:
        return
    params = SessionResetParams(
        session_id=session.session_id,
        session_key=session.session_key,
        previous_session_id=old_id,
        previous_session_key=old_key,
        session_file=str(session.path),
        runtime_context=job.calls.runtime(session, {}),
    )
    try:
        await job.calls.call(reset(params))
    except Exception as exc:  # fail open: the new session stands, the engine just was not told
        log.warning("context engine reset failed", extra={"fields": job.calls.fields(session, error=type(exc).__name__)})
