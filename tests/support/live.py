"""The sidecar as a process in front of the real codex, with test engines it
loads by entry point like any third-party engine.

:func:`install_engines` writes a module and a ``*.dist-info`` declaring three
engines under ``openclaw.context_engines`` (put on the sidecar's
``PYTHONPATH`` and trusted by ``CODEX_SIDECAR_ENGINE_ALLOWLIST`` by
:func:`sidecar_env`):

* ``live-delta-summary`` replaces the older messages by one summary, with a
  boundary that moves in steps of :data:`STEP` messages and always leaves at
  least :data:`KEEP` raw;
* ``live-delta-identity`` assembles the mirrored history unchanged;
* ``live-delta-epoch`` assembles it unchanged too, but asks for
  ``thread_bootstrap`` with an epoch that changes every :data:`EPOCH_TURNS`
  turns.

The rest reads the model's recorded requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from sidecar.projection import CONTEXT_KEY
from tools.client import AppServerClient
from tools.codex_home import codex_env
from tools.fake_model import input_texts

from .codex import CODEX_BIN
from .harness import ROOT

TURN_TIMEOUT = 30.0
DIST_NAME = "live-delta-engines"
SUMMARY_ID = "live-delta-summary"
IDENTITY_ID = "live-delta-identity"
EPOCH_ID = "live-delta-epoch"
EPOCH_TURNS = 3
STEP = 4
KEEP = 2
OPEN, CLOSE = f"<{CONTEXT_KEY}>", f"</{CONTEXT_KEY}>"

ENGINE_MODULE = f'''\
"""Test engines for the live delta tests (tests/support/live.py)."""

from engines import AssembleResult, CompactionSummaryMessage, ContextProjection, EngineInfo
from engines.testkit import RecordingEngine

STEP = {STEP}
KEEP = {KEEP}
EPOCH_TURNS = {EPOCH_TURNS}


class Identity(RecordingEngine):
    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{IDENTITY_ID}", name="identity", version="0"))


class Summary(RecordingEngine):
    """The oldest messages, in steps of STEP, become one summary; KEEP or more stay raw."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{SUMMARY_ID}", name="summary", version="0"))

    async def handle_assemble(self, params):
        messages = list(params.messages)
        boundary = max(0, (len(messages) - KEEP) // STEP * STEP)
        if boundary:
            summary = CompactionSummaryMessage(
                summary=f"SUMMARY of the {{boundary}} earliest messages", tokens_before=boundary * 100, timestamp=0
            )
            messages = [summary, *messages[boundary:]]
        return AssembleResult(messages=messages, estimated_tokens=len(messages))


class Epoch(RecordingEngine):
    """The history unchanged, in a new epoch every EPOCH_TURNS plain turns (a user
    and an assistant message each)."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{EPOCH_ID}", name="epoch", version="0"))

    async def handle_assemble(self, params):
        messages = list(params.messages)
        epoch = f"e{{len(messages) // (2 * EPOCH_TURNS)}}"
        return AssembleResult(
            messages=messages,
            estimated_tokens=len(messages),
            context_projection=ContextProjection(mode="thread_bootstrap", epoch=epoch),
        )
'''


def install_engines(site: Path) -> Path:
    site.mkdir(parents=True, exist_ok=True)
    (site / "live_delta_engines.py").write_text(ENGINE_MODULE)
    info = site / "live_delta_engines-0.0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        f"[openclaw.context_engines]\n{SUMMARY_ID} = live_delta_engines:Summary\n{IDENTITY_ID} = live_delta_engines:Identity\n"
        f"{EPOCH_ID} = live_delta_engines:Epoch\n"
    )
    return site


def sidecar_env(home: Path, site: Path, state: Path, config: Path, engine: str) -> dict[str, str]:
    config.write_text("")  # never the developer's own config file
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
            "CODEX_SIDECAR_ENGINE": engine,
            "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST_NAME,
            "CODEX_SIDECAR_PROJECTION_MODE": "delta",
            "CODEX_SIDECAR_STATE_DIR": str(state),
            "CODEX_SIDECAR_CONFIG": str(config),
            "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return codex_env(home, base)


@contextlib.asynccontextmanager
async def sidecar(env: dict[str, str], work: Path) -> AsyncIterator[AppServerClient]:
    argv = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
    async with AppServerClient.spawn(argv, env=env, cwd=str(work)) as client:
        await client.initialize()
        yield client


async def finalized(client: AppServerClient, thread_id: str, turn_id: str) -> dict:
    """sidecar/status once the sidecar finished the turn (turn/completed is forwarded first)."""
    with trio.move_on_after(TURN_TIMEOUT):
        while True:
            status = await client.request("sidecar/status")
            thread = status["lifecycle"]["threads"].get(thread_id) or {}
            if (thread.get("lastFinalize") or {}).get("turnId") == turn_id and not thread.get("busy"):
                return status
            await trio.sleep(0.05)
    pytest.fail(f"the sidecar never finished {turn_id}: {json.dumps(status.get('lifecycle'))[:2000]}")


# --------------------------------------------------------------------------
# Reading the model's requests


def without_ids(items: list[dict]) -> list[dict]:
    """Items minus their ``id``: a revert gives Codex's framing messages new
    item ids, the content stays byte for byte."""
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


def texts_of(item: dict) -> list[str]:
    return input_texts({"input": [item]})


def chars(request: dict) -> int:
    """Characters of every text in the request's input (what grows with history)."""
    return sum(len(t) for t in input_texts(request))


def prompt_of(request: dict) -> str:
    users = [i for i in request["input"] if i.get("type", "message") == "message" and i.get("role") == "user"]
    return texts_of(users[-1])[-1]


def context_items(request: dict) -> list[int]:
    return [n for n, item in enumerate(request["input"]) if any(OPEN in t for t in texts_of(item))]


def context_text(request: dict, index: int) -> str:
    (text,) = [t for t in texts_of(request["input"][index]) if OPEN in t]
    assert text.startswith(OPEN) and text.endswith(CLOSE), text[:80]
    return text[len(OPEN) : -len(CLOSE)]


def thread_ids_in(value: Any, out: set[str]) -> set[str]:
    """Every thread id a frame names: ``threadId`` anywhere, and ``thread.id``."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "threadId" and isinstance(child, str):
                out.add(child)
            elif key == "thread" and isinstance(child, dict) and isinstance(child.get("id"), str):
                out.add(child["id"])
            thread_ids_in(child, out)
    elif isinstance(value, list):
        for child in value:
            thread_ids_in(child, out)
    return out


def filler(tag: str, n: int) -> str:
    words = ["amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "heron"]
    return f"{tag} " + " ".join(words[(n + k) % len(words)] for k in range(70))  # ~420 characters
