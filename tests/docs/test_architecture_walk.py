"""docs/architecture.md's walk of one ``turn/start`` is the path the code takes.

The test runs a real ``Proxy`` with the lifecycle and a recording engine in
front of the fake app-server (``tests/support/lifecycle.py``), lets a thread
take one turn, then profiles the next one: every function of ``sidecar/`` and
``protocol/`` that runs (or resumes) from the moment the client's line is
sent until the rewritten ``turn/start`` is queued for the child.  The modules
those functions belong to must be exactly the list the document gives, in the
number it gives, so the document cannot drift from the code."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing

from sidecar.relay.shell import Outbox
from tests.support.lifecycle import make_engine, sidecar
from tests.support.markdown import ROOT

DOC = ROOT / "docs" / "architecture.md"

_NUMBERS = {word: n for n, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty".split()
)}
_CLAIM = re.compile(r"crosses\s+(\w+)\s+modules\s+on\s+its\s+way\s+to\s+the\s+child:(.*?)\.\s", re.S)


def doc_name(module: str) -> str:
    """``sidecar.relay.shell`` -> ``relay/shell``, ``protocol.jsonrpc`` ->
    ``protocol/jsonrpc``, a package's ``__init__`` -> ``rebuild/``."""
    parts = module.split(".")
    if parts[0] == "sidecar":
        parts = parts[1:]
    name = "/".join(parts)
    if sys.modules[module].__file__.endswith("__init__.py"):
        name += "/"
    return name


def documented_walk() -> tuple[int, set[str]]:
    """The count and the modules of the document's "crosses N modules" sentence."""
    match = _CLAIM.search(DOC.read_text(encoding="utf-8"))
    assert match, "docs/architecture.md no longer says which modules a turn/start crosses"
    word = match.group(1).lower()
    count = int(word) if word.isdigit() else _NUMBERS[word]
    return count, set(re.findall(r"`([^`]+)`", match.group(2)))


@contextmanager
def traced_until_child_write(marker: bytes) -> Iterator[dict[str, set[str]]]:
    """Collect module -> functions of sidecar/ and protocol/ that run until the
    first line containing ``marker`` is queued on an outbox (the child's)."""
    seen: dict[str, set[str]] = {}
    written: list[bool] = []
    put_line = Outbox.put_line.__code__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or written:
            return
        module = frame.f_globals.get("__name__", "")
        if module.partition(".")[0] in ("sidecar", "protocol"):
            seen.setdefault(module, set()).add(frame.f_code.co_qualname)
        if frame.f_code is put_line and marker in frame.f_locals.get("line", b""):
            written.append(True)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
    assert written, "the traced turn/start never reached the child's outbox"


async def trace_steady_turn(tmp_path) -> dict[str, set[str]]:
    """A thread's second turn, default projection mode, no rebuild."""
    async with sidecar(tmp_path, make_engine(), mode="auto") as run:
        thread_id = await run.start_thread()
        await run.turn(thread_id, "the first turn opens the session")
        # Background work of the sidecar's start is no part of the turn: the
        # lifecycle's tokenizer preload (0.02 s after initialize's answer) has
        # run, and every other task waits, before the trace begins.
        await trio.sleep(0.05)
        await trio.testing.wait_all_tasks_blocked()
        rid, line = run.turn_start_line(thread_id, "the traced turn")
        with traced_until_child_write(b'"method":"turn/start"') as seen:
            await run.send(line)
            await run.finish_turn(thread_id, rid)
        assert len(run.child_turn_starts(thread_id)) == 2
    return seen


async def test_the_documented_turn_start_walk_is_the_traced_one(tmp_path):
    seen = await trace_steady_turn(tmp_path)
    traced = {doc_name(module) for module in seen}
    count, documented = documented_walk()
    functions = sum(len(f) for f in seen.values())
    assert documented == traced, (
        f"docs/architecture.md lists modules the turn/start does not cross: {sorted(documented - traced)}; "
        f"it leaves out modules it does cross: {sorted(traced - documented)} ({len(traced)} modules, {functions} functions)"
    )
    assert count == len(traced), f"docs/architecture.md says {count} modules; the list and the trace have {len(traced)}"


MOST_MODULES = 10
"""Issue 26: a steady ``turn/start`` crosses at most ten modules. What a
turn needs only now and then (a journal read, a switch's settings, the edge
of a switched thread) stays off its path."""


async def test_a_steady_turn_start_crosses_at_most_ten_modules(tmp_path):
    traced = {doc_name(module) for module in await trace_steady_turn(tmp_path)}
    assert len(traced) <= MOST_MODULES, f"a turn/start crosses {len(traced)} modules: {sorted(traced)}"


@pytest.mark.parametrize(
    ("module", "name"),
    [("sidecar.relay.shell", "relay/shell"), ("protocol.jsonrpc", "protocol/jsonrpc"), ("sidecar.projection", "projection"), ("sidecar.rebuild", "rebuild/")],
)
def test_module_names_are_written_as_the_document_writes_them(module, name):
    __import__(module)
    assert doc_name(module) == name
