"""Objects in ``sidecar/`` are built whole, from at most six collaborators.

Long constructor lists (``Sessions`` once took 12) are wiring nobody can
read, and moving the list into a context object only hides it. So the count
is honest: what a class's ``__init__`` keeps from its parameters AND from
any context object passed to it. Read from the source with ``ast`` (nothing
is imported):

- a parameter (positional-only, positional or keyword-only, with or without
  a default; ``*args``/``**kwargs`` one each) is one collaborator;
- a parameter whose annotation is a context holder (a record class defined
  in a module named ``context.py``, e.g. ``LifecycleContext``) counts the
  holder's fields the class reads (``ctx.proxy``, ``ctx.sessions``...), all
  of them when it keeps or passes on the holder whole;
- settings records (a class whose name ends in ``Options``) and plain
  values (``str``, ``int``, ``float``, ``bool``, ``bytes``, a ``Path``) are
  data, not collaborators, whether given directly or through a holder;
- a holder itself counts its collaborator fields (a holder of twelve would
  just move the list).

And nothing is attached after construction: no ``x.attr = collaborator``
where ``x`` is an object the class holds (``self.router.edge = edge``) or a
parameter of its ``__init__`` (``proxy.edge = self.backing``), and the value
is a collaborator (a name, an attribute, a lambda, an object built there)
rather than data (a constant, a comparison, a number worked out). An object
half wired between its constructor and that line is the thing ruled out.

Other dataclasses and msgspec Structs are records of data (a turn's state),
not wiring, and are not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.markdown import ROOT

LIMIT = 6
SIDECAR = ROOT / "sidecar"

NOT_YET: dict[str, int] = {}
"""Still over, with their exact count: it may shrink, never grow, and the
entry goes once the class is at the limit (none: ``Sessions``, the last,
was split by concern into ``Identity``, ``Sessions``, ``Openings``,
``HistoryImport`` and ``Releases``)."""

NOT_YET_ATTACHED: set[str] = set()
"""Attachments after construction still there (none)."""

DATA = frozenset({"str", "int", "float", "bool", "bytes", "Path", "os.PathLike[str]"})


def _is_record(cls: ast.ClassDef) -> bool:
    return any("Struct" in ast.unparse(b) for b in cls.bases) or any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def _annotation_names(annotation: ast.expr | None) -> set[str]:
    """``a | b | None`` -> {"a", "b", "None"}; a string annotation is parsed."""
    if annotation is None:
        return {"?"}
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _annotation_names(annotation.left) | _annotation_names(annotation.right)
    return {ast.unparse(annotation)}


def _is_data(annotation: ast.expr | None) -> bool:
    names = _annotation_names(annotation) - {"None"}
    return bool(names) and all(n in DATA or n.endswith("Options") for n in names)


class Holders:
    """The context holders of a tree: class name -> its fields' annotations."""

    def __init__(self, root: Path) -> None:
        self.fields: dict[str, dict[str, ast.expr]] = {}
        for path in root.rglob("context.py"):
            for cls in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(cls, ast.ClassDef) and _is_record(cls):
                    self.fields[cls.name] = {
                        s.target.id: s.annotation for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    }

    def holder(self, annotation: ast.expr | None) -> str | None:
        names = _annotation_names(annotation)
        return next((n for n in names if n in self.fields), None)

    def collaborators(self, name: str, used: set[str] | None = None) -> int:
        return sum(not _is_data(a) for f, a in self.fields[name].items() if used is None or f in used)


def _params(fn: ast.FunctionDef) -> list[ast.arg]:
    args = fn.args
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]  # self
    return out + [a for a in (args.vararg, args.kwarg) if a is not None]


def kept(fn: ast.FunctionDef, holders: Holders) -> int:
    """How many collaborators ``fn`` (an ``__init__``) keeps, counted as the module says."""
    count = 0
    for param in _params(fn):
        holder = holders.holder(param.annotation)
        if holder is None:
            count += not _is_data(param.annotation)
            continue
        fields: set[str] = set()
        whole = False
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == param.arg:
                fields.add(node.attr)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id == param.arg and not _is_attribute_base(fn, node):
                whole = True
        count += holders.collaborators(holder, None if whole else fields)
    return count


def _is_attribute_base(fn: ast.FunctionDef, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Attribute) and n.value is name for n in ast.walk(fn))


