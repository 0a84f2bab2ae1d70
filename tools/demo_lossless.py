"""``make demo ENGINE=lossless``: the built-in ``lossless`` engine at work.

A real codex behind the sidecar, the fake model on loopback, a small token
budget so a dozen turns are enough. The conversation plants a fact early,
talks long enough for the engine to summarise it away, then asks for it back.
For every turn it prints the engine's assembly (summaries + raw messages,
tokens against the budget) and any compaction step; the summaries are written
by the model through ``host.complete`` on Codex threads the client never
sees. The fake model refuses to summarise the messages of one turn (the
Oceanarium): the engine writes an extractive stand-in, marked as such, and
compacts all the same. The last turn makes the model call ``lcm_grep``: the
sidecar answers it from the engine, and the client sees none of it. At the
end: the summary headers the model read, the summaries per depth (each
one's head, extractive ones marked), and the engine's status, as
``codex-sidecar engines lossless status`` shows it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from engines.lossless import status as lossless_status
from engines.lossless.summarize import SYSTEM_PROMPT
from sidecar.store.lossless_view import render_lossless, store_dir
from tools.client import AppServerClient
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import Failed, FakeModel, FunctionCall, Text, input_texts

CONFIG = """\
[engines.lossless]
token_budget = 1500
# a budget this small has no room for the recall tools' specs (~780 tokens) too
own_framing_tokens = 0
fresh_tail_tokens = 250
fresh_tail_messages = 2
leaf_chunk_tokens = 250
leaf_summary_tokens = 50
condensed_summary_tokens = 70
condense_fanout = 3
# room for summaries beside the 250-token fresh tail (the default 0.12 leaves none)
compact_target = 0.3
"""
FACT = "I booked the Hotel Avenida Palace, room 512, for the Lisbon trip."
TOPICS = [
    "the tram 28 route through Alfama",
    "pastel de nata bakeries in Belém",
    "fado houses in Bairro Alto",
    "the Oceanarium and Parque das Nações",
    "a day trip to Sintra's palaces",
    "sunset at the Miradouro da Senhora do Monte",
    "the LX Factory weekend market",
    "surfing lessons in Cascais",
    "the Gulbenkian museum and gardens",
    "Time Out Market for lunch",
]
RECALL = "Remind me: which hotel and room did I book?"
REFUSED = "Oceanarium"
"""Leaf summaries of messages naming this fail at the fake model (every retry too)."""
ROOT = Path(__file__).resolve().parent.parent


def _is_summary_call(body: dict) -> bool:
    return any(SYSTEM_PROMPT[:40] in t for t in input_texts(body, "developer"))


def _summary(body: dict) -> Text:
    """The fake model's summary: the first words of each source in the prompt."""
    prompt = input_texts(body, "user")[-1]
    heads = []
    for block in prompt.split("\n\n")[1:]:
        lines = block.splitlines()
        if len(lines) >= 2:
            heads.append(" ".join(lines[1].removeprefix("Summary: ").split()[:9]))
    return Text("Summary: " + "; ".join(heads))


def _outputs(body: dict) -> list[str]:
    return [str(i.get("output")) for i in body.get("input") or [] if i.get("type") == "function_call_output"]


def _reply(body: dict) -> Any:
    if _is_summary_call(body):
        prompt = input_texts(body, "user")[-1]
        if REFUSED in prompt and " messages (turns " in prompt.split("\n", 1)[0]:
            return Failed("the summariser is unavailable")
        return _summary(body)
    prompt = input_texts(body, "user")[-1]
    if RECALL in prompt:
        found = _outputs(body)
        if not found:
            return FunctionCall("lcm_grep", {"query": "hotel room booked"}, call_id="call_recall")
        hit = re.search(r"Hotel [A-Z]\w+ [A-Z]\w+, room \d+", found[-1].replace("[", "").replace("]", ""))
        return Text(f"You booked the {hit.group(0)} (found with lcm_grep)." if hit else "I could not find it.")
    return Text("Noted: " + " ".join(prompt.split()[:8]) + " …")


async def _settle(model: FakeModel, state_dir: Path, thread_id: str) -> None:
    """Until the model and the engine's store have been still a moment: the
    engine's background maintenance (summaries, a new frame) is done."""
    seen: tuple[Any, ...] = ()
    while True:
        figures = lossless_status(store_dir(state_dir), thread_id) if (store_dir(state_dir) / "lossless.sqlite3").exists() else {}
        now = (len(model.requests), model.in_flight, json.dumps(figures.get("summariesByDepth") if isinstance(figures, dict) else None))
        if now == seen and model.in_flight == 0:
            return
        seen = now
        await trio.sleep(0.8)


def summaries_by_depth(state_dir: Path, thread_id: str) -> list[str]:
    """The session's summaries, deepest first, each with its turns, who wrote
    it (``model``, or ``EXTRACTIVE`` for a stand-in) and its head."""
    from engines.lossless import DB_NAME, Store

    store = Store.open(store_dir(state_dir), DB_NAME)
    try:
        rows = store.summaries(thread_id)
    finally:
        store.close()
    lines: list[str] = []
    for depth in sorted({s.depth for s in rows}, reverse=True):
        group = [s for s in rows if s.depth == depth]
        what = "leaf summaries of messages" if depth == 0 else f"condensed from depth {depth - 1}"
        extractive = sum(s.fallback for s in group)
        lines.append(f"depth {depth} ({what}): {len(group)}, {len(group) - extractive} by the model, {extractive} extractive")
        for s in group:
            kind = "EXTRACTIVE" if s.fallback else "model"
            state = "condensed" if s.parent_id else "active"
            turns = f"turns {s.turn_lo}-{s.turn_hi}"
            lines.append(f"  {s.id} {turns:<11} {kind:<10} {state:<9} {' '.join(s.text.split())[:70]}")
    return lines


