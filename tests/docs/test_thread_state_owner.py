"""A thread's state has one owner (issue 34): only ``sidecar/thread/`` writes
the fields of its records, and only it builds the ledger's view of a thread.

Counted with ``ast`` over ``sidecar/``: an assignment, augmented assignment or
``del`` whose target is a field of a record of ``sidecar/thread/state.py``
(``ThreadSession``, ``TurnState``, ``Unfollowed``, ``RevertNoise``) on a
state object: a name annotated with one of those classes in its function, or
one the code names a thread's state by (``session``, ``state``, ``current``,
``first``, ``noise``, or an attribute ending so: ``session.current``). A
field's contents changed through a method (``session.turns.pop(...)``) or a
subscript are not counted."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNER = "sidecar/thread/"
RECORDS = ("ThreadSession", "TurnState", "Unfollowed", "RevertNoise")
STATE_NAMES = frozenset({"session", "state", "current", "first", "noise"})


def fields(root: Path = ROOT) -> set[str]:
    tree = ast.parse((root / OWNER / "state.py").read_text(encoding="utf-8"))
    return {
        stmt.target.id
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name in RECORDS
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
    }


def _annotated(function: ast.AST) -> set[str]:
    """Names a function declares as one of the records."""
    names: set[str] = set()
    for node in ast.walk(function):
        annotation, target = None, None
        if isinstance(node, ast.arg):
            annotation, target = node.annotation, node.arg
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation, target = node.annotation, node.target.id
        if annotation is not None and target is not None and any(record in ast.unparse(annotation) for record in RECORDS):
            names.add(target)
    return names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _is_state(receiver: ast.expr, declared: set[str]) -> bool:
    if isinstance(receiver, ast.Name):
        return receiver.id in STATE_NAMES or receiver.id in declared
    return isinstance(receiver, ast.Attribute) and receiver.attr in STATE_NAMES


def writes(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    """(path, line, target) of every write to a record's field outside the owner."""
    known = fields(root)
    for path in sorted((root / "sidecar").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(OWNER):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        scopes = [(f, _annotated(f)) for f in functions] + [(tree, set())]
        seen: set[tuple[int, int]] = set()
        for scope, declared in scopes:
            for node in ast.walk(scope):
                for target in _targets(node):
                    for part in ast.walk(target):
                        if (
                            isinstance(part, ast.Attribute)
                            and isinstance(part.ctx, (ast.Store, ast.Del))
                            and part.attr in known
                            and _is_state(part.value, declared)
                            and (part.lineno, part.col_offset) not in seen
                        ):
                            seen.add((part.lineno, part.col_offset))
                            yield name, part.lineno, ast.unparse(part)


def hand_built_ledger_states(root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """``LedgerState(...)`` built outside the store that reads its journal:
    a thread's holdings are :func:`sidecar.thread.holdings.holdings`."""
    for path in sorted((root / "sidecar").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name in ("sidecar/store/ledger.py",) or name.startswith(OWNER):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "LedgerState" and (node.args or node.keywords):
                yield name, node.lineno


def test_the_records_have_the_fields_the_count_looks_for() -> None:
    assert {"held", "current", "turns_since_rebuild", "fallback_reason", "unfollowed", "answered"} <= fields()


def test_only_the_thread_package_writes_a_thread_state() -> None:
    found = list(writes())
    assert not found, "write through a transition of sidecar/thread/ instead:\n" + "\n".join(f"{p}:{n}: {t}" for p, n, t in found)


def test_only_the_thread_package_builds_a_thread_ledger_state() -> None:
    found = list(hand_built_ledger_states())
    assert not found, f"use sidecar.thread.holdings.holdings(session): {found}"


def test_the_count_sees_a_write(tmp_path: Path) -> None:
    """The counter is not blind: a write planted in a lifecycle module is found."""
    (tmp_path / "sidecar" / "thread").mkdir(parents=True)
    (tmp_path / "sidecar" / "thread" / "state.py").write_text((ROOT / OWNER / "state.py").read_text(encoding="utf-8"))
    (tmp_path / "sidecar" / "lifecycle").mkdir()
    (tmp_path / "sidecar" / "lifecycle" / "job.py").write_text(
        "def f(session, thread: 'ThreadSession', other):\n"
        "    session.held = []\n"
        "    thread.current, x = None, 1\n"
        "    session.current.revert_ms += 1\n"
        "    del session.unfollowed\n"
        "    other.held = []\n"
        "    LedgerState(held=[])\n"
    )
    assert [(n, t) for _, n, t in writes(tmp_path)] == [(2, "session.held"), (3, "thread.current"), (4, "session.current.revert_ms"), (5, "session.unfollowed")]
    assert list(hand_built_ledger_states(tmp_path)) == [("sidecar/lifecycle/job.py", 7)]
