"""The ``lossless`` engine across restarts, live: real codex 0.169.0, the fake
model, the sidecar as a process on a state folder that outlives it.

* A sidecar SIGKILLed (with its codex) while a compaction step's summary
  call is in flight: the next sidecar on the same state folder redoes the
  interrupted summary once, loses and repeats no message, the client's
  thread history is whole, and the next model request fits the budget.
* The same thread served by restarted sidecars and resumed twice by one
  client (bootstrap imports the session file, every ``after_turn`` hands
  over the whole snapshot again): every message is stored once, and
  ``lcm_grep`` finds each planted fact once.
* ``lcm_expand_query``: the question goes to the model on the sidecar's
  completion thread; the main context grows by the answer only.
* A shell output of about 1 MiB (some 380k tokens; well past the 60k of
  issue 27): stored whole, whole in the client's thread, replaced by the
  engine's stand-in in the next request, which fits the budget, and given
  back exactly by ``lcm_expand`` once ``lcm_grep`` found its id.

The store is read with the engine's own :class:`~engines.lossless.Store`
once the sidecar is gone. No assertion depends on timing.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from engines.lossless import DB_NAME, Store
from engines.lossless.summarize import SYSTEM_PROMPT
from engines.tokens import count_tokens
from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.live import TURN_TIMEOUT, finalized, sidecar
from tools.client import AppServerClient
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import FakeModel, FunctionCall, Hang, Text, input_texts, tool_outputs

pytestmark = needs_codex

BUDGET = 2000
# stale_slack = 0: the turn after a compaction step sends the model the
# engine's assembly and nothing older, so the request can be held to the budget.
COMPACTING = f"""\
stale_slack = 0

[engines.lossless]
token_budget = {BUDGET}
own_framing_tokens = 0
fresh_tail_tokens = 200
fresh_tail_messages = 2
leaf_chunk_tokens = 300
leaf_summary_tokens = 60
condensed_summary_tokens = 80
# room for summaries beside the 200-token fresh tail (the default 0.15 leaves 100)
compact_target = 0.3
summary_timeout = 100.0
step_deadline = 110.0
# One summary a call: the kill test cuts a step between two of them (batched
# calls are tested in tests/engines/lossless/test_batched_summaries.py).
summary_batch_size = 1
"""
# The summary call must still be in flight when the kill comes: the engine's
# deadline (and with it host.complete's) is far longer than the test needs.
ENGINE_DEADLINE = "120"
LABEL = re.compile(r"^\[((?:msg|sum)_[0-9a-f]{16}) ", re.MULTILINE)
# Codex's own framing items: not the conversation the engine assembles.
FRAMING = ("<environment_context>", "<skills_instructions>", "<permissions", "<collaboration_mode>", "<user_instructions>")


def env_for(tmp: Path, home: Path, config: str) -> dict[str, str]:
    (tmp / "sidecar.toml").write_text(config)  # never the developer's own config file
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
            "CODEX_SIDECAR_ENGINE": "lossless",
            "CODEX_SIDECAR_ENGINE_DEADLINE": ENGINE_DEADLINE,
            "CODEX_SIDECAR_STATE_DIR": str(tmp / "state"),
            "CODEX_SIDECAR_CONFIG": str(tmp / "sidecar.toml"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return codex_env(home, base)


def is_summary_call(body: dict) -> bool:
    return any(SYSTEM_PROMPT[:40] in t for t in input_texts(body, "developer"))


def source_ids(body: dict) -> list[str]:
    """The ids a summary request summarises, from its prompt's source labels."""
    return LABEL.findall(input_texts(body, "user")[-1])


SHELLS = ("bash", "sh", "dash", "zsh", "pyenv")
"""Names of the processes a login shell runs (``comm``, cut to 15 chars)."""


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    tree, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            tree.append(child)
            todo.append(child)
    return tree


def shells_in(tree: list[int]) -> list[int]:
    out = []
    for p in tree:
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith(SHELLS):
            out.append(p)
    return out


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "?"


