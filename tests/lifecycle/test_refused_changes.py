"""What codex refuses of the sidecar's changes: the client's own request goes
instead (fail open), once, and the lifecycle books nothing of the change."""

from __future__ import annotations

import json

from tests.support.lifecycle import records_with
from tests.support.modes import LONG_REPLY, client_turn_starts, context_of, inspect_records, modes_sidecar, recall


async def test_a_projected_turn_codex_refuses_goes_again_as_the_client_sent_it(tmp_path, caplog):
    engine = recall(lambda prompt: f"RECALL<{prompt[-8:]}>")
    async with modes_sidecar(tmp_path, engine, script={"defaultReply": LONG_REPLY, "refuseAdditionalContext": 1}) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "Question one: the first?")
        await run.turn_ok(tid, "Question two: the second?")
        answers = [f for f in run.frames() if "method" not in f and ("turn" in (f.get("result") or {}) or "error" in f)]

    starts = run.child_lines("turn/start")
    (first_client, second_client) = client_turn_starts(run)
    # The projected request, refused; then the client's own bytes, under the same id.
    assert context_of(json.loads(starts[0])) is not None
    assert starts[1] == first_client
    assert context_of(json.loads(starts[2])) is not None  # the next turn is projected again
    assert len(starts) == 3
    # The client saw one answer a turn, no error.
    assert len(answers) == 2 and all("error" not in a for a in answers)
    assert [s["additionalContext"] for s in run.seen(tid)][0] is None
    # The refused projection is booked nowhere: the second turn's thread holds no stale snippet.
    first, second = inspect_records(run, tid)
    assert (first["projected"], first["fallback"], first["injected"]["channels"]) == (False, "codex-refused", [])
    assert second["staleHeld"] == 0
    assert records_with(caplog, "codex refused the sidecar's change to a request")


async def test_a_refusal_of_the_client_s_own_request_reaches_it_unchanged(tmp_path):
    """Nothing to fall back to: one request, one answer, codex's."""
    engine = recall(lambda prompt: "")  # projects nothing
    async with modes_sidecar(tmp_path, engine) as run:
        resp = await run.request("turn/start", {"threadId": "no-such-thread", "input": [{"type": "text", "text": "x", "text_elements": []}]})
    assert "error" in resp
    assert len(run.child_lines("turn/start")) == 1