def rule(title: str) -> str:
    return f"── {title} " + "─" * max(4, 72 - len(title))


async def run(codex_bin: str, work: Path | None = None) -> int:
    """The demo, printed to stdout; its files go under ``work`` (the
    caller's, kept), else a temporary folder removed at the end."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="codex-sidecar-demo-lossless-") as tmp:
            return await run(codex_bin, Path(tmp))
    state_dir = work / "state"
    config = work / "sidecar.toml"
    config.write_text(CONFIG)
    prompts = [FACT] + [f"Tell me about {t}. " + " ".join(["I want practical details: opening times, prices, how to get there and what to skip."] * 14) for t in TOPICS] + [RECALL]
    with FakeModel() as model:
        model.script(*[_reply] * 400)
        home = make_codex_home(work / "codex-home", model.base_url)
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
        base.update(CODEX_SIDECAR_CODEX_BIN=codex_bin, CODEX_SIDECAR_ENGINE="lossless", CODEX_SIDECAR_STATE_DIR=str(state_dir), CODEX_SIDECAR_CONFIG=str(config))
        # The sidecar runs this checkout's code, whatever the interpreter has installed.
        base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = codex_env(home, base)
        print("$ CODEX_SIDECAR_ENGINE=lossless codex-sidecar app-server --listen stdio://")
        print("  config: " + "; ".join(CONFIG.strip().splitlines()[1:]))
        print(f"  the fake model refuses to summarise messages about the {REFUSED} (the engine falls back to extractive)")
        sidecar = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
        steps = 0
        async with AppServerClient.spawn(sidecar, env=env, cwd=str(work)) as client:
            await client.initialize()
            thread_id = await client.start_thread(cwd=str(work))
            for n, prompt in enumerate(prompts, 1):
                before = len(model.requests)
                done = await client.run_turn(thread_id, prompt, timeout=60)
                await _settle(model, state_dir, thread_id)
                replies = [
                    p["item"].get("text", "")
                    for p in client.notifications_for("item/completed", threadId=thread_id, turnId=done["turn"]["id"])
                    if p["item"].get("type") == "agentMessage"
                ]
                figures = lossless_status(store_dir(state_dir), thread_id)
                assert isinstance(figures, dict)
                assembly = figures.get("lastAssembly") or {}
                summaries = sum(1 for r in model.requests[before:] if _is_summary_call(r))
                print(rule(f"turn {n}"))
                print(f"user:      {prompt[:90]}{'…' if len(prompt) > 90 else ''}")
                for text in replies:
                    print(f"assistant: {text[:110]}")
                print(
                    f"assembly:  {assembly.get('frameSummaries', 0)} summaries + {assembly.get('rawMessages', 0)} raw messages, "
                    f"{assembly.get('tokens', 0)}/{assembly.get('budget', '-')} tokens"
                )
                if figures["compactionSteps"] > steps:
                    last = figures.get("lastCompaction") or {}
                    extractive = last.get("fallbackSummaries", 0)
                    print(
                        f"compacted: step {figures['compactionSteps']} after the turn: {last.get('leafSummaries', 0)} leaf + "
                        f"{last.get('condensedSummaries', 0)} condensed summaries ({summaries} model calls via host.complete, "
                        f"invisible to the client), tokens {last.get('tokensBefore')} -> {last.get('tokensAfter')}"
                    )
                    if extractive:
                        print(f"           {extractive} of them extractive: the summariser failed, the step went on with a stand-in")
                    steps = figures["compactionSteps"]
                turn_requests = [r for r in model.requests[before:] if not _is_summary_call(r)]
                calls = [i for r in turn_requests for i in r.get("input") or [] if i.get("type") == "function_call"]
                for call in calls[-1:]:
                    output = next((o for r in turn_requests for o in _outputs(r)), "")
                    print(f"recall:    the model called {call['name']}({call['arguments']}); the sidecar answered from the engine:")
                    for line in output.splitlines()[:4]:
                        print(f"           | {line[:110]}")
            frames = [line for line in client.received if b"call_recall" in line or b'"dynamicToolCall"' in line]
            listed = await client.request("thread/list", {})
        last_turn = [r for r in model.requests if not _is_summary_call(r)][-1]
        headers = [line for t in input_texts(last_turn) for line in t.splitlines() if line.startswith("[summary sum_")]
        print(rule("summaries the model read in the last turn"))
        for line in headers:
            print(f"  {line}")
        print(rule("what the client saw of the engine"))
        print(f"server requests for the recall tool: {len([r for r in client.server_requests if r.get('method') == 'item/tool/call'])}")
        print(f"frames naming the recall call:       {len(frames)}")
        print(f"threads in thread/list:              {len(listed['data'])} (the summariser's threads are not listed)")
        print(rule("summaries in the store, by depth"))
        for line in summaries_by_depth(state_dir, thread_id):
            print(line)
        print(rule("codex-sidecar engines lossless status"))
        for line in render_lossless([lossless_status(store_dir(state_dir), thread_id)]):  # type: ignore[list-item]
            print(line)
        print(f"\nstate folder: {state_dir}")
    return 0


if __name__ == "__main__":
    from tools.codex_home import find_codex_bin

    codex = find_codex_bin()
    if not codex:
        sys.exit("codex binary not found: run `make setup`")
    sys.exit(trio.run(run, os.path.abspath(codex)))
