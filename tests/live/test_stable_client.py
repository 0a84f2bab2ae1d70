"""A client nobody here wrote, as it is: ``codex-app-server-client`` from PyPI
(asyncio, pydantic), with ``experimental_api=False``, against the real codex
alone and through the sidecar with ``lossless`` (an engine with tools) and
with the rebuilding engine (no tools, context projected).

Its connection never declares codex's experimental API; the sidecar's engine
needs it (``additionalContext``, ``dynamicTools``). Each run plays the same
story (threads, streamed turns, list, read, fork, and a resume in a new
process) and must end as it ends with codex alone. (Interrupts, steering and
the rest, for a client that declares nothing: the conformance suite's
``stable-*`` modes.)
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.live import SUMMARY_ID, install_engines, sidecar_env
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import FakeModel, Text, input_texts

client_sdk = pytest.importorskip("codex_app_server_client")
from codex_app_server_client import CodexAppServer  # noqa: E402
from codex_app_server_client.types.threads import ThreadForkParams, ThreadListParams, ThreadReadParams, ThreadStartParams  # noqa: E402

pytestmark = needs_codex

TIMEOUT = 60.0
FALLBACKS = ("forwarding the original request", "bind failed", "running legacy", "requires experimentalApi", "codex refused the sidecar's change")


def _server(mode: str, root: Path, env: dict[str, str]) -> CodexAppServer:
    """The client starts its app-server itself (``BIN app-server --listen stdio://``)."""
    if mode == "direct":
        assert CODEX_BIN is not None
        return CodexAppServer(codex_bin=CODEX_BIN, experimental_api=False, env=env)
    # The sidecar in codex's place; its log kept (the client reads stderr itself).
    wrapper = root / "codex-sidecar"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m sidecar "$@" 2>>{shlex.quote(str(root / "sidecar.log"))}\n')
    wrapper.chmod(0o755)
    return CodexAppServer(codex_bin=str(wrapper), experimental_api=False, env=env)


async def _story(mode: str, root: Path, model: FakeModel) -> dict[str, Any]:
    """The client's whole session; what it saw, in a form comparable across modes."""
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    home = make_codex_home(root / "codex-home", model.base_url)
    if mode == "direct":
        env = codex_env(home)
    else:
        engine = {"lossless": "lossless", "rebuild": SUMMARY_ID}[mode]
        env = sidecar_env(home, install_engines(root / "site"), root / "state", root / "sidecar.toml", engine)
    env["HOME"] = str(root)
    seen: dict[str, Any] = {}
    model.script(Text("Noted PAPAYA."), Text("Noted MANGO."))
    async with _server(mode, root, env) as server:
        init = server.server_info
        seen["initialized"] = init is not None
        thread = await server.start_thread(ThreadStartParams(cwd=str(work)))
        first = await thread.run("Remember the word PAPAYA.", timeout_s=TIMEOUT)
        second = await thread.run("Also remember MANGO.", timeout_s=TIMEOUT)
        seen["turns"] = [(first.status, first.final_response), (second.status, second.final_response)]

        low = server.low_level
        listed = await low.thread_list(ThreadListParams(cwd=str(work)))
        seen["listed"] = thread.id in {t.id for t in listed.data}
        read = await low.thread_read(ThreadReadParams(thread_id=thread.id, include_turns=True))
        seen["read_turns"] = [t.status for t in read.thread.turns]
        forked = await low.thread_fork(ThreadForkParams(thread_id=thread.id, cwd=str(work)))
        fork_id = forked.thread.id
        seen["fork_turns"] = len(forked.thread.turns)
        seen["fork_listed"] = fork_id in {t.id for t in (await low.thread_list(ThreadListParams(cwd=str(work)))).data}
    # A new process: the client resumes the thread and asks.
    async with _server(mode, root, env) as server:
        resumed = await server.resume_thread(thread.id, cwd=str(work))
        before = len(model.requests)
        model.script(Text("PAPAYA and MANGO."))
        last = await resumed.run("Which two words did I ask you to remember?", timeout_s=TIMEOUT)
        seen["resumed"] = (last.status, last.final_response)
        asked = [r for r in model.requests[before:] if any("Which two words" in t for t in input_texts(r))]
        seen["model_saw_both"] = bool(asked) and all(w in " ".join(input_texts(asked[-1])) for w in ("PAPAYA", "MANGO"))
    return seen


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    base = tmp_path_factory.mktemp("stable-client")
    for n, mode in enumerate(("direct", "lossless", "rebuild")):
        with FakeModel() as model:
            out[mode] = asyncio.run(_story(mode, base / f"m{n}", model))
            out[mode]["log"] = (base / f"m{n}" / "sidecar.log").read_text() if mode != "direct" else ""
    return out


def test_codex_alone_serves_the_whole_story_to_this_client(stories):
    direct = stories["direct"]
    assert direct["initialized"] and direct["listed"]
    assert [s for s, _ in direct["turns"]] == ["completed", "completed"]
    assert direct["resumed"][0] == "completed" and direct["model_saw_both"]


@pytest.mark.parametrize("mode", ["lossless", "rebuild"])
def test_through_the_sidecar_with_an_engine_the_client_sees_what_codex_alone_shows(stories, mode):
    direct, run = dict(stories["direct"]), dict(stories[mode])
    log = run.pop("log")
    direct.pop("log")
    assert run == direct
    for fallback in FALLBACKS:
        assert fallback not in log, f"the sidecar fell back ({fallback}):\n{log[-2000:]}"
