"""No credential in the store: every shape the recordings' scanner knows
(``tests/relay/test_record_scanner.py``: 40 shapes, the four detect-secrets
misses included) planted in prompts, tool calls, tool outputs and a pasted
file is found nowhere in the store (the SQLite file, the PostgreSQL tables),
in any summary or in any request to the summary model, while the text
beside each credential (in the same prompt, command, output or arguments)
can still be found with ``lcm_grep``; the assembly still hands the model the
client's own copy of a raw message, and the client's messages are left whole."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from engines import (
    AgentMessage,
    AssistantMessage,
    CompactParams,
    TextBlock,
    ToolCallBlock,
    ToolCallParams,
    ToolResultMessage,
    UserMessage,
)
from engines.scrub import CREDENTIAL
from tests.relay.test_record_scanner import SHAPES

from . import conftest
from .conftest import SESSION, SMALL, T0, assemble, make_engine, run_turn


def fact(k: int) -> str:
    return f"quokka{k:02d}"


def near(k: int) -> str:
    """A word in the very string (or arguments) that carries shape ``k``:
    found only if the redaction took the credential and left its text."""
    return f"wombat{k:02d}"


def planted_turn(k: int, frame: dict) -> list[AgentMessage]:
    """One turn that carries shape ``k`` where its frame has it, with the
    word :func:`near` beside it and :func:`fact` in the turn's other messages."""
    ts = T0 + k * 10_000
    method, params = frame.get("method"), frame.get("params", {})
    item = params.get("item", {})
    prompt = f"step {fact(k)}: carry on"
    call = {"command": f"echo {fact(k)}"}
    output = f"ok {fact(k)}"
    if method == "turn/start":
        prompt = f"{near(k)} {params['input'][0]['text']}"
    elif method == "item/started":
        call = {"command": f"cd {near(k)} && {item['command']}"}  # (npm's rule takes the rest of its line)
    elif method == "rawResponseItem/completed":
        call = {**json.loads(item["arguments"]), "note": near(k)}
    elif method == "command/exec":
        call = {"command": params["command"], "env": params["env"], "note": near(k)}
    elif method == "item/completed":
        output = f"{item['aggregatedOutput']}\n{near(k)}"
    else:
        raise AssertionError(f"no place for {method}")
    cid = f"call_{k}"
    return [
        UserMessage(content=prompt, timestamp=ts),
        AssistantMessage(content=[ToolCallBlock(id=cid, name="bash", arguments=call)], timestamp=ts + 1),
        ToolResultMessage(tool_call_id=cid, tool_name="bash", content=[TextBlock(text=output)], is_error=False, timestamp=ts + 2),
        AssistantMessage(content=[TextBlock(text=f"done with {fact(k)}")], timestamp=ts + 3),
    ]


def pasted_file(ts: int) -> UserMessage:
    """Every shape again, as lines of a file the user pasted."""
    lines = []
    for k, (frame, _) in enumerate(SHAPES.values()):
        params = frame.get("params", {})
        item = params.get("item", {})
        text = (
            params["input"][0]["text"]
            if "input" in params
            else item.get("command") or item.get("arguments") or item.get("aggregatedOutput") or "\n".join(f"{n}={v}" for n, v in params["env"].items())
        )
        lines.append(f"# pasted{k:02d}\n{text}")
    return UserMessage(content=[TextBlock(text="review my config file please"), TextBlock(text="```\n" + "\n".join(lines) + "\n```")], timestamp=ts)


def cores() -> list[str]:
    return [core for _, core in SHAPES.values()]


def sqlite_bytes(state_dir: str) -> bytes:
    """Every file of the store (the database, its WAL), lower-cased."""
    return b"".join(p.read_bytes() for p in Path(state_dir).rglob("*") if p.is_file()).lower()


def postgres_text(url: str) -> str:
    """Every value of every row of every table of the store, as text, lower-cased."""
    import psycopg

    out: list[str] = []
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        assert {"messages", "summaries", "sessions", "large_outputs", "model_calls", "skipped_messages"} <= set(tables)
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                out.extend(bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, memoryview)) else str(v) for v in row)
    return "\n".join(out).lower()


