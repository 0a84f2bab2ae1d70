"""A compaction's ``custom_instructions`` (OpenClaw's ``/compact <text>``,
``sidecar/compact``) reach the summary model: in the system prompt of every
summary call of that step, on one line, bounded, credentials redacted."""

from __future__ import annotations

from engines import CompactParams, IngestBatchParams
from engines.lossless.summarize import BATCH_SYSTEM_PROMPT, INSTRUCTIONS_CHARS, SYSTEM_PROMPT, instructed

from .conftest import SESSION, SMALL, conversation, make_engine, run_turn, turn

GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_no_instructions_leave_the_system_prompt_as_it_is():
    assert instructed(SYSTEM_PROMPT, None) == SYSTEM_PROMPT
    assert instructed(SYSTEM_PROMPT, "  \n ") == SYSTEM_PROMPT


def test_instructions_follow_the_system_prompt_on_one_line():
    out = instructed(SYSTEM_PROMPT, "Keep every\nfile path\tverbatim.")
    assert out.startswith(SYSTEM_PROMPT)
    assert out.endswith(": Keep every file path verbatim.")


def test_instructions_are_bounded():
    out = instructed(SYSTEM_PROMPT, "x" * 50_000)
    assert len(out) <= len(SYSTEM_PROMPT) + INSTRUCTIONS_CHARS + 200
    assert out.endswith("…")


def test_a_credential_in_the_instructions_is_redacted_unless_redaction_is_off():
    assert GITHUB_TOKEN not in instructed(SYSTEM_PROMPT, f"the token {GITHUB_TOKEN} is obsolete")
    assert GITHUB_TOKEN in instructed(SYSTEM_PROMPT, f"the token {GITHUB_TOKEN} is obsolete", redact=False)


async def test_compact_with_custom_instructions_puts_them_in_every_summary_call(host):
    engine = await make_engine(host, {**SMALL, "summary_batch_size": 2})
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=conversation(10)))
    wish = f"Focus on decisions about the parser; forget {GITHUB_TOKEN}."
    result = await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION, custom_instructions=wish))
    assert result.ok and result.compacted
    assert host.calls, "the step asked the summary model"
    for call in host.calls:
        assert "Focus on decisions about the parser" in call.system
        assert GITHUB_TOKEN not in call.system
        assert call.system.startswith(BATCH_SYSTEM_PROMPT if "### EXCERPT" in call.prompt else SYSTEM_PROMPT)


async def test_instructions_hold_for_their_compaction_only(host):
    engine = await make_engine(host)
    history = conversation(6)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION, custom_instructions="Keep the numbers."))
    asked = len(host.calls)
    for n in range(7, 14):
        await run_turn(engine, history, turn(n, size=80))
    later = host.calls[asked:]
    assert later, "maintenance summarised the later turns"
    assert all("Keep the numbers." not in call.system for call in later)
