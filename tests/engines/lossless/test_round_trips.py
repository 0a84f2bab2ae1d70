"""What a turn costs in talk with the database: a steady-state turn
(``assemble`` + ``after_turn``) makes a fixed, small number of round trips to
PostgreSQL (the wall time of a loaded server is paid per trip), and runs the
same few statements on SQLite. Counted from the drivers' own traces
(:mod:`.roundtrips`), not timed."""

from __future__ import annotations

import pytest

from engines import AfterTurnParams, AssembleParams, MaintainParams

from .conftest import SESSION, make_engine, turn
from .roundtrips import counting

pytestmark = pytest.mark.trio

BUDGET = 2_000


async def measured_turns(host, warm: int, measured: int) -> list[tuple[int, int, list[str], list[str]]]:
    engine = await make_engine(host)
    history: list = []
    out = []
    for n in range(1, warm + measured + 1):
        new = turn(n, tool=n % 2 == 0)
        backend = engine.store.backend
        with counting(backend) as assembled:
            await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history), token_budget=BUDGET))
        history.extend(new)
        with counting(backend) as stored:
            await engine.after_turn(
                AfterTurnParams(
                    session_id=SESSION,
                    session_key=SESSION,
                    session_file="",
                    messages=list(history),
                    pre_prompt_message_count=len(history) - len(new),
                    token_budget=BUDGET,
                )
            )
        await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
        if n > warm:
            out.append((assembled.count, stored.count, assembled.statements, stored.statements))
    await engine.dispose()
    return out


def top_level(statements: list[str]) -> list[str]:
    """SQLite's statements without those its triggers run (``-- ...``)."""
    return [s for s in statements if not s.startswith("--")]


async def test_a_steady_turn_makes_a_fixed_few_round_trips(host, backend):
    """On PostgreSQL: ``after_turn`` two round trips (``BEGIN``, the
    session's lock and the one read together; the inserts with ``COMMIT``),
    ``assemble`` three (the session, its tail with its out-of-line records,
    the note of what it held) or four (the turns before the frame, when the
    tail holds few): at most six a turn, from ~25 before they were batched.
    On SQLite the same statements, the messages inserted in one batch.
    (psycopg prepares a statement on its fifth run, one more trip once per
    connection: the warm-up turns run every statement more often than that.)"""
    turns = await measured_turns(host, warm=30, measured=12)
    assembled = [a for a, _, _, _ in turns]
    stored = [s for _, s, _, _ in turns]
    if backend is None:
        assert max(assembled) <= 4
        for _, _, _, statements in turns:
            assert [s.split(" (")[0] for s in top_level(statements) if not s.startswith("INSERT INTO messages")] == [
                "BEGIN IMMEDIATE",
                "SELECT seq, turn FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1".replace("?", f"'{SESSION}'"),
                f"SELECT ident FROM messages WHERE session_id = '{SESSION}' AND ident IN",
                "INSERT INTO sessions",
                "COMMIT",
            ]
        return
    assert stored == [2] * len(turns)
    assert max(assembled) <= 4
    assert 3 in assembled
    assert max(a + s for a, s in zip(assembled, stored, strict=True)) <= 6