async def _planted_conversation(host, config: dict | None = None):
    # A summary model that repeats what it is given: a credential in a
    # request would come back in the summary.
    host.answer_with(lambda params: params.prompt[-1500:])
    engine = await make_engine(host, config)
    history: list[AgentMessage] = []
    for k, (frame, _) in enumerate(SHAPES.values()):
        await run_turn(engine, history, planted_turn(k, frame))
    paste = pasted_file(T0 + 999 * 10_000)
    await run_turn(engine, history, [paste, AssistantMessage(content=[TextBlock(text="reviewed")], timestamp=paste.timestamp + 1)])
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    # A question with a credential in it goes to the summary model too.
    question = f"what did {fact(3)} do with ghp_PLANTEDquestionAbCdEfGhIjKlMnOpQrStU?"
    await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="q", name="lcm_expand_query", arguments={"query": question}))
    return engine, history, paste


async def test_no_planted_credential_reaches_the_store_its_summaries_or_the_summary_model(host, backend):
    assert len(SHAPES) >= 36
    # The pasted file is large enough to be kept out of line (its stand-in's summary in large_outputs).
    engine, history, paste = await _planted_conversation(host, {**SMALL, "large_output_tokens": 400, "large_output_summary_tokens": 100})
    await assemble(engine, history)
    assert engine.store.large_outputs(SESSION, 1), "the pasted file went out of line"
    summaries = engine.store.summaries(SESSION)
    assert len(summaries) >= 5 and any(s.depth >= 1 for s in summaries), "the conversation was summarised"
    requests = "\n".join(f"{c.system}\n{c.prompt}" for c in host.calls).lower()
    assert len(host.calls) >= 3 and CREDENTIAL.lower() in requests
    stored = postgres_text(backend) if backend else sqlite_bytes(host.state_dir).decode("utf-8", "replace")
    assert CREDENTIAL.lower() in stored
    texts = "\n".join(s.text for s in summaries).lower() + engine.store.session(SESSION).frame.decode().lower()
    leaks = {
        core: where
        for core in [*cores(), "PLANTEDquestion"]
        for where, text in (("store", stored), ("summaries", texts), ("summary model", requests))
        if core.lower() in text
    }
    assert leaks == {}


async def hits(engine, query: str) -> list[str]:
    """lcm_grep's hit lines for ``query`` (not its header, which repeats the query)."""
    result = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="g", name="lcm_grep", arguments={"query": query}))
    assert not result.is_error, result.text
    return [line for line in result.text.splitlines()[1:] if query in line]


async def test_the_text_around_a_credential_is_still_found(host, backend):
    engine, history, paste = await _planted_conversation(host)
    rows = [r.text for r in engine.store.messages_between(SESSION, 1)]
    for k in range(len(SHAPES)):
        # The word in the credential's own string is stored beside the
        # redacted credential and found; so are the turn's other messages.
        assert [t for t in rows if near(k) in t and CREDENTIAL in t], k
        assert await hits(engine, near(k)), k
        assert await hits(engine, fact(k)), k
    for k in (0, 7, len(SHAPES) - 1):
        assert await hits(engine, f"pasted{k:02d}"), k
    # The pasted file keeps every line but the credentials.
    stored = [m for m in engine.store.decode(engine.store.messages_between(SESSION, 1)) if isinstance(m, UserMessage) and not isinstance(m.content, str)]
    text = stored[-1].content[1].text
    assert [f"# pasted{k:02d}" in text for k in range(len(SHAPES))] == [True] * len(SHAPES)


async def test_the_assembly_hands_the_model_the_clients_own_copy(host, backend):
    engine, history, paste = await _planted_conversation(host)
    result = await assemble(engine, history)
    assert any(m is paste for m in result.messages), "the raw tail holds the client's message, credentials and all"
    stored = [m for m in engine.store.decode(engine.store.messages_between(SESSION, 1)) if isinstance(m, UserMessage) and not isinstance(m.content, str)]
    assert stored and CREDENTIAL in stored[-1].content[1].text  # while the store holds it redacted


async def test_the_clients_messages_are_left_whole(host, backend):
    """Redaction makes new messages: what the client handed over (its
    transcript's messages) still holds every credential."""
    engine, history, paste = await _planted_conversation(host)
    given = msgspec.json.encode(history).decode()
    assert [core for core in cores() if core not in given] == []


async def test_redact_secrets_false_stores_messages_as_they_are(host, backend):
    engine = await make_engine(host, {**SMALL, "redact_secrets": False})
    history: list[AgentMessage] = []
    frame, core = SHAPES["GitHub ghp_ token"]
    await run_turn(engine, history, planted_turn(0, frame), maintain=False)
    rows = engine.store.messages_between(SESSION, 1)
    assert any(core in r.text for r in rows)
    assert conftest.DATABASE_URL == backend
