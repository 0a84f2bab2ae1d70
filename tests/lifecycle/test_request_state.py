"""A client request's state rides on the request (``msg.note``), and what
the thread must know of it (a revert unanswered, a native compaction under
way) is a count on the thread's state: no job keeps a table keyed by client
request id that a lost answer would leave behind."""

from __future__ import annotations

from pathlib import Path

import trio

from sidecar.lifecycle.reverts import Unanswered
from sidecar.session.state import new_session
from sidecar.thread import opening


def closed_session():
    session = new_session("t", "key", Path("/dev/null"))
    opening.closed(session)
    return session


def test_a_thread_is_not_released_while_codex_has_not_answered_its_native_compaction() -> None:
    session = closed_session()
    assert opening.releasable(session)
    opening.native_compaction_sent(session)
    opening.native_compaction_sent(session)
    opening.native_compaction_answered(session)
    assert not opening.releasable(session)
    opening.native_compaction_answered(session)
    assert opening.releasable(session)


def test_a_client_revert_s_answer_and_its_gate_timeout_end_its_wait_once() -> None:
    session = closed_session()
    last = trio.Event()
    opening.revert_sent(session, trio.Event())
    first = Unanswered(session)
    opening.revert_sent(session, last)
    second = Unanswered(session)
    first.end()  # Codex answered it ...
    first.end()  # ... and its gate's timeout came after: nothing more
    assert session.reverts_unanswered == 1 and not last.is_set() and not opening.releasable(session)
    second.end()
    assert session.reverts_unanswered == 0 and last.is_set() and opening.releasable(session)
