"""sidecar.session.identity: which OpenClaw session a Codex thread belongs to."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from engines import AssistantMessage, TextBlock, ThinkingBlock, ToolCallBlock, UserMessage
from sidecar.session.identity import decide, match_transcript, needles, normalise, relay_id, session_key


def openclaw_relay_id(agent: str, session_key: str) -> str:
    """As OpenClaw 2026.9 derives it (buildCodexNativeHookRelayId)."""
    digest = hashlib.sha256(f"openclaw:codex:native-hook-relay:v1\0{agent}\0{session_key}".encode()).hexdigest()
    return f"codex-{digest[:40]}"


RID = openclaw_relay_id("main", "agent:main:main")


def hook_command(rid: str, event: str = "permission_request") -> str:
    # OpenClaw's shellQuoteArgs form, with the per-process --generation.
    return (
        f"exec '/opt/node/bin/node' '/opt/openclaw/dist/native-hook-relay/entry.js' 'hooks' 'relay' '--provider' 'codex' "
        f"'--relay-id' '{rid}' '--generation' 'g-1764200000-42' '--event' '{event}' '--timeout' '4000'"
    )


def start_params(rid: str, **more) -> dict:
    group = [{"hooks": [{"type": "command", "command": hook_command(rid), "timeout": 5, "async": False}]}]
    return {"cwd": "/w", "config": {"features.hooks": True, "hooks.PermissionRequest": group, **more}}


def test_the_relay_id_is_read_where_openclaw_puts_it():
    assert relay_id(start_params(RID)) == RID
    assert relay_id({"threadId": "t", **start_params(RID)}) == RID  # thread/resume carries it the same way


def test_the_relay_id_is_read_unquoted_with_equals_and_in_the_nested_form():
    unquoted = {"config": {"hooks.PermissionRequest": [{"hooks": [{"command": f"exec node relay --relay-id {RID} --event x"}]}]}}
    equals = {"config": {"hooks.PermissionRequest": [{"hooks": [{"command": f"relay --relay-id={RID}"}]}]}}
    nested = {"config": {"hooks": {"PermissionRequest": [{"hooks": [{"command": f"relay --relay-id {RID}"}]}]}}}
    assert relay_id(unquoted) == relay_id(equals) == relay_id(nested) == RID


def test_another_hook_event_names_the_session_when_permission_request_is_off():
    params = {"config": {"hooks.PermissionRequest": [], "hooks.PreToolUse": [{"hooks": [{"command": hook_command(RID, "pre_tool_use")}]}]}}
    assert relay_id(params) == RID


def test_hooks_off_means_no_relay_id():
    off = {"config": {"features.hooks": False, "hooks.PreToolUse": [], "hooks.PostToolUse": [], "hooks.PermissionRequest": [], "hooks.Stop": []}}
    assert relay_id(off) is None
    assert relay_id({"cwd": "/w"}) is None


def test_two_sessions_named_at_once_name_neither():
    other = openclaw_relay_id("main", "agent:main:other")
    group = [{"hooks": [{"command": hook_command(RID)}, {"command": hook_command(other)}]}]
    assert relay_id({"config": {"hooks.PermissionRequest": group}}) is None


def test_a_near_miss_is_not_a_relay_id():
    for command in (f"--relay-id {RID}0", f"--relay-id {RID[:-1]}", f"--relay-idx {RID}", f"--relay-id codex-{'G' * 40}"):
        assert relay_id({"config": {"hooks.PermissionRequest": [{"hooks": [{"command": command}]}]}}) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_any_shape_of_params_never_raises(value):
    for params in (value, {"config": value}, {"config": {"hooks.PermissionRequest": value}}, {"config": {"hooks": {"PermissionRequest": value}}}):
        found = relay_id(params)
        assert found is None or (found.startswith("codex-") and len(found) == 46)


def test_the_binding_wins_then_the_relay_id_s_session_then_the_relay_id_then_the_thread():
    # A thread stays in the session it was bound to, whatever relay id a later process resumes it with.
    assert decide(relay=RID, bound="codex-old", thread_id="t1") == ("codex-old", "bound")
    assert decide(relay=None, bound="codex-old", thread_id="t1") == ("codex-old", "bound")
    assert decide(relay=RID, bound=None, thread_id="t1", relay_session="t0") == ("t0", "relay")
    assert decide(relay=RID, bound=None, thread_id="t1") == (RID, "relay")
    assert decide(relay=None, bound=None, thread_id="t1") == ("t1", "thread")


def test_session_key_templates_keep_working_and_never_raise():
    assert session_key("{thread_id}", RID) == RID
    assert session_key("agent:main:{thread_id}", RID) == f"agent:main:{RID}"
    assert session_key("{session_id}", RID) == RID
    assert session_key("{unknown}", RID) == RID
    assert session_key("{", RID) == RID


# ----------------------------------------------------------------------
# matching a continuity projection by content


def u(text: str, ts: int = 1) -> UserMessage:
    return UserMessage(content=text, timestamp=ts)


def a(text: str, ts: int = 1) -> AssistantMessage:
    return AssistantMessage(content=[TextBlock(text=text)], timestamp=ts)


HERON = [u("Remember the word heron for later."), a("Noted: heron."), u("What is 2+2?"), a("2+2 is 4.")]
OTTER = [u("Remember the word otter for later."), a("Noted: otter."), u("What is 3+3?"), a("3+3 is 6.")]


def rendered(messages) -> str:
    """The body OpenClaw renders (renderMessagesForCodexContext), with a
    thinking placeholder and a tool call line as its own parts would add."""
    chunks = []
    for m in messages:
        if m.role == "user":
            chunks.append(f"[user]\n{m.content}")
        else:
            chunks.append("[assistant]\n[thinking content omitted]\n" + "\n".join(b.text for b in m.content if isinstance(b, TextBlock)))
    return "\n\n".join(chunks)


def test_a_continuity_projection_names_the_session_it_renders():
    candidates = {"codex-heron": HERON, "codex-otter": OTTER}
    assert match_transcript(rendered(HERON), candidates) == "codex-heron"
    assert match_transcript(rendered(OTTER), candidates) == "codex-otter"


def test_older_context_cut_by_openclaw_still_matches_on_the_newest():
    text = rendered(HERON)
    assert match_transcript(text[len(text) // 2 :], {"codex-heron": HERON, "codex-otter": OTTER}) == "codex-heron"


def test_a_projection_of_no_known_session_matches_nothing():
    stranger = [u("Plan a trip to Lisbon please."), a("Here is a plan for Lisbon.")]
    assert match_transcript(rendered(stranger), {"codex-heron": HERON, "codex-otter": OTTER}) is None
    assert match_transcript("", {"codex-heron": HERON}) is None
    assert match_transcript(rendered(HERON), {}) is None


def test_two_sessions_that_render_alike_are_never_merged_on_a_guess():
    twin = list(HERON)
    assert match_transcript(rendered(HERON), {"codex-a": HERON, "codex-b": twin}) is None


def test_the_session_that_continued_is_preferred_to_its_earlier_copy():
    # A session forked earlier shares the old messages; the projection
    # renders the continued session's newest turn too.
    continued = [*HERON, u("And the capital of Peru?"), a("Lima is the capital of Peru.")]
    text = rendered(continued)
    assert match_transcript(text, {"codex-old": HERON, "codex-new": continued}) == "codex-new"


def test_tool_calls_and_thinking_in_the_mirror_do_not_hide_the_text():
    mirrored = [
        u("Run ls in the workspace please."),
        AssistantMessage(content=[ThinkingBlock(thinking="hmm"), ToolCallBlock(id="c1", name="shell", arguments={"cmd": "ls"}), TextBlock(text="The workspace holds README.md.")], timestamp=1),
    ]
    text = "[user]\nRun ls in the workspace please.\n\n[assistant]\n[thinking content omitted]\ntool call: shell [input omitted]\nThe workspace holds README.md."
    assert match_transcript(text, {"codex-s": mirrored}) == "codex-s"


def test_dollar_mentions_neutralised_by_openclaw_still_match():
    mirrored = [u("Use $skill-writer to draft this."), a("Drafted with $skill-writer.")]
    text = "[user]\nUse ＄skill-writer to draft this.\n\n[assistant]\nDrafted with ＄skill-writer."
    assert match_transcript(text, {"codex-s": mirrored}) == "codex-s"


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=6, max_size=40).filter(lambda t: len(t.strip()) >= 6)


@given(st.dictionaries(st.from_regex(r"codex-[0-9a-f]{8}", fullmatch=True), st.lists(words, min_size=2, max_size=6), min_size=1, max_size=5), st.data())
def test_matching_is_deterministic_whatever_the_candidates_order(sessions, data):
    candidates = {sid: [u(t) if i % 2 == 0 else a(t) for i, t in enumerate(texts)] for sid, texts in sessions.items()}
    target = data.draw(st.sampled_from(sorted(candidates)))
    text = rendered(candidates[target])
    forward = match_transcript(text, candidates)
    backward = match_transcript(text, dict(reversed(list(candidates.items()))))
    assert forward == backward
    if forward is not None and forward != target:
        # Named another: only one whose newest texts all appear in the rendering.
        assert all(n in normalise(text) for n in needles(candidates[forward]))
