"""The context engine's lifecycle around every Codex turn.

This is the harness spec implemented at the protocol boundary. Each Codex
thread belongs to an OpenClaw session (:mod:`sidecar.session.identity`; a
thread with no clue to another is a session of its own, session id = thread
id), and the session's transcript mirror is an OpenClaw JSONL file under the
state directory.

Before a turn (``turn/start`` is held while this runs; other traffic flows):
read the mirror; bootstrap and bootstrap maintenance once, when history
exists; assemble with the mirrored messages, budget, tool names, model and
prompt; project the result into the turn's input; forward. Any engine error,
timeout or projection problem forwards the client's original request
(:mod:`.turns`).

After a turn (``turn/completed`` is forwarded first): mirror the turn's items
(the user's original prompt, never the projected text), idempotently by
Codex item id; then ``after_turn``, else ``ingest_batch``, else ``ingest``
per message, with the full mirrored snapshot; then turn maintenance, only
after a completed turn whose finalisation succeeded. The next turn of the
same thread waits for this; other threads never do (:mod:`.finalize`).

How the system prompt addition reaches the model: Codex fixes a thread's
developer instructions once it is loaded (a later ``thread/resume`` with new
ones is ignored), so the addition travels per turn in
``turn/start.additionalContext``, which Codex renders as a developer message
before that turn's input and keeps in the thread's history. It is sent on a
turn when it differs from the last one delivered on that thread, so an
unchanged addition is not stacked up in history turn after turn.
"""

from ..session.options import PROJECTION_MODES, LifecycleOptions
from ..session.state import ThreadSession, TurnState
from ..thread.planner import fingerprint
from .core import Lifecycle

__all__ = ["PROJECTION_MODES", "Lifecycle", "LifecycleOptions", "ThreadSession", "TurnState", "fingerprint"]