def kill_tree(pid: int, shell_wait: float = 90.0) -> list[int]:
    """SIGKILL a process and every descendant (the sidecar, node, codex) at
    one instant: all are stopped first, so none sees another die.

    Never while codex runs a login shell (its shell snapshot at session
    start, a command): killed mid ``pyenv rehash`` that shell would leave
    ``~/.pyenv/shims/.pyenv-shim`` behind, and every later codex session
    with the real HOME would wait 60 s for it (tests/support/pyenv_lock.py
    fails the run if one appears). The wait outlasts those 60 s: a snapshot
    shell may itself wait for another's rehash lock (two full runs of three
    here saw one still running after 30 s); the failure names the command."""
    deadline = time.monotonic() + shell_wait
    while shells_in(process_tree(pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    tree = process_tree(pid)
    shells = shells_in(tree)
    assert not shells, f"codex still runs a login shell: killing it could leave a lock behind: {[command_of(p) for p in shells]}"
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in tree:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
    return tree


def open_store(tmp: Path) -> Store:
    return Store.open(tmp / "state" / "engines" / "lossless", DB_NAME)


def stored(tmp: Path, tid: str) -> list[tuple[str, str]]:
    """(role, text) of every message the engine stored for the thread, in order."""
    store = open_store(tmp)
    try:
        return [(r.role, r.text) for r in store.messages_between(tid, 1)]
    finally:
        store.close()


def summaries(tmp: Path, tid: str) -> list[tuple[Any, list[str]]]:
    store = open_store(tmp)
    try:
        return [(s, store.summary_sources(s.id)) for s in store.summaries(tid)]
    finally:
        store.close()


def last_assembly(tmp: Path, tid: str) -> dict[str, Any]:
    store = open_store(tmp)
    try:
        held = store.session(tid).last_assembly
    finally:
        store.close()
    assert held is not None
    return held


async def history(client: AppServerClient, tid: str) -> list[tuple[str, str]]:
    """(role, text) of every user and agent message in the client's thread/read."""
    read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
    out = []
    for turn in read["thread"]["turns"]:
        for item in turn["items"]:
            if item["type"] == "userMessage":
                out.append(("user", "".join(c.get("text", "") for c in item["content"])))
            elif item["type"] == "agentMessage":
                out.append(("assistant", item["text"]))
    return out


def conversation_tokens(request: dict) -> int:
    """Tokens of what the model read besides Codex's own framing (its base
    instructions, the first item, and the framing tags)."""
    texts = []
    for n, item in enumerate(request.get("input") or []):
        if n == 0 or item.get("type", "message") != "message":
            continue
        texts += [t for t in input_texts({"input": [item]}) if not t.startswith(FRAMING)]
    return sum(count_tokens(t) for t in texts)


def codex_side(client: AppServerClient) -> list[bytes]:
    """What the client got from Codex's side: everything but the answers to
    its own ``sidecar/...`` requests (whose status names the engine's tools)."""
    own = {json.loads(line).get("id") for line in client.sent if b'"sidecar/' in line}
    return [line for line in client.received if json.loads(line).get("id") not in own or b'"method"' in line]


def prompt(n: int, words: int = 25) -> str:
    return f"[t{n}] topic {n}: " + " ".join(f"w{n}x{k}" for k in range(words))


def reply_for(prompt_text: str) -> str:
    return "ack " + prompt_text.split("]", 1)[0].lstrip("[")


async def test_a_sidecar_killed_mid_summary_redoes_the_step_once_on_restart(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    summary_calls = itertools.count(1)
    hang = {"on": True}

    def model_reply(body: dict) -> Any:
        if is_summary_call(body):
            # The first summary of the step is written; the second hangs
            # until the kill (its connection drops with codex).
            if hang["on"] and next(summary_calls) >= 2:
                return Hang()
            ids = source_ids(body)
            return Text(f"MODEL-SUMMARY {ids[0]}..{ids[-1]}")
        return Text(reply_for(input_texts(body, "user")[-1]))

    # Long enough that the step starts (at 80% of the budget) while turns
    # go on, and the history passes the whole budget before the restart.
    prompts = [prompt(n) for n in range(24)]
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, COMPACTING)
        model.script(*[model_reply] * 500)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            for text in prompts:
                done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                await finalized(client, tid, done["turn"]["id"])
            # Maintenance runs in the background: wait for the step's second
            # summary call to reach the model, then kill everything.
            with trio.fail_after(TURN_TIMEOUT):
                while len(calls := [r for r in model.requests if is_summary_call(r)]) < 2:
                    await trio.sleep(0.05)
            assert client.process is not None
            killed = kill_tree(client.process.pid)
        assert len(killed) >= 3  # the sidecar, codex's node launcher, codex
        written, interrupted = source_ids(calls[0]), source_ids(calls[1])
        assert interrupted and not set(written) & set(interrupted)

        # The kill left the first summary written and the second not.
        before = summaries(tmp_path, tid)
        assert [sources for _, sources in before] == [written], before
        assert stored(tmp_path, tid) == [m for text in prompts for m in (("user", text), ("assistant", reply_for(text)))]
        assert sum(count_tokens(text) for _, text in stored(tmp_path, tid)) > BUDGET

        hang["on"] = False
        first_new = len(model.requests)
        after = prompt(99, words=3)
        async with sidecar(env, work) as client:
            await client.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            done = await client.run_turn(tid, after, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            await finalized(client, tid, done["turn"]["id"])
            seen = await history(client, tid)
        requests = model.requests[first_new:]

    conversation = [m for text in [*prompts, after] for m in (("user", text), ("assistant", reply_for(text)))]
    # The client's history is whole, and the store holds each message once.
    assert seen == conversation
    assert stored(tmp_path, tid) == conversation
    # The interrupted summary was made again, by the model this time, and no
    # source is summarised twice.
    made = summaries(tmp_path, tid)
    redone = [s for s, sources in made if sources == interrupted]
    assert len(redone) == 1 and not redone[0].fallback and redone[0].text.startswith("MODEL-SUMMARY"), made
    assert len([s for s, sources in made if sources == written]) == 1
    every_source = [i for _, sources in made for i in sources]
    assert len(every_source) == len(set(every_source)), made
    leaves = sorted((s.seq_lo, s.seq_hi) for s, _ in made if s.depth == 0)
    assert leaves[0][0] == 1 and all(b[0] == a[1] + 1 for a, b in itertools.pairwise(leaves)), leaves
    # Its summary calls came before the turn's model request (bootstrap
    # maintenance runs before the assembly), and that request holds the
    # summaries instead of the old messages, within the budget.
    turn_requests = [r for r in requests if not is_summary_call(r)]
    assert [is_summary_call(r) for r in requests] == [True] * (len(requests) - 1) + [False]
    (request,) = turn_requests
    texts = "\n".join(input_texts(request))
    assert "[summary sum_" in texts and after in texts
    assert prompts[0] not in texts
    assert conversation_tokens(request) <= BUDGET, conversation_tokens(request)
    assembled = last_assembly(tmp_path, tid)
    assert assembled["frameSummaries"] >= 1 and not assembled["overflow"], assembled


FACTS = {
    "quinoaberry": "Remember this: the llama is called Quinoaberry.",
    "marzipanfjord": "Remember this: the boat is moored at Marzipanfjord.",
    "tungstenowl": "Remember this: the password hint is tungstenowl.",
}
RECALL = "Recall every planted fact now."


async def test_replayed_ingestion_stores_each_message_once(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    words = list(FACTS)

    def model_reply(body: dict) -> Any:
        users = input_texts(body, "user")
        if users and users[-1] == RECALL:
            asked = len([i for i in body.get("input") or [] if i.get("type") == "function_call_output"])
            if asked < len(words):
                return FunctionCall("lcm_grep", {"query": words[asked]}, call_id=f"call_grep_{asked}")
            return Text("recalled")
        return Text(reply_for(users[-1]) if users[-1].startswith("[t") else "noted")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, "")
        model.script(*[model_reply] * 100)
        turns: list[str] = []

        async def run(client: AppServerClient, text: str) -> None:
            done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            await finalized(client, tid, done["turn"]["id"])
            turns.append(text)

        # Sidecar 1: two facts, then SIGKILLed as OpenClaw does.
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            await run(client, f"[t0] {FACTS['quinoaberry']}")
            await run(client, prompt(1, words=5))
            await run(client, f"[t2] {FACTS['marzipanfjord']}")
            assert client.process is not None
            kill_tree(client.process.pid)
        # Sidecar 2: the client resumes, runs a turn, resumes again, runs another.
        async with sidecar(env, work) as client:
            await client.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            await run(client, f"[t3] {FACTS['tungstenowl']}")
            await client.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            await run(client, prompt(4, words=5))
        # Sidecar 3: once more from the session file, and the model recalls.
        async with sidecar(env, work) as client:
            await client.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            await run(client, RECALL)
            seen = await history(client, tid)
            lines = codex_side(client)
        recall = [r for r in model.requests if input_texts(r, "user")[-1] == RECALL]

    def answer(text: str) -> str:
        return "recalled" if text == RECALL else reply_for(text) if text.startswith("[t") else "noted"

    conversation = [m for text in turns for m in (("user", text), ("assistant", answer(text)))]
    assert seen == conversation
    rows = stored(tmp_path, tid)
    assert Counter(rows) == Counter(conversation) and rows == conversation
    # The model's lcm_grep found each fact once (the message that planted it).
    assert len(recall) == len(words) + 1
    for n, word in enumerate(words):
        found = tool_outputs(recall[n + 1])[f"call_grep_{n}"]
        assert found.startswith(f"1 hit for '{word}'"), found
        assert found.lower().count(word) == 2, found  # the query echoed, then the one hit
    assert not [line for line in lines if b"call_grep" in line or b"lcm_grep" in line]


EXPAND_ASK = "ASK: what is the deploy key?"


async def test_expand_query_answers_from_the_originals_in_a_completion_thread(tmp_path):
    """``lcm_expand_query`` live: the engine's question goes to the model on
    the sidecar's own completion thread, and the main context gets only the
    answer and its ids (less than the call's ``max_tokens``)."""
    from engines.lossless.expand_query import SYSTEM_PROMPT as QUERY_PROMPT

    work = tmp_path / "work"
    work.mkdir()
    fact = "[t1] The deploy key is QUOKKA-5521, kept on host pg-marmot-3."

    def model_reply(body: dict) -> Any:
        if any(QUERY_PROMPT[:40] in t for t in input_texts(body, "developer")):
            asked = input_texts(body, "user")[-1]
            ids = LABEL.findall(asked)
            return Text(f"The deploy key is QUOKKA-5521 (on pg-marmot-3).\nSources: {ids[0] if ids else ''}")
        users = input_texts(body, "user")
        if users and users[-1] == EXPAND_ASK:
            if "call_query" in tool_outputs(body):
                return Text("answered")
            return FunctionCall("lcm_expand_query", {"query": "deploy key", "max_tokens": 300}, call_id="call_query")
        return Text(reply_for(users[-1]) if users[-1].startswith("[t") else "noted")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, "")
        model.script(*[model_reply] * 30)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            for text in [prompt(0), fact, prompt(2), EXPAND_ASK]:
                done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                await finalized(client, tid, done["turn"]["id"])
            lines = codex_side(client)
        asked = [r for r in model.requests if any(QUERY_PROMPT[:40] in t for t in input_texts(r, "developer"))]
        turn = [r for r in model.requests if input_texts(r, "user") and input_texts(r, "user")[-1] == EXPAND_ASK]

    assert len(asked) == 1 and "QUOKKA-5521" in input_texts(asked[0], "user")[-1]
    assert len(turn) == 2  # the call, then the answer read back
    answer = tool_outputs(turn[1])["call_query"]
    assert answer.startswith("The deploy key is QUOKKA-5521"), answer
    assert re.search(r"ids used: msg_[0-9a-f]{16}", answer), answer
    assert count_tokens(answer) <= 300
    # The main context grew by the call and its answer only.
    assert conversation_tokens(turn[1]) - conversation_tokens(turn[0]) < 300
    assert not [line for line in lines if b"lcm_expand_query" in line or b"QUOKKA-5521 (on" in line]


BIG_LAST_LINE = "END-OF-EXPORT marker 7781"


async def test_a_large_tool_output_is_kept_out_of_line_and_the_next_request_fits_the_budget(tmp_path):
    """A shell output of about 1 MiB (~380k tokens, as Codex keeps it): the
    store keeps it whole, the client's thread keeps it as Codex gave it, the
    next turn's request carries the engine's reference instead and stays
    within the budget, and the model gets the original back exactly through
    the sidecar's ``lcm_grep`` and ``lcm_expand`` (the engine suite's 60k-token
    test pages one through completely)."""
    from tools.fake_model import ShellCall

    work = tmp_path / "work"
    work.mkdir()
    script = work / "export.py"
    script.write_text(
        "for i in range(24000):\n"
        "    print(f'row {i} worker-{i % 7} batch {i * 7919 % 100003} checksum {i * 31337 % 99991}')\n"
        f"print({BIG_LAST_LINE!r})\n"
    )

    def model_reply(body: dict) -> Any:
        users = input_texts(body, "user")
        if users and users[-1] == "run the export":
            if tool_outputs(body):
                return Text("the export ran")
            return ShellCall(f"python3 {script}", call_id="call_export", login=False)
        if users and users[-1] == "show me the whole export":
            # Find the output with lcm_grep, then page it back with lcm_expand:
            # the first two pages in order, then the last one (the output is
            # about 1M characters; the engine suite pages a 60k-token one
            # through completely).
            outputs = tool_outputs(body)
            if "call_find" not in outputs:
                return FunctionCall("lcm_grep", {"query": BIG_LAST_LINE}, "call_find")
            found = re.search(r"msg_[0-9a-f]{16}", outputs["call_find"])
            pages = [outputs[f"call_page_{k}"] for k in itertools.takewhile(lambda k: f"call_page_{k}" in outputs, itertools.count())]
            if found is None or len(pages) == 3:
                return Text("that is the export, first pages and last")
            args: dict[str, Any] = {"id": found.group(0), "max_tokens": 4_000}
            if len(pages) == 1:
                args["offset"] = int(re.search(r"call lcm_expand with id=\S+ offset=(\d+)", pages[0]).group(1))
            elif len(pages) == 2:
                args["offset"] = int(re.search(r" of (\d+)\]", pages[0].split("\n", 1)[0]).group(1)) - 3_000
            return FunctionCall("lcm_expand", args, f"call_page_{len(pages)}")
        return Text(reply_for(users[-1]) if users and users[-1].startswith("[t") else "noted")

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, "")
        model.script(*[model_reply] * 80)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            for text in [prompt(0), "run the export", prompt(2), "show me the whole export"]:
                done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                await finalized(client, tid, done["turn"]["id"])
            read = await client.request("thread/read", {"threadId": tid, "includeTurns": True})
        after = [r for r in model.requests if input_texts(r, "user") and input_texts(r, "user")[-1].startswith("[t2]")]
        whole = [r for r in model.requests if input_texts(r, "user") and input_texts(r, "user")[-1] == "show me the whole export"]

    outputs = [
        item.get("aggregatedOutput") or ""
        for turn in read["thread"]["turns"]
        for item in turn["items"]
        if item["type"] == "commandExecution"
    ]
    assert outputs and BIG_LAST_LINE in outputs[0]  # the client's thread: as Codex gave it
    store = open_store(tmp_path)
    try:
        rows = [r for r in store.messages_between(tid, 1) if r.role == "toolResult"]
        assert rows and rows[0].tokens > 25_000, [r.tokens for r in rows]
        assert BIG_LAST_LINE in rows[0].text  # stored whole
    finally:
        store.close()
    assert len(after) == 1
    texts = json.dumps(after[0]["input"])
    # The sidecar's projection after the rebuild renders the engine's
    # stand-in (an ordinary tool result would be a one-line placeholder), so
    # the model sees the reference lcm_expand needs, once.
    assert "[tool result: bash ok, kept out of line]" in texts, texts[-3000:]
    assert texts.count(f"lcm_expand id={rows[0].id}") == 1, texts[-3000:]
    assert "row 12000 worker" not in texts  # the middle of the output is not in the request
    assert conversation_tokens(after[0]) <= 32_000
    # The original comes back through the sidecar's lcm_expand exactly, a
    # page at a time, once lcm_grep has found its id: each page is the
    # original's characters it names, the second follows the first, and the
    # last ends where the original ends.
    outputs = tool_outputs(whole[-1])
    original = rows[0].text
    assert rows[0].id in outputs["call_find"]
    spans = []
    for k in range(3):
        header, body = outputs[f"call_page_{k}"].split("\n", 1)
        head = re.match(rf"\[{rows[0].id} turn \d+ toolResult [^,]+, characters (\d+)-(\d+) of (\d+)\]$", header)
        assert head is not None, header
        a, b, total = (int(g) for g in head.groups())
        cut = re.search(r"\n\[… message cut at \d+ tokens: characters \d+-\d+ not shown; call lcm_expand with id=\S+ offset=\d+", body)
        assert total == len(original) and body[: cut.start() if cut else len(body)] == original[a:b]
        spans.append((a, b))
    assert spans[0][0] == 0 and spans[1][0] == spans[0][1] and spans[2][1] == len(original)
    assert BIG_LAST_LINE in original[spans[2][0] :]
