"""A thread's state has one owner (issue 34): only ``sidecar/thread/`` writes
the fields of its records, and only it builds the ledger's view of a thread.

Counted with ``ast`` over ``sidecar/`` (nothing is imported). The records
are the mutable Structs of ``sidecar/thread/state.py`` (``ThreadSession``,
``TurnState``, ``Unfollowed``, ``RevertNoise``: read from the file). An
expression is a state object by its type where the code says it:

- a name annotated with a record in its function (``session: ThreadSession``,
  ``ThreadSession | None``, a string annotation), or assigned there from a
  state object (``turn = session.current``);
- an attribute declared with a record's type anywhere in ``sidecar/`` (a
  record's own field, ``current: TurnState | None``; ``session: ThreadSession``
  in a class body; ``self.x: ThreadSession = ...``);
- an item of a container declared of records (``dict[str, ThreadSession]``):
  ``sessions[tid]``, ``sessions.get(tid)``, ``sessions.pop(tid)``;
- what a function declared to return a record returns (``new_session(...)``).

Where the code says nothing (an unannotated name), the names a thread's
state goes by still count (``session``, ``state``, ``current``, ``first``,
``noise``); a name annotated with another type (``state: LedgerState``) is
not a state object.

A write is an assignment, augmented assignment or ``del`` of a record's
field on a state object (``session.held = ...``), a subscript write into one
(``session.stats["x"] = ...``, ``del session.sizes[f]``), or a call of a
mutating method on one (``session.turns.pop(tid)``, ``.append``, ``.add``,
``.update``, ``.clear``, ... :data:`MUTATORS`). The trio handles a thread's
state carries (``ready``, ``slot``, ``reverts_answered``) are the
lifecycle's to wait on and set, and their methods are not writes."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWNER = "sidecar/thread/"
STATE_NAMES = frozenset({"session", "state", "current", "first", "noise"})
MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault",
    "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update", "sort", "reverse",
})
CONTAINERS = frozenset({"dict", "list", "set", "frozenset", "tuple", "Mapping", "MutableMapping", "Sequence", "Iterable"})

NOT_YET: dict[str, int] = {}
"""Writes the subscript and method counts found in modules another change
owned when they were added (the per-thread machine's: ``finalize``,
``turns``, ``rebuild/``), by module,
with their exact count: a count may shrink, never grow, and the entry goes
at zero. A diagnostic goes through ``opening.reported``."""


def _names(annotation: ast.expr | None) -> set[str]:
    """The type names an annotation is made of, at its top level: ``A | None``
    -> {A, None}; ``Optional[A]`` -> {A, None}; a string annotation is parsed."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return set()
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _names(annotation.left) | _names(annotation.right)
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).split(".")[-1] == "Optional":
        return _names(annotation.slice) | {"None"}
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return {"None"}
    return {ast.unparse(annotation).split(".")[-1]}


def _element_names(annotation: ast.expr | None) -> set[str]:
    """The names of what a container annotation holds (its values):
    ``dict[str, ThreadSession]`` -> {ThreadSession}."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return set()
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _element_names(annotation.left) | _element_names(annotation.right)
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).split(".")[-1] in CONTAINERS:
        args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        return _names(args[-1])
    return set()


def records(root: Path = ROOT) -> dict[str, dict[str, ast.expr]]:
    """The records of ``sidecar/thread/state.py`` (its mutable Structs): name -> field -> annotation."""
    tree = ast.parse((root / OWNER / "state.py").read_text(encoding="utf-8"))
    out: dict[str, dict[str, ast.expr]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any("Struct" in ast.unparse(b) for b in node.bases):
            continue
        if any(k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True for k in node.keywords):
            continue
        out[node.name] = {s.target.id: s.annotation for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return out


def fields(root: Path = ROOT) -> set[str]:
    return {f for body in records(root).values() for f in body}


def container_fields(root: Path = ROOT) -> set[str]:
    """The fields that hold a builtin container (``stats: dict[str, Any]``,
    ``marking: set[trio.Event]``): their contents are the record's too. A
    field holding an open file (``mirror``, ``ledger``, ``inspect``) is
    written through its own methods, which are not the record's."""
    out = set()
    for body in records(root).values():
        for name, annotation in body.items():
            for part in ast.walk(annotation):
                if isinstance(part, ast.Subscript) and ast.unparse(part.value) in ("dict", "list", "set", "deque"):
                    out.add(name)
    return out


