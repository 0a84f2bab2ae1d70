"""Helpers for the lossless engine's tests: a fake host and conversations."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engines import (
    AfterTurnParams,
    AgentMessage,
    AssembleParams,
    AssistantMessage,
    MaintainParams,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from engines.lossless import LosslessEngine
from engines.testkit import FakeHost

from .pgserver import ENV_PG_BIN, PgServer, find_pg_bin

SESSION = "thread-1"
T0 = 1_700_000_000_000

# Small sizes so that a few turns are enough to compact.
SMALL = {
    "token_budget": 2_000,
    "fresh_tail_tokens": 300,
    "fresh_tail_messages": 2,
    "leaf_chunk_tokens": 300,
    "leaf_summary_tokens": 40,
    "condensed_summary_tokens": 60,
    "condense_fanout": 3,
    "compact_target": 0.3,  # room for summaries beside a 300-token fresh tail
    "summary_timeout": 5.0,
    "step_deadline": 30.0,
    "own_framing_tokens": 0,  # these budgets are too small for the tools' ~780 tokens (see test_small_budgets)
}


# The database the engines of the running test use: None (the SQLite file in
# the host's state folder) or a PostgreSQL URL; set by the ``backend`` fixture.
DATABASE_URL: str | None = None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A throwaway PostgreSQL server for the whole run (see ``pgserver.py``)."""
    bindir, required = find_pg_bin()
    if bindir is None:
        pytest.skip(f"PostgreSQL is not installed (make test installs it and sets {ENV_PG_BIN})")
    server = PgServer(bindir)
    try:
        server.start()
    except Exception as exc:
        server.stop()
        message = f"cannot start PostgreSQL from {bindir}: {exc}"
        if required:
            pytest.fail(message)
        pytest.skip(message)
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request) -> Iterator[str | None]:
    """Each store test runs on both backends: None for SQLite, else a fresh
    PostgreSQL database's URL (also in ``DATABASE_URL`` for ``make_engine``)."""
    global DATABASE_URL
    if request.param == "sqlite":
        DATABASE_URL = None
        yield None
        return
    server: PgServer = request.getfixturevalue("pg_server")
    name, url = server.new_database()
    DATABASE_URL = url
    try:
        yield url
    finally:
        DATABASE_URL = None
        server.drop_database(name)


@pytest.fixture
def host(tmp_path, backend) -> Iterator[FakeHost]:
    with FakeHost(tmp_path / "state") as h:
        yield h


def words(n: int, seed: int) -> str:
    vocab = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
    return " ".join(vocab[(seed * 7 + i * 3) % len(vocab)] for i in range(n))


def turn(n: int, *, tool: bool = True, say: str | None = None, size: int = 40) -> list[AgentMessage]:
    """One turn: the user's prompt, optionally a tool call and its result, a reply."""
    ts = T0 + n * 10_000
    out: list[AgentMessage] = [UserMessage(content=say or f"turn {n}: {words(size, n)}", timestamp=ts)]
    if tool:
        call_id = f"call_{n}"
        out.append(AssistantMessage(content=[ToolCallBlock(id=call_id, name="bash", arguments={"command": f"echo {n}"})], timestamp=ts + 1))
        out.append(
            ToolResultMessage(
                tool_call_id=call_id, tool_name="bash", content=[TextBlock(text=f"output {n} {words(size, n + 1)}")], is_error=False, timestamp=ts + 2
            )
        )
    out.append(AssistantMessage(content=[TextBlock(text=f"reply {n}: {words(size // 2, n + 2)}")], timestamp=ts + 3))
    return out


def conversation(turns: int, **kwargs) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for n in range(1, turns + 1):
        out.extend(turn(n, **kwargs))
    return out


async def make_engine(host: FakeHost, config: dict | None = None) -> LosslessEngine:
    config = dict(SMALL if config is None else config)
    if DATABASE_URL is not None:
        config.setdefault("database_url", DATABASE_URL)
    engine = LosslessEngine(config)
    await engine.bind(host)
    return engine


async def run_turn(engine: LosslessEngine, history: list[AgentMessage], new: list[AgentMessage], *, maintain: bool = True, budget: int | None = None):
    """assemble (before the turn), after_turn with the full snapshot, maintain; returns the assembly."""
    result = await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history), token_budget=budget))
    history.extend(new)
    await engine.after_turn(
        AfterTurnParams(
            session_id=SESSION, session_key=SESSION, session_file="", messages=list(history), pre_prompt_message_count=len(history) - len(new), token_budget=budget
        )
    )
    if maintain:
        await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
    return result


async def assemble(engine: LosslessEngine, history: list[AgentMessage] | None = None, budget: int | None = None):
    return await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history or []), token_budget=budget))
