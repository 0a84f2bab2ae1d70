"""docs/architecture.md's walk of one ``turn/start`` is the path the code takes.

The test runs a real ``Proxy`` with the lifecycle and a recording engine in
front of the fake app-server (``tests/support/lifecycle.py``), lets a thread
take one turn, then profiles the next one: every function of ``sidecar/`` and
``protocol/`` that runs (or resumes) from the moment the client's line is
sent until the rewritten ``turn/start`` is queued for the child.  The modules
those functions belong to must be exactly the list the document gives, in the
number it gives, so the document cannot drift from the code; and the path
must be flat: few changes of module from one call to the next (a hand-off
that only passes a call on costs two)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


@dataclass
class Trace:
    functions: dict[str, set[str]] = field(default_factory=dict)
    """module -> the functions of it that ran (or resumed)."""
    calls: list[str] = field(default_factory=list)
    """The module of every call (or resumption), in order."""

    def modules(self) -> set[str]:
        return {doc_name(module) for module in self.functions}

    def changes(self) -> int:
        """Changes of module between consecutive calls."""
        return sum(a != b for a, b in zip(self.calls, self.calls[1:], strict=False))


@contextmanager
def traced_until_child_write(marker: bytes) -> Iterator[Trace]:
    """Collect the functions of sidecar/ and protocol/ that run until the
    first line containing ``marker`` is queued on an outbox (the child's)."""
    seen = Trace()
    written: list[bool] = []
    put_line = Outbox.put_line.__code__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or written:
            return
        module = frame.f_globals.get("__name__", "")
        if module.partition(".")[0] in ("sidecar", "protocol"):
            seen.functions.setdefault(module, set()).add(frame.f_code.co_qualname)
            seen.calls.append(module)
        if frame.f_code is put_line and marker in frame.f_locals.get("line", b""):
            written.append(True)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
    assert written, "the traced turn/start never reached the child's outbox"


async def trace_steady_turn(tmp_path) -> Trace:
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
    traced = seen.modules()
    count, documented = documented_walk()
    functions = sum(len(f) for f in seen.functions.values())
    assert documented == traced, (
        f"docs/architecture.md lists modules the turn/start does not cross: {sorted(documented - traced)}; "
        f"it leaves out modules it does cross: {sorted(traced - documented)} ({len(traced)} modules, {functions} functions)"
    )
    assert count == len(traced), f"docs/architecture.md says {count} modules; the list and the trace have {len(traced)}"


MOST_MODULES = 10
"""Issue 26: a steady ``turn/start`` crosses at most ten modules. What a
turn needs only now and then (a journal read, a switch's settings, the edge
of a switched thread) stays off its path."""


MOST_CHANGES = 40
"""Issue 34: at most 40 changes of module between consecutive calls on that
path (68-70 when the shell handed 16 of its methods on to the router and the
turn went back to the engine calls for each input)."""


async def test_a_steady_turn_start_crosses_at_most_ten_modules_on_a_flat_path(tmp_path):
    seen = await trace_steady_turn(tmp_path)
    traced = seen.modules()
    assert len(traced) <= MOST_MODULES, f"a turn/start crosses {len(traced)} modules: {sorted(traced)}"
    path = [doc_name(m) for i, m in enumerate(seen.calls) if i == 0 or m != seen.calls[i - 1]]
    assert seen.changes() <= MOST_CHANGES, f"a turn/start changes module {seen.changes()} times: {' > '.join(path)}"


def test_changes_of_module_are_counted_between_consecutive_calls():
    trace = Trace(calls=["a", "a", "b", "a", "c", "c"])
    assert trace.changes() == 3


@pytest.mark.parametrize(
    ("module", "name"),
    [("sidecar.relay.shell", "relay/shell"), ("protocol.jsonrpc", "protocol/jsonrpc"), ("sidecar.projection", "projection"), ("sidecar.rebuild", "rebuild/")],
)
def test_module_names_are_written_as_the_document_writes_them(module, name):
    __import__(module)
    assert doc_name(module) == name
