"""sidecar.session.identity: OpenClaw's `/new` and `/reset`, and relay ids that
change per binding (OpenClaw's v2 hash with a generation), as pure rules.

What reaches the sidecar of a reset: a `thread/start` with the session's
relay id (OpenClaw keeps the session key and id) whose first turn carries no
continuity projection, although the session has history. A rotation (web
search off, tools changed, `--local` to the gateway) renders OpenClaw's
transcript into that first turn."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from sidecar.session.identity import decide, first_turn, relay_id, reset_session


def v1(agent: str, key: str) -> str:
    """OpenClaw 2026.9's relay id (codex plugin 2026.9.5: buildCodexNativeHookRelayId)."""
    return "codex-" + hashlib.sha256(f"openclaw:codex:native-hook-relay:v1\0{agent}\0{key}".encode()).hexdigest()[:40]


def v2(agent: str, key: str, generation: str) -> str:
    """The v2 of OpenClaw's source trees: the generation (a new one for each new binding) hashed in."""
    return "codex-" + hashlib.sha256(f"openclaw:codex:native-hook-relay:v2\0{agent}\0{key}\0{generation}".encode()).hexdigest()[:40]


def start(rid: str) -> dict:
    command = f"exec 'node' 'entry.js' 'hooks' 'relay' '--provider' 'codex' '--relay-id' '{rid}' '--generation' 'g' '--event' 'permission_request'"
    return {"config": {"hooks.PermissionRequest": [{"hooks": [{"type": "command", "command": command}]}]}}


def test_a_rotation_renders_the_transcript_and_keeps_the_session():
    assert first_turn(via="relay", had_history=True, projected=True) == "keep"


def test_no_projection_on_a_new_thread_of_a_session_with_history_is_a_reset():
    assert first_turn(via="relay", had_history=True, projected=False) == "reset"


def test_a_session_s_first_thread_is_no_reset():
    assert first_turn(via="relay", had_history=False, projected=False) == "keep"


def test_without_a_relay_id_nothing_names_a_session_to_reset():
    # Hooks off: the thread is its own session (it may still join one by content).
    assert first_turn(via="thread", had_history=False, projected=False) == "keep"
    assert first_turn(via="thread", had_history=False, projected=True) == "match"


def test_a_relay_id_nothing_knows_with_a_projection_is_matched_by_content():
    # A v2 relay id: a new one for the new binding, so its session holds nothing yet.
    assert first_turn(via="relay", had_history=False, projected=True) == "match"


def test_a_thread_that_already_began_or_joined_a_session_is_never_reset_again_at_once():
    for via, history, projected in itertools.product(("reset", "continuity", "bound"), (False, True), (False, True)):
        assert first_turn(via=via, had_history=history, projected=projected) == "keep"


def test_the_new_session_is_the_new_thread_s_own_and_the_same_in_every_process():
    assert reset_session("019a-t2") == "019a-t2" == reset_session("019a-t2")


def test_after_a_reset_the_relay_id_names_the_new_session_and_the_old_thread_keeps_the_old_one():
    rid = v1("main", "agent:main:main")
    assert relay_id(start(rid)) == rid
    # The thread of the reset, in a later process: its binding.
    assert decide(relay=rid, bound="t2", thread_id="t2") == ("t2", "bound")
    # OpenClaw's next thread of the session (a rotation): the relay's session now.
    assert decide(relay=rid, bound=None, thread_id="t3", relay_session="t2") == ("t2", "relay")
    # The thread before the reset keeps its session, were it resumed.
    assert decide(relay=rid, bound=rid, thread_id="t1", relay_session="t2") == (rid, "bound")


@pytest.mark.parametrize("processes", [2, 5])
def test_a_relay_id_that_changes_every_process_keeps_a_resumed_thread_in_its_session(processes):
    """v2-shaped ids, a new generation each process: read from the hooks like
    v1's, and the thread's binding keeps its session."""
    ids = [v2("main", "agent:main:main", f"gen-{n}") for n in range(processes)]
    assert len(set(ids)) == processes
    assert [relay_id(start(r)) for r in ids] == ids
    session, via = decide(relay=ids[0], bound=None, thread_id="t1")
    assert (session, via) == (ids[0], "relay")
    for rid in ids[1:]:
        assert decide(relay=rid, bound=session, thread_id="t1") == (ids[0], "bound")


def test_a_rotation_under_v2_ids_joins_the_session_by_content_and_a_reset_under_them_is_a_new_session():
    rid = v2("main", "agent:main:main", "gen-2")
    # The new thread's relay id names nothing known: a session with no history.
    assert decide(relay=rid, bound=None, thread_id="t2") == (rid, "relay")
    assert first_turn(via="relay", had_history=False, projected=True) == "match"  # a rotation: OpenClaw renders the transcript
    assert first_turn(via="relay", had_history=False, projected=False) == "keep"  # a reset: already a new session
