"""No constructor in ``sidecar/`` takes more than five collaborators.

Long positional constructor lists (``Sessions`` once took 12) are wiring
nobody can read and every new job has to thread through. The shared ones
travel in small context objects instead (``sidecar/session/context.py``,
``sidecar/lifecycle/context.py``).

What is counted, read from the source with ``ast`` (nothing is imported):

- every class's hand-written ``__init__``: all its parameters but ``self``,
  positional-only, positional and keyword-only alike, with or without a
  default; a ``*args`` or ``**kwargs`` counts as one;
- every dataclass defined in a module named ``context.py``: those are the
  collaborator holders, so each annotated field counts as a parameter of
  its generated ``__init__`` (a holder of twelve would just move the list).

Other dataclasses and msgspec Structs are records of data (a turn's state,
the settings), not wiring, and are not counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.markdown import ROOT

LIMIT = 5
SIDECAR = ROOT / "sidecar"
NOT_YET: set[str] = set()
"""Still over, listed with its exact count so that it cannot grow and the
entry must go once it is brought down (none now)."""


def init_params(fn: ast.FunctionDef) -> int:
    args = fn.args
    named = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
    star = (args.vararg is not None) + (args.kwarg is not None)
    return named + star - 1  # self


def is_record(cls: ast.ClassDef) -> bool:
    """A class whose fields are its constructor's parameters: a msgspec
    Struct, or a dataclass."""
    return any("Struct" in ast.unparse(b) for b in cls.bases) or any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


def constructors(path: Path) -> Iterator[tuple[str, int]]:
    """(class name, how many parameters its constructor takes) for ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    holder_module = path.name == "context.py"
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                yield cls.name, init_params(fn)
        if holder_module and is_record(cls):
            yield cls.name, sum(isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) for s in cls.body)


def over_limit(root: Path) -> list[str]:
    return sorted(
        f"{path.relative_to(root.parent)}: {name} takes {n}"
        for path in root.rglob("*.py")
        for name, n in constructors(path)
        if n > LIMIT
    )


def test_no_constructor_takes_more_than_five_collaborators() -> None:
    assert set(over_limit(SIDECAR)) == NOT_YET


def test_the_count_sees_keyword_only_parameters_and_holder_fields(tmp_path: Path) -> None:
    """The check itself: a keyword-only list and a six-field holder are caught."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "jobs.py").write_text(
        "class Wide:\n"
        "    def __init__(self, a, b, c, *, d, e, f=None):\n"
        "        pass\n"
        "class Narrow:\n"
        "    def __init__(self, a, b, c, d, e):\n"
        "        pass\n"
        "@dataclass\n"
        "class Record:\n"
        "    a: int\n    b: int\n    c: int\n    d: int\n    e: int\n    f: int\n"
    )
    (pkg / "context.py").write_text(
        "@dataclass(frozen=True)\n"
        "class Holder:\n"
        "    a: int\n    b: int\n    c: int\n    d: int\n    e: int\n    f: int\n"
        "class StructHolder(msgspec.Struct, frozen=True):\n"
        "    a: int\n    b: int\n    c: int\n    d: int\n    e: int\n    f: int\n"
    )
    assert over_limit(pkg) == ["pkg/context.py: Holder takes 6", "pkg/context.py: StructHolder takes 6", "pkg/jobs.py: Wide takes 6"]
