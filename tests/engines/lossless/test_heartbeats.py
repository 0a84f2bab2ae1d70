"""Heartbeat and cron turns and ignored sessions: neither stored nor summarised by
default, the client's own history left whole, counted as skipped in status.

OpenClaw marks a heartbeat run with ``turn/start``'s ``turnTrigger:
"heartbeat"``; the sidecar passes it to the engine as ``is_heartbeat``
(the last test runs that path through the sidecar's lifecycle). A cron
run says ``turnTrigger: "cron"``, which reaches the engine as
``turn_trigger``."""

from __future__ import annotations

from engines import AfterTurnParams, AssembleParams, AssistantMessage, CompactParams, MaintainParams, TextBlock, UserMessage
from engines.lossless import LosslessEngine
from engines.lossless.config import LosslessConfig
from engines.lossless.skipping import heartbeat_split, ignored_session, turn_split
from tests.support.lifecycle import sidecar as open_sidecar

from .conftest import SESSION, SMALL, T0, make_engine, turn

HEARTBEAT_PROMPT = "Read HEARTBEAT.md if it exists. If nothing needs attention, reply HEARTBEAT_OK."


def heartbeat(n: int) -> list:
    ts = T0 + n * 10_000
    return [UserMessage(content=HEARTBEAT_PROMPT, timestamp=ts), AssistantMessage(content=[TextBlock(text="HEARTBEAT_OK")], timestamp=ts + 1)]


async def after(engine, history, new, *, is_heartbeat=False, key=SESSION, trigger=None):
    history.extend(new)
    await engine.after_turn(
        AfterTurnParams(
            session_id=SESSION,
            session_key=key,
            session_file="",
            messages=list(history),
            pre_prompt_message_count=len(history) - len(new),
            is_heartbeat=is_heartbeat,
            turn_trigger=trigger,
        )
    )


CRON_PROMPT = "[cron:nightly-report] Summarise yesterday's failed builds."


def cron_run(n: int) -> list:
    ts = T0 + n * 10_000
    return [UserMessage(content=CRON_PROMPT, timestamp=ts), AssistantMessage(content=[TextBlock(text="CRONREPORT: no failed builds")], timestamp=ts + 1)]


def stored_texts(engine) -> list[str]:
    return [r.text for r in engine.store.messages_between(SESSION, 1)]


def test_a_heartbeat_turn_keeps_only_what_came_before_its_prompt():
    cfg = LosslessConfig()
    assert heartbeat_split(cfg, True, 10, 7) == 7
    assert heartbeat_split(cfg, False, 10, 7) == 10
    assert heartbeat_split(LosslessConfig(skip_heartbeats=False), True, 10, 7) == 10


def test_a_cron_turn_is_skipped_like_a_heartbeat_unless_turned_off():
    cfg = LosslessConfig()
    assert turn_split(cfg, False, "cron", 10, 7) == (7, "cron")
    assert turn_split(cfg, True, "heartbeat", 10, 7) == (7, "heartbeat")
    assert turn_split(cfg, False, "user", 10, 7)[0] == 10
    assert turn_split(cfg, False, None, 10, 7)[0] == 10
    assert turn_split(LosslessConfig(skip_cron_turns=False), False, "cron", 10, 7)[0] == 10


def test_session_keys_are_matched_against_the_patterns():
    cfg = LosslessConfig()
    assert ignored_session(cfg, "agent:main:cron:nightly-report") and ignored_session(cfg, "cron:job-7")
    assert not ignored_session(cfg, "agent:main:main") and not ignored_session(cfg, None)
    assert ignored_session(LosslessConfig(ignore_session_patterns=("agent:*:hook:*",)), "agent:ops:hook:gmail")
    assert not ignored_session(LosslessConfig(ignore_session_patterns=()), "cron:job-7")


async def test_heartbeat_turns_are_neither_stored_nor_shown_and_status_counts_them(host):
    engine = await make_engine(host, {**SMALL, "cache_ttl": 0.0})
    history: list = []
    await after(engine, history, turn(1, tool=False))
    await after(engine, history, heartbeat(2), is_heartbeat=True)
    await after(engine, history, turn(3, tool=False))  # the snapshot still holds the heartbeat
    await after(engine, history, heartbeat(4), is_heartbeat=True)
    texts = stored_texts(engine)
    assert len(texts) == 4 and not [t for t in texts if "HEARTBEAT" in t]
    result = await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history)))
    assert not [m for m in result.messages if "HEARTBEAT" in str(m)]
    assert engine.status(SESSION)["skipped"] == {"heartbeat": 4}