def constructors(path: Path, holders: Holders) -> Iterator[tuple[str, int]]:
    """(class name, collaborators it keeps) for ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                yield cls.name, kept(fn, holders)
        if cls.name in holders.fields and path.name == "context.py":
            yield cls.name, holders.collaborators(cls.name)


def counts(root: Path) -> dict[str, int]:
    holders = Holders(root)
    return {name: n for path in sorted(root.rglob("*.py")) for name, n in constructors(path, holders)}


def over_limit(root: Path) -> dict[str, int]:
    return {name: n for name, n in counts(root).items() if n > LIMIT}


def _is_collaborator(value: ast.expr) -> bool:
    """A value that wires an object in, not data."""
    if isinstance(value, (ast.Lambda, ast.Name, ast.Attribute)):
        return not (isinstance(value, ast.Name) and value.id in ("True", "False", "None"))
    if isinstance(value, ast.Call):
        callee = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
        return callee[:1].isupper()
    return False


def attachments(root: Path) -> list[str]:
    """``path:line: target`` of every collaborator attached after construction."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                params = {a.arg for a in _params(fn)} if fn.name == "__init__" else set()  # type: ignore[arg-type]
                for node in ast.walk(fn):
                    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                        continue
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if not isinstance(target, ast.Attribute) or not _is_collaborator(node.value):
                            continue
                        held = target.value
                        of_self = isinstance(held, ast.Attribute) and _rooted_at_self(held)
                        of_param = isinstance(held, ast.Name) and held.id in params
                        if of_self or of_param:
                            found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(target)}")
    return found


def _rooted_at_self(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def test_no_class_keeps_more_than_six_collaborators() -> None:
    over = over_limit(SIDECAR)
    grown = {name: n for name, n in over.items() if n > NOT_YET.get(name, LIMIT)}
    assert not grown, f"over {LIMIT} collaborators (counted as this module says): {grown}"
    assert set(over) == set(NOT_YET), f"NOT_YET lists classes now at the limit: {sorted(set(NOT_YET) - set(over))}"


def test_no_collaborator_is_attached_after_construction() -> None:
    assert set(attachments(SIDECAR)) == NOT_YET_ATTACHED


def test_the_count_sees_holder_fields_keyword_only_parameters_and_leaves_out_data(tmp_path: Path) -> None:
    """The check itself: a class taking a holder and three more keeps the
    holder's fields it reads plus three; settings and plain values are not counted."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "context.py").write_text(
        "@dataclass(frozen=True)\n"
        "class Ctx:\n"
        "    a: A\n    b: B\n    c: C\n    d: D\n    options: JobOptions\n    state_dir: Path\n"
        "class Wide(msgspec.Struct, frozen=True):\n"
        "    a: A\n    b: B\n    c: C\n    d: D\n    e: E\n    f: F\n    g: G\n"
    )
    (pkg / "jobs.py").write_text(
        "class Reads:\n"
        "    def __init__(self, ctx: Ctx, x: X, y: Y, *, z: Z, limit: int = 3, options: JobOptions | None = None):\n"
        "        self.a, self.b, self.c, self.d, self.o = ctx.a, ctx.b, ctx.c, ctx.d, ctx.options\n"
        "class Keeps:\n"
        "    def __init__(self, ctx: Ctx, x: X):\n"
        "        self.ctx = ctx\n"
        "class Narrow:\n"
        "    def __init__(self, ctx: Ctx, x: X, y: Y):\n"
        "        self.a = ctx.a\n"
    )
    assert counts(pkg) == {"Ctx": 4, "Wide": 7, "Reads": 7, "Keeps": 5, "Narrow": 3}
    assert over_limit(pkg) == {"Wide": 7, "Reads": 7}


def test_the_check_finds_collaborators_attached_after_construction(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "wiring.py").write_text(
        "class Shell:\n"
        "    def __init__(self, proxy, recorder):\n"
        "        self.router = Router()\n"
        "        self.router.recorder = recorder\n"  # attached
        "        proxy.edge = Edge()\n"  # attached to a parameter
        "        self.router.limit = 3\n"  # data
        "        self.router.busy = recorder is not None\n"  # data
        "    def later(self, msg):\n"
        "        self.router.mark = self.mark\n"  # attached later still
        "        msg.seen = self.mark\n"  # a message passing through: not held
    )
    assert attachments(pkg) == ["pkg/wiring.py:4: self.router.recorder", "pkg/wiring.py:5: proxy.edge", "pkg/wiring.py:9: self.router.mark"]
