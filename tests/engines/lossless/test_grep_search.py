"""lcm_grep's sharper search: regex, since/before, the agent scope and
relevance order, each on SQLite and PostgreSQL (the ``host`` fixture runs
every async test on both backends), and the pure parts (agent of a session,
times given as text)."""

from __future__ import annotations

import datetime
import re
import time

import pytest

from engines import AssistantMessage, IngestBatchParams, TextBlock, ToolCallParams, UserMessage
from engines.lossless.search import agent_of, parse_time
from engines.lossless.tools import MAX_GREP_CHARS

from .conftest import SESSION, SMALL, T0, make_engine, run_turn, turn

DAY = 86_400_000


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat()


async def _say(engine, session: str, key: str, *texts: str, start: int = T0, step: int = 60_000) -> None:
    messages = [
        (UserMessage(content=t, timestamp=start + i * step) if i % 2 == 0 else AssistantMessage(content=[TextBlock(text=t)], timestamp=start + i * step))
        for i, t in enumerate(texts)
    ]
    await engine.ingest_batch(IngestBatchParams(session_id=session, session_key=key, messages=messages))


async def grep(engine, session: str = "s-a", key: str = "agent:main:a", **arguments):
    return await engine.call_tool(ToolCallParams(session_id=session, session_key=key, call_id="c1", name="lcm_grep", arguments=arguments))


def _ids(text: str) -> list[str]:
    return re.findall(r"^- ((?:msg|sum)_[0-9a-f]{16})", text, re.MULTILINE)


# ---------------------------------------------------------------- regex