class Types:
    """What the code of ``sidecar/`` declares about the records (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.records = set(records(root))
        self.attributes: set[str] = set()
        """Attribute names declared with a record's type."""
        self.containers: set[str] = set()
        """Names and attribute names declared as containers of records."""
        self.returning: set[str] = set()
        """Functions declared to return a record."""
        for body in records(root).values():
            for name, annotation in body.items():
                self._declare(name, annotation)
        for path in sorted((root / "sidecar").rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    for stmt in node.body:
                        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                            self._declare(stmt.target.id, stmt.annotation)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute):
                    self._declare(node.target.attr, node.annotation)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _names(node.returns) & self.records:
                    self.returning.add(node.name)

    def _declare(self, name: str, annotation: ast.expr) -> None:
        if _names(annotation) & self.records:
            self.attributes.add(name)
        if _element_names(annotation) & self.records:
            self.containers.add(name)

    def scope(self, function: ast.AST) -> Scope:
        return Scope(self, function)


class Scope:
    """A function's names: which are state objects (by annotation or by what
    they were assigned), which are declared otherwise, which are containers."""

    def __init__(self, types: Types, function: ast.AST) -> None:
        self.types = types
        self.state: set[str] = set()
        self.other: set[str] = set()
        self.containers: set[str] = set()
        for node in ast.walk(function):
            annotation, target = None, None
            if isinstance(node, ast.arg):
                annotation, target = node.annotation, node.arg
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                annotation, target = node.annotation, node.target.id
            if annotation is None or target is None:
                continue
            if _names(annotation) & types.records:
                self.state.add(target)
            elif _element_names(annotation) & types.records:
                self.containers.add(target)
            else:
                self.other.add(target)
        for _ in range(3):  # assignments from state objects, to a fixed point (short chains)
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if node.targets[0].id not in self.other and self.is_state(node.value):
                        self.state.add(node.targets[0].id)
                elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) and self._iterates_records(node.iter):
                    self.state.add(node.target.id)

    def _is_container(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.containers
        return isinstance(node, ast.Attribute) and node.attr in self.types.containers

    def _iterates_records(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values":
            return self._is_container(node.func.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "sorted", "reversed"):
            return bool(node.args) and self._iterates_records(node.args[0])
        return self._is_container(node)

    def is_state(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            if node.id in self.state:
                return True
            return node.id in STATE_NAMES and node.id not in self.other and node.id not in self.containers
        if isinstance(node, ast.Attribute):
            return node.attr in self.types.attributes or node.attr in STATE_NAMES
        if isinstance(node, ast.Subscript):
            return self._is_container(node.value)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and self._is_container(func.value):
                return True
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            return name in self.types.returning
        if isinstance(node, ast.BoolOp | ast.IfExp):
            parts = node.values if isinstance(node, ast.BoolOp) else [node.body, node.orelse]
            return any(self.is_state(p) for p in parts)
        return False


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


def _field_of_state(node: ast.expr, known: set[str], scope: Scope) -> ast.Attribute | None:
    """``node`` (its subscripts peeled: ``session.stats["a"]["b"]``) if it is
    a record's field on a state object, else None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in known and scope.is_state(node.value):
        return node
    return None


def writes(root: Path = ROOT) -> Iterator[tuple[str, int, str]]:
    """(path, line, what) of every write to a record's field outside the owner."""
    known = fields(root)
    containers = container_fields(root)
    types = Types(root)
    for path in sorted((root / "sidecar").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        if name.startswith(OWNER):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        # Innermost scope first (ast.walk lists outer functions first): a
        # nested function's own annotations decide for its lines.
        scopes = [(f, types.scope(f)) for f in reversed(functions)] + [(tree, types.scope(tree))]
        seen: set[tuple[int, int]] = set()
        out: list[tuple[str, int, str]] = []
        for scope_node, scope in scopes:
            for node in ast.walk(scope_node):
                found: list[tuple[ast.AST, str]] = []
                for target in _targets(node):
                    for part in ast.walk(target):
                        if isinstance(part, ast.Attribute) and isinstance(part.ctx, (ast.Store, ast.Del)) and part.attr in known and scope.is_state(part.value):
                            found.append((part, ast.unparse(part)))
                        elif isinstance(part, ast.Subscript) and isinstance(part.ctx, (ast.Store, ast.Del)):
                            field = _field_of_state(part.value, containers, scope)
                            if field is not None:
                                found.append((part, f"{ast.unparse(field)}[...]"))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                    field = _field_of_state(node.func.value, containers, scope)
                    if field is not None:
                        found.append((node, f"{ast.unparse(field)}.{node.func.attr}()"))
                for part, what in found:
                    at = (part.lineno, part.col_offset)  # type: ignore[attr-defined]
                    if at not in seen:
                        seen.add(at)
                        out.append((name, at[0], what))
        yield from sorted(out)


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
    assert set(records()) == {"ThreadSession", "TurnState", "Unfollowed", "RevertNoise"}
    assert {"held", "current", "turns_since_rebuild", "fallback_reason", "unfollowed", "answered", "stats"} <= fields()


def test_only_the_thread_package_writes_a_thread_state() -> None:
    found = list(writes())
    by_module = Counter(p for p, _, _ in found)
    grown = {p: n for p, n in by_module.items() if n > NOT_YET.get(p, 0)}
    assert not grown, "write through a transition of sidecar/thread/ instead:\n" + "\n".join(f"{p}:{n}: {t}" for p, n, t in found if p in grown)
    shrunk = {p: (by_module.get(p, 0), n) for p, n in NOT_YET.items() if by_module.get(p, 0) < n}
    assert not shrunk, f"NOT_YET counts more writes than are left (now, listed): lower them: {shrunk}"


def test_only_the_thread_package_builds_a_thread_ledger_state() -> None:
    found = list(hand_built_ledger_states())
    assert not found, f"use sidecar.thread.holdings.holdings(session): {found}"


def test_the_count_sees_a_write(tmp_path: Path) -> None:
    """The counter is not blind: writes planted in a lifecycle module are
    found, by type where the code says it and by name where it does not."""
    (tmp_path / "sidecar" / "thread").mkdir(parents=True)
    (tmp_path / "sidecar" / "thread" / "state.py").write_text((ROOT / OWNER / "state.py").read_text(encoding="utf-8"))
    (tmp_path / "sidecar" / "lifecycle").mkdir()
    (tmp_path / "sidecar" / "lifecycle" / "job.py").write_text(
        "def f(session, thread: 'ThreadSession', other, state: LedgerState, t: TurnState | None):\n"
        "    session.held = []\n"
        "    thread.current, x = None, 1\n"
        "    session.current.revert_ms += 1\n"
        "    del session.unfollowed\n"
        "    other.held = []\n"  # not known to be a thread's state
        "    state.held = []\n"  # a LedgerState: not a thread's state
        "    LedgerState(held=[])\n"
        "    session.stats['a'] = 1\n"
        "    thread.turns.pop('t1')\n"
        "    del thread.sizes['f']\n"
        "    t.engine_tools.append(1)\n"
        "    turn = thread.current\n"
        "    turn.fallback_reason = 'x'\n"
        "    session.ready.set()\n"  # a handle: the lifecycle sets it
        "    session.turns.get('t1')\n"  # a read
        "class Job:\n"
        "    sessions: dict[str, ThreadSession]\n"
        "    def g(self, tid):\n"
        "        self.sessions[tid].marking.add(1)\n"
        "        for s in self.sessions.values():\n"
        "            s.completed_turns.clear()\n"
        "        new_session(tid).held = None\n"
        "def new_session(tid) -> ThreadSession: ...\n"
    )
    assert [(n, t) for _, n, t in writes(tmp_path)] == [
        (2, "session.held"), (3, "thread.current"), (4, "session.current.revert_ms"), (5, "session.unfollowed"),
        (9, "session.stats[...]"), (10, "thread.turns.pop()"), (11, "thread.sizes[...]"), (12, "t.engine_tools.append()"),
        (14, "turn.fallback_reason"), (20, "self.sessions[tid].marking.add()"), (22, "s.completed_turns.clear()"), (23, "new_session(tid).held"),
    ]
    assert list(hand_built_ledger_states(tmp_path)) == [("sidecar/lifecycle/job.py", 8)]
