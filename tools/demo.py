"""The main job, end to end: a context engine deciding what a real Codex sees.

``make demo`` runs this. It starts the fake model on loopback, launches
``codex-sidecar app-server --listen stdio://`` exactly the way OpenClaw would
(the sidecar spawns the real codex as its child) with the built-in
``transcript-budget`` engine selected, a small token budget and a config file
giving the engine a system prompt addition, and runs a short scripted
conversation. For every turn it prints:

* what the engine assembled, from the sidecar's per-turn inspection record
  (``sidecar/inspect``): how many messages the transcript mirror held, how
  many the engine kept within the budget and its token estimate, and how
  much of that the projection rendered into the turn;
* what the model received: every input item of the request body, with its
  role and size, read from the fake model, and the first lines of the
  projected context.

At the end it prints the ``lifecycle`` section of ``sidecar/status`` and
where the transcript mirror (an OpenClaw JSONL session file) lives.

``make demo ENGINE=lossless`` (``--engine lossless``) shows the built-in
``lossless`` engine instead: its summaries, written through the host, and a
recall tool call the sidecar answers (:mod:`tools.demo_lossless`).

With the default engine (``legacy``) the sidecar is a transparent relay
instead; ``tests/live/test_transparency.py`` checks that byte for byte.
No account, no network beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from sidecar.projection import CONTEXT_HEADER
from tools.client import AppServerClient
from tools.codex_home import codex_env, find_codex_bin, make_codex_home
from tools.fake_model import FakeModel, ShellCall, Text

ENGINE = "transcript-budget"
TOKEN_BUDGET = 120
ADDITION = "You are a concise travel assistant. Answer in one or two sentences."

CONVERSATION = [
    (
        "Hi! I'm Ada and I'm planning a trip to Lisbon in May.",
        [Text("Nice to meet you, Ada! Lisbon in May is lovely: warm days and fewer crowds than summer.")],
    ),
    (
        "Run `echo packing list: sunscreen, hat` and tell me what it printed.",
        [ShellCall("echo packing list: sunscreen, hat"), Text("It printed: packing list: sunscreen, hat.")],
    ),
    (
        "Suggest one day trip from Lisbon.",
        [Text("Sintra: palaces, gardens and forest walks, about forty minutes by train.")],
    ),
    (
        "What do you remember about me and my plans?",
        [Text("You are heading to Lisbon, packing sunscreen and a hat, and Sintra is on the list.")],
    ),
]

ADDITION_TAG = "<openclaw_system_prompt_addition>"
ROOT = Path(__file__).resolve().parent.parent
PREVIEW_LINES = 9


def _parts(item: dict) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if isinstance(p, dict)]


def _label(item: dict, index: int) -> str:
    """A short description of one Responses API input item."""
    kind = item.get("type", "message")
    if kind != "message":
        return kind
    role = item.get("role", "?")
    parts = _parts(item)
    first = parts[0] if parts else ""
    if role == "developer" and index == 0:
        return "developer  Codex base instructions"
    if role == "developer" and first.startswith(ADDITION_TAG):
        return "developer  system prompt addition (from the engine)"
    if role == "developer" and CONTEXT_HEADER in first:
        return "developer  projected context (additionalContext)"
    if role == "developer":
        return "developer  Codex skills / permissions"
    if role == "user" and first.startswith("<environment_context>"):
        return "user       environment context"
    if role == "user" and first.startswith(CONTEXT_HEADER):
        return "user       projected context + request" if len(parts) > 1 else "user       projected context"
    return f"{role:<10} {first[:40]!r}"


def new_from(request: dict, previous: dict | None) -> int:
    """Index of the first item this request adds to the previous one.

    Codex re-sends its thread history as a prefix of every request; when the
    prefix is gone the sidecar rebuilt the history, and every item counts.
    """
    before = (previous or {}).get("input") or []
    items = request.get("input") or []
    return len(before) if before and items[: len(before)] == before else 0


def describe_input(request: dict, previous: int) -> list[str]:
    """One line per input item: number, description, size; new items marked."""
    rows = []
    for n, item in enumerate(request.get("input") or []):
        parts = _parts(item) if item.get("type", "message") == "message" else [json.dumps(item)]
        sizes = " + ".join(str(len(p)) for p in parts)
        mark = "new" if n >= previous else "   "
        rows.append(f"{mark} {n + 1:>2}. {_label(item, n):<55} {sizes:>12} chars")
    return rows


def projected_context(request: dict, previous: int) -> str | None:
    """This turn's projected context: the newest text carrying the header
    among the items new in this request (older ones are Codex's history)."""
    for item in reversed((request.get("input") or [])[previous:]):
        if item.get("type", "message") == "message":
            for part in _parts(item):
                if CONTEXT_HEADER in part:
                    return part[part.index(CONTEXT_HEADER) :]
    return None


async def inspected(client: AppServerClient, thread_id: str, turn_id: str) -> dict:
    """This turn's inspection record, once the sidecar finalised the turn."""
    with trio.fail_after(30):
        while True:
            result = await client.request("sidecar/inspect", {"threadId": thread_id})
            for record in result.get("turns") or []:
                if record.get("turnId") == turn_id:
                    return record
            await trio.sleep(0.05)


def describe_engine(record: dict) -> list[str]:
    assembled = record.get("assembled") or {}
    injected = record.get("injected") or {}
    history, kept = record.get("historyMessages"), assembled.get("count")
    if kept is None:
        return [f"  not applied ({record.get('fallback')}): the original request went through"]
    lines = [
        f"  transcript mirror before the turn: {history} messages -> assembled {kept}"
        + (f" (dropped the oldest {history - kept})" if history and history > kept else "")
        + f", ~{assembled.get('estimatedTokens')} tokens with the addition"
    ]
    if kept:
        shown = ", ".join(f"{role} {chars}" for role, chars in assembled.get("messages") or [])
        lines.append(f"  assembled (role, text chars): {shown}")
    rendered, dropped = injected.get("rendered", 0), injected.get("dropped", 0)
    mode = f"  projection {record.get('mode')}"
    if record.get("rebuilt") and record.get("switched"):
        lines.append(f"{mode}: history rebuilt on a fresh Codex thread started ahead of time (the client still sees its own thread id)")
    elif record.get("rebuilt"):
        lines.append(f"{mode}: history rebuilt in place (Codex's thread reverted to its framing)")
    if injected.get("contextChars"):
        where = "additionalContext" if any("openclaw_context" in c for c in injected.get("channels") or []) else "the turn input"
        lines.append(
            f"  projected {rendered} of the {kept} into {where}, {injected['contextChars']} chars"
            + (f" ({dropped} left out by the projection's {TOKEN_BUDGET * 4}-char budget)" if dropped else "")
        )
    elif kept:
        lines.append(f"{mode}: nothing projected, Codex's own history already holds the assembly")
    else:
        lines.append(f"{mode}: nothing to project yet")
    return lines


def rule(title: str) -> str:
    return f"── {title} " + "─" * max(4, 72 - len(title))


async def run(codex_bin: str, work: Path) -> int:
    state_dir = work / "state"
    config = work / "sidecar.toml"
    # stale_slack = 0: rebuild as soon as the engine drops anything. The
    # default slack lets a thread keep up to 4,000 characters the engine
    # dropped (a revert costs Codex tens of ms), more than this whole demo.
    config.write_text(f"stale_slack = 0\n\n[engines.{ENGINE}]\nsystem_prompt_addition = {json.dumps(ADDITION)}\n")
    with FakeModel() as model:
        home = make_codex_home(work / "codex-home", model.base_url)
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
        base.update(
            CODEX_SIDECAR_CODEX_BIN=codex_bin,
            CODEX_SIDECAR_ENGINE=ENGINE,
            CODEX_SIDECAR_TOKEN_BUDGET=str(TOKEN_BUDGET),
            CODEX_SIDECAR_STATE_DIR=str(state_dir),
            CODEX_SIDECAR_CONFIG=str(config),
            # The sidecar runs this checkout's code, whatever the interpreter has installed.
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        )
        env = codex_env(home, base)
        sidecar = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
        print(f"$ CODEX_SIDECAR_ENGINE={ENGINE} CODEX_SIDECAR_TOKEN_BUDGET={TOKEN_BUDGET} \\")
        print(f"  CODEX_SIDECAR_CONFIG={config} \\")
        print("  codex-sidecar app-server --listen stdio://")
        print(f"  config: stale_slack = 0 (rebuild on any drop); [engines.{ENGINE}] system_prompt_addition = {ADDITION!r}")
        async with AppServerClient.spawn(sidecar, env=env, cwd=str(work)) as client:
            info = await client.initialize()
            print(f"initialize -> userAgent {info['userAgent']!r} (passed through untouched)\n")
            thread_id = await client.start_thread(cwd=str(work))
            previous: dict | None = None
            rebuilt = False
            for n, (prompt, replies) in enumerate(CONVERSATION, 1):
                before = len(model.requests)
                model.script(*replies)
                done = await client.run_turn(thread_id, prompt, timeout=60)
                turn = done["turn"]
                record = await inspected(client, thread_id, turn["id"])
                replies_seen = [
                    p["item"].get("text", "")
                    for p in client.notifications_for("item/completed", threadId=thread_id, turnId=turn["id"])
                    if p["item"].get("type") == "agentMessage"
                ]
                print(rule(f"turn {n} ({turn['status']})"))
                print(f"user:      {prompt}")
                for text in replies_seen:
                    print(f"assistant: {text}")

                print(f"\nengine {ENGINE}, budget {TOKEN_BUDGET} tokens (sidecar/inspect):")
                for line in describe_engine(record):
                    print(line)
                rebuilt = rebuilt or bool(record.get("rebuilt"))

                for i, req in enumerate(model.requests[before:], 1):
                    items = req.get("input") or []
                    print(f"\nmodel request {n}.{i}: {len(items)} input items")
                    start = new_from(req, previous)
                    for row in describe_input(req, start):
                        print(f"  {row}")
                    context = projected_context(req, start) if i == 1 else None
                    previous = req
                    if i == 1:
                        present = any(
                            item.get("role") == "developer" and any(p.startswith(ADDITION_TAG) for p in _parts(item))
                            for item in items
                        )
                        print(f"  system prompt addition {'is' if present else 'is NOT'} in the model's input")
                    if context:
                        lines = context.splitlines()
                        print(f"  projected context, first {min(PREVIEW_LINES, len(lines))} of {len(lines)} lines:")
                        for line in lines[:PREVIEW_LINES]:
                            print(f"    | {line}")
                print()
            status = await client.request("sidecar/status")
        print(rule("sidecar/status lifecycle section"))
        print(json.dumps(status.get("lifecycle"), indent=2))
        print(f"\ntranscript mirror (OpenClaw JSONL): {state_dir / 'sessions' / (thread_id + '.jsonl')}")
        print(
            "\nThe model's input is Codex's own thread history (re-sent on every request) plus what\n"
            "the sidecar projects. 'new' marks the items a request added to the previous one."
        )
        if rebuilt:
            print(
                "When the engine dropped messages Codex still held, the sidecar rebuilt the model's\n"
                "history: by reverting Codex's thread in place, or by moving the client's thread onto a\n"
                "Codex thread started ahead of time (the client only ever sees its own thread id), so\n"
                "the model got the engine's assembly and nothing older."
            )
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codex-bin", default=find_codex_bin())
    ap.add_argument("--keep", action="store_true", help="keep the demo's folder (state dir, config, Codex home) for a look afterwards")
    ap.add_argument(
        "--engine",
        choices=(ENGINE, "lossless"),
        default=ENGINE,
        help="lossless: summaries through the host and a recall tool call (tools/demo_lossless.py)",
    )
    args = ap.parse_args()
    if not args.codex_bin:
        sys.exit("codex binary not found: run `make setup` or pass --codex-bin")
    work = Path(tempfile.mkdtemp(prefix="codex-sidecar-demo-"))
    report = None
    try:
        if args.engine == "lossless":
            from tools import demo_lossless

            code = trio.run(demo_lossless.run, os.path.abspath(args.codex_bin), work)
        else:
            code = trio.run(run, os.path.abspath(args.codex_bin), work)
    finally:
        report = write_view(work)
        if args.keep:
            print(f"\nkept the demo's folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
            print(f"\nremoved the demo's folder {work} (make demo ARGS=--keep keeps it)")
    if report is not None:
        print(f"\nthe session's report (codex-sidecar view), to open in a browser:\n  {report}")
    if code == 0:
        from tools.demo_next import next_steps, sidecar_script

        print("\n" + "\n".join(next_steps(script=sidecar_script(sys.executable), codex_bin=os.path.abspath(args.codex_bin), state_dir=work / "state" if args.keep else None)))
    sys.exit(code)


def write_view(work: Path) -> Path | None:
    """``codex-sidecar view`` of the demo's session, written beside its
    folder (``<folder>.html``) so it outlives it; None when no turn was recorded."""
    from sidecar.view import gather, render, write_page

    try:
        thread = min(p.stem for p in (work / "state" / "inspect").iterdir())
        report = gather(work / "state", thread)
        if not report.turns:
            return None
        out = work.with_name(work.name + ".html")
        write_page(out, render(report))
    except (OSError, ValueError) as exc:
        print(f"\nno session report: {exc}", file=sys.stderr)
        return None
    return out


if __name__ == "__main__":
    main()