async def test_cron_turns_are_neither_stored_nor_summarised_and_status_counts_them(host):
    engine = await make_engine(host, {**SMALL, "cache_ttl": 0.0})
    history: list = []
    for n in range(1, 25):
        await after(engine, history, cron_run(n) if n % 3 == 0 else turn(n), trigger="cron" if n % 3 == 0 else "user")
        await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
    texts = stored_texts(engine)
    assert texts and not [t for t in texts if "CRONREPORT" in t or "cron:nightly" in t]
    result = await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history)))
    assert not [m for m in result.messages if "CRONREPORT" in str(m)]
    assert engine.store.summaries(SESSION) and host.calls
    assert not [c for c in host.calls if "CRONREPORT" in c.prompt]
    assert engine.status(SESSION)["skipped"] == {"cron": 16}


async def test_cron_turns_are_stored_when_skip_cron_turns_is_off(host):
    engine = await make_engine(host, {**SMALL, "skip_cron_turns": False})
    history: list = []
    await after(engine, history, turn(1, tool=False), trigger="user")
    await after(engine, history, cron_run(2), trigger="cron")
    assert len([t for t in stored_texts(engine) if "CRONREPORT" in t]) == 1
    assert engine.status(SESSION)["skipped"] == {}


async def test_heartbeats_are_stored_when_skip_heartbeats_is_off(host):
    engine = await make_engine(host, {**SMALL, "skip_heartbeats": False})
    history: list = []
    await after(engine, history, turn(1, tool=False))
    await after(engine, history, heartbeat(2), is_heartbeat=True)
    assert len([t for t in stored_texts(engine) if "HEARTBEAT" in t]) == 2
    assert engine.status(SESSION)["skipped"] == {}


async def test_heartbeats_never_reach_a_summary(host):
    engine = await make_engine(host, {**SMALL, "cache_ttl": 0.0})
    history: list = []
    for n in range(1, 31):
        await after(engine, history, heartbeat(n) if n % 2 else turn(n), is_heartbeat=bool(n % 2))
        await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
    assert engine.store.summaries(SESSION), "the user turns alone should have been summarised"
    assert host.calls and not [c for c in host.calls if "HEARTBEAT" in c.prompt]


async def test_an_ignored_session_stores_nothing_and_assembles_the_clients_history(host):
    engine = await make_engine(host, {**SMALL, "cache_ttl": 0.0})
    key = "agent:main:cron:nightly-report"
    history: list = []
    for n in range(1, 12):
        result = await engine.assemble(AssembleParams(session_id=SESSION, session_key=key, messages=list(history)))
        assert result.messages == history and result.system_prompt_addition is None
        await after(engine, history, turn(n), key=key)
        maintained = await engine.maintain(MaintainParams(session_id=SESSION, session_key=key, session_file="", reason="turn"))
        assert not maintained.changed
    compacted = await engine.compact(CompactParams(session_id=SESSION, session_key=key, force=True))
    assert not compacted.compacted
    assert stored_texts(engine) == [] and not host.calls
    assert engine.status(SESSION)["skipped"] == {"session-pattern": len(history)}
    assert SESSION in engine.sessions()


async def test_openclaws_heartbeat_trigger_keeps_the_turn_out_of_the_store(tmp_path):
    """Through the sidecar: ``turn/start`` with ``turnTrigger: "heartbeat"``
    (what OpenClaw sends for a heartbeat run) between two user turns."""
    engine = LosslessEngine({"state_dir": str(tmp_path / "lossless")})
    async with open_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "first user turn", turnTrigger="user")
        await run.turn(tid, HEARTBEAT_PROMPT, turnTrigger="heartbeat")
        await run.turn(tid, "second user turn", turnTrigger="user")
        await run.turn(tid, HEARTBEAT_PROMPT, turnTrigger="heartbeat")
        session = run.lifecycle.sessions[tid].session_id
    texts = [r.text for r in engine.store.messages_between(session, 1)]
    assert "first user turn" in texts and "second user turn" in texts
    assert not [t for t in texts if "HEARTBEAT" in t], texts
    assert engine.status(session)["skipped"].get("heartbeat", 0) >= 2
    await engine.dispose()


async def test_openclaws_cron_trigger_keeps_the_turn_out_of_the_store(tmp_path):
    """Through the sidecar: ``turn/start`` with ``turnTrigger: "cron"`` (what
    OpenClaw sends for a scheduled job) after a user turn."""
    engine = LosslessEngine({"state_dir": str(tmp_path / "lossless")})
    async with open_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn(tid, "first user turn", turnTrigger="user")
        await run.turn(tid, CRON_PROMPT, turnTrigger="cron")
        await run.turn(tid, "second user turn", turnTrigger="user")
        session = run.lifecycle.sessions[tid].session_id
    texts = [r.text for r in engine.store.messages_between(session, 1)]
    assert "first user turn" in texts and "second user turn" in texts
    assert not [t for t in texts if "cron:nightly" in t], texts
    assert engine.status(session)["skipped"].get("cron", 0) >= 2
    await engine.dispose()
