"""The jobs the thread's machine serves change a thread only through it
(issue 34): every module of ``sidecar/lifecycle/`` (a turn, its
finalisation, injections, and the session half: opening, release, client
reverts, compaction, the overflow retry), of ``sidecar/rebuild/``, ``sidecar/host/``
(the engine's tools) and ``sidecar/history/`` build events and call
``handle``; they call none of the package's transitions themselves (a
function of ``sidecar/thread/holdings.py`` or ``opening.py``, or a method of
``ThreadSession`` or ``TurnState`` that changes the records).

Counted with ``ast``: a call ``holdings.x(...)``/``opening.x(...)``, or a
call of a transition method by name on any receiver. Reads (``busy``,
``joins_running_turn``, ...) are not transitions. ``NOT_YET`` lists the
calls still made directly, by module: it may shrink, never grow."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVED = sorted(str(p.relative_to(ROOT)) for folder in ("lifecycle", "rebuild", "host", "history") for p in (ROOT / "sidecar" / folder).glob("*.py"))
"""Every lifecycle job and rebuild strategy."""
RECORDS = ("ThreadSession", "TurnState", "RevertNoise")
READS = frozenset({"heartbeat", "retry", "busy", "settled", "joins_running_turn", "turn_over_in_codex", "__post_init__"})
"""Methods of the records that change nothing (``retry`` builds a new record)."""

NOT_YET: dict[str, Counter[str]] = {}
"""Transitions a served job still calls itself, by module (none left: the
in-place rebuild's revert noise goes through the machine too)."""


def transitions() -> set[str]:
    """The names of every method of the records that may change them."""
    tree = ast.parse((ROOT / "sidecar/thread/state.py").read_text(encoding="utf-8"))
    return {
        item.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name in RECORDS
        for item in node.body
        if isinstance(item, ast.FunctionDef) and item.name not in READS
    }


def direct_calls(path: Path, methods: set[str]) -> Counter[str]:
    """The transitions ``path`` calls itself."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        receiver, name = node.func.value, node.func.attr
        if isinstance(receiver, ast.Name) and receiver.id in ("holdings", "opening"):
            found[f"{receiver.id}.{name}"] += 1
        elif name in methods:
            found[name] += 1
    return found


def test_the_records_transitions_are_found() -> None:
    assert {"take_slot", "turn_forwarded", "end_turn", "fell_back", "note_plan"} <= transitions()
    assert not transitions() & READS


def test_the_jobs_the_machine_serves_call_no_transition_themselves() -> None:
    methods = transitions()
    for module in SERVED:
        found = direct_calls(ROOT / module, methods)
        allowed = NOT_YET.get(module, Counter())
        assert not (found - allowed), f"{module} calls thread transitions itself (send the machine an event): {dict(found - allowed)}"


def test_a_direct_transition_call_is_caught(tmp_path: Path) -> None:
    planted = tmp_path / "job.py"
    planted.write_text("def f(session, state):\n    holdings.rebuilt(session)\n    session.end_turn(state)\n    session.busy\n", encoding="utf-8")
    assert direct_calls(planted, transitions()) == Counter({"holdings.rebuilt": 1, "end_turn": 1})