async def test_regex_finds_what_words_cannot_newest_first(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", "ticket OPS-1207 is open", "ok", "then OPS-88 came in", "fine", "no ticket here: OPS-x")
    result = await grep(engine, query=r"OPS-\d+", regex=True)
    assert not result.is_error, result.text
    lines = result.text.splitlines()
    assert "(regex)" in lines[0] and "newest first" in lines[0]
    assert [("OPS-88" in line, "OPS-1207" in line) for line in lines[1:]] == [(True, False), (False, True)]
    any_case = await grep(engine, query=r"(?i)ops-1207\b", regex=True)
    assert len(_ids(any_case.text)) == 1


async def test_a_bad_regex_is_a_clear_error(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", "hello")
    result = await grep(engine, query="([unclosed", regex=True)
    assert result.is_error and "is not a regular expression" in result.text


# ---------------------------------------------------------------- time


async def test_since_and_before_keep_hits_inside_the_range(host):
    engine = await make_engine(host)
    texts = [f"deploy note {i}: kestrel rollout step {i}" for i in range(5)]
    await _say(engine, "s-a", "agent:main:a", *texts, step=DAY)  # one a day from T0
    result = await grep(engine, query="kestrel rollout", since=iso(T0 + DAY), before=iso(T0 + 3 * DAY), limit=20)
    assert not result.is_error, result.text
    assert sorted(re.findall(r"step (\d)", result.text)) == ["1", "2"]
    regex = await grep(engine, query=r"step \d", regex=True, since=iso(T0 + 3 * DAY))
    assert sorted(re.findall(r"step (\d)", regex.text)) == ["3", "4"]
    nothing = await grep(engine, query="kestrel", before=iso(T0))
    assert nothing.text.startswith("No match") and "before" in nothing.text


async def test_since_and_before_keep_summaries_that_overlap_the_range(host):
    host.answer_with(lambda params: "the osprey work went on")  # only the summaries say osprey
    engine = await make_engine(host, {**SMALL, "cache_ttl": 0.0})
    history: list = []
    for n in range(1, 15):
        await run_turn(engine, history, turn(n))
    summaries = engine.store.summaries(SESSION)
    leaves = sorted((s for s in summaries if s.depth == 0), key=lambda s: s.time_lo)
    since, before = leaves[1].time_hi, leaves[-2].time_lo
    inside = {s.id for s in summaries if s.time_hi >= since and s.time_lo < before}
    assert inside and inside != {s.id for s in summaries}
    for arguments in ({"query": "osprey"}, {"query": "osp.ey", "regex": True}):
        result = await grep(engine, session=SESSION, key=SESSION, since=iso(since), before=iso(before), limit=50, **arguments)
        assert set(_ids(result.text)) == inside, arguments


async def test_a_time_ago_is_counted_from_now(host):
    engine = await make_engine(host)
    now = int(time.time() * 1000)
    await _say(engine, "s-a", "agent:main:a", "old marlin fact", "x", "new marlin fact", start=now - 10 * DAY, step=5 * DAY)
    result = await grep(engine, query="marlin", since="2d")
    assert "new marlin" in result.text and "old marlin" not in result.text


async def test_bad_times_are_clear_errors(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", "hello")
    bad = await grep(engine, query="hello", since="last tuesday")
    assert bad.is_error and "is not a time" in bad.text
    reversed_ = await grep(engine, query="hello", since="2026-01-02", before="2026-01-01")
    assert reversed_.is_error and "since must be earlier than before" in reversed_.text


# ---------------------------------------------------------------- agent scope


async def test_scope_agent_searches_every_session_of_the_agent_and_no_other(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", "we talk about boats here")
    await _say(engine, "s-b", "agent:main:b", "the wifi password hint is heron")
    await _say(engine, "s-c", "agent:ops:c", "the heron in another agent")
    mine = await grep(engine, query="heron")
    assert mine.text.startswith("No match")
    result = await grep(engine, query="heron", scope="agent")
    assert not result.is_error
    assert "wifi password hint" in result.text and "another agent" not in result.text
    assert "session s-b" in result.text and "this agent's conversations" in result.text
    (found,) = _ids(result.text)
    expanded = await engine.call_tool(ToolCallParams(session_id="s-a", session_key="agent:main:a", call_id="c", name="lcm_expand", arguments={"id": found}))
    assert not expanded.is_error and "heron" in expanded.text
    foreign = await engine.call_tool(ToolCallParams(session_id="s-c", session_key="agent:ops:c", call_id="c", name="lcm_expand", arguments={"id": found}))
    assert foreign.is_error
    regex = await grep(engine, query=r"h.ron", regex=True, scope="agent")
    assert "wifi" in regex.text and "another agent" not in regex.text


async def test_the_agent_comes_from_openclaws_codex_home_when_the_key_has_none(host, monkeypatch, tmp_path):
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "oc" / "agents" / "work" / "agent" / "codex-home"))
    engine = await make_engine(host)
    await _say(engine, "codex-1", "codex-1", "the cabin is number 27")
    await _say(engine, "codex-2", "codex-2", "what is the cabin?")
    result = await grep(engine, session="codex-2", key="codex-2", query="cabin number", scope="agent")
    assert "session codex-1" in result.text


async def test_scope_agent_without_a_known_agent_says_so(host, monkeypatch):
    monkeypatch.delenv("CODEX_HOME", raising=False)
    engine = await make_engine(host)
    await _say(engine, "t1", "t1", "hello")
    result = await grep(engine, session="t1", key="t1", query="hello", scope="agent")
    assert result.is_error and "scope session" in result.text


# ---------------------------------------------------------------- relevance


async def test_full_text_hits_come_most_relevant_first_or_newest_first_when_asked(host):
    engine = await make_engine(host)
    filler = " ".join(f"word{i}" for i in range(80))
    await _say(
        engine,
        "s-a",
        "agent:main:a",
        "kestrel migration: the kestrel cluster moves, kestrel plan agreed",
        "ok",
        f"{filler} kestrel {filler}",
    )
    relevant = await grep(engine, query="kestrel")
    assert "most relevant first" in relevant.text.splitlines()[0]
    assert "kestrel plan" in relevant.text.splitlines()[1]
    newest = await grep(engine, query="kestrel", sort="newest")
    assert "newest first" in newest.text.splitlines()[0] and "word" in newest.text.splitlines()[1]


async def test_the_most_relevant_hit_is_found_among_more_matches_than_are_shown(host):
    """The ranking chooses among every candidate, not among the newest the
    answer has room for: the best match is the oldest of 150."""
    engine = await make_engine(host)
    filler = " ".join(f"word{i}" for i in range(60))
    await _say(engine, "s-a", "agent:main:a", "kestrel kestrel: the kestrel cutover plan, kestrel owners", *[f"{filler} kestrel {filler} #{i}" for i in range(150)])
    result = await grep(engine, query="kestrel", limit=5)
    assert not result.is_error, result.text
    assert len(_ids(result.text)) == 5 and "cutover plan" in result.text.splitlines()[1]


async def test_the_answer_is_bounded(host):
    engine = await make_engine(host)
    await _say(engine, "s-a", "agent:main:a", *[f"osprey {'x' * 20} " * 40 + f" #{i}" for i in range(60)])
    result = await grep(engine, query="osprey", limit=50)
    assert len(result.text) <= MAX_GREP_CHARS + 200
    assert all(len(line) < 500 for line in result.text.splitlines())


# ---------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("key", "home", "agent"),
    [
        ("agent:main:main", None, "main"),
        ("agent:ops:telegram:dm:42", "/x/agents/main/agent/codex-home", "ops"),
        ("codex-0123", "/home/u/.openclaw/agents/work/agent/codex-home", "work"),
        ("codex-0123", "/home/u/.openclaw/agents/work/agent/codex-home/", "work"),
        ("codex-0123", "/home/u/.codex", None),
        (None, None, None),
        ("agent::x", None, None),
    ],
)
def test_the_agent_of_a_session(key, home, agent):
    assert agent_of(key, home) == agent


def test_times_are_iso_or_a_time_ago():
    assert parse_time("2026-11-30", 0) == 1_795_996_800_000
    assert parse_time("1970-01-01T00:01Z", 0) == 60_000
    assert parse_time("1970-01-01T01:00+01:00", 0) == 0
    assert parse_time("3d", 10 * DAY) == 7 * DAY
    assert parse_time("90m", 100 * 60_000) == 10 * 60_000
    with pytest.raises(ValueError, match="not a time"):
        parse_time("soon", 0)


def test_on_sqlite_the_search_index_drives_the_query(tmp_path):
    # Joined the other way, SQLite walks the session's rows and runs the match
    # once per row: seconds for a rare word in a long session.
    from engines.lossless import Store
    from engines.lossless.search import GrepQuery, search

    store = Store.open(tmp_path)
    seen: list[str] = []
    store.backend.conn.set_trace_callback(seen.append)
    for sort in ("relevance", "newest"):
        for agent in (None, "main"):
            search(store, GrepQuery(match='"kestrel"', session_id="s", agent=agent, sort=sort))
    store.backend.conn.set_trace_callback(None)
    ranked = [sql for sql in seen if "bm25" in sql and "CROSS JOIN" in sql]
    assert len(ranked) == 8  # messages and summaries, each way
    for sql in ranked:
        plan = [row[3] for row in store.backend.conn.execute("EXPLAIN QUERY PLAN " + sql)]
        scans = [step for step in plan if step.startswith(("SCAN", "SEARCH"))]
        assert scans[0].startswith("SCAN") and "_fts VIRTUAL TABLE" in scans[0], plan
    store.close()


def _nodes(node: dict) -> list[dict]:
    """Every node of an EXPLAIN (FORMAT JSON) plan."""
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def _rows(node: dict) -> int:
    return int(node["Actual Rows"] * node["Actual Loops"])


@pytest.mark.postgres
def test_on_postgresql_only_the_candidates_are_ranked_whatever_the_plan(pg_server, monkeypatch):
    # Without statistics (a new store, before autovacuum's first ANALYZE) the
    # planner reads every match of the scope, then sorts them by pk: ranked
    # below the candidates' LIMIT, each of them was ranked, its text_tsv read
    # from TOAST (status with scope agent: 55-75 ms of CPU, not 15-25).
    from engines import UserMessage
    from engines.lossless import Store
    from engines.lossless import search as search_module
    from engines.lossless.messages import content_identity, identities
    from engines.lossless.search import GrepQuery, search, set_agent
    from engines.tokens import estimate_message_tokens

    monkeypatch.setattr(search_module, "FTS_CANDIDATES", 4)
    name, url = pg_server.new_database()
    store = Store.connect(url)
    try:
        for session in ("s-a", "s-b"):
            batch = [UserMessage(content=f"kestrel note {n} of {session}", timestamp=T0 + n) for n in range(15)]
            store.ingest(session, f"agent:main:{session}", batch, identities(batch, [content_identity(m) for m in batch]), estimate_message_tokens)
            set_agent(store, session, "main")
        ranked: list[tuple[str, tuple]] = []
        real = store.backend.execute
        monkeypatch.setattr(store.backend, "execute", lambda sql, params=(): (ranked.append((sql, tuple(params))) if "FROM messages x," in sql else None, real(sql, params))[1])
        store.backend.conn.execute("SET enable_indexscan = off")  # that plan: every match read, then sorted by pk
        for agent in (None, "main"):
            hits = search(store, GrepQuery(match='"kestrel"', session_id="s-a", agent=agent, limit=2))
            assert len(hits) == 2
        assert len(ranked) == 2
        for sql, params, matches in zip(*zip(*ranked, strict=True), (15, 30), strict=True):
            [[plan]] = store.backend.conn.execute("EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + store.backend._sql(sql), params).fetchall()
            nodes = _nodes(plan[0]["Plan"])
            assert max(_rows(n) for n in nodes if n.get("Relation Name") == "messages") >= matches  # the plan read every match
            # The nodes that compute the rank (one that passes it on shows it in parentheses).
            rankers = [n for n in nodes if any(out.startswith("ts_rank(") for out in n.get("Output", []))]
            assert rankers and sum(_rows(n) for n in rankers) <= 4, sql
    finally:
        store.close()
        pg_server.drop_database(name)
