"""No two public classes or functions in ``sidecar/``, ``protocol/`` and
``engines/`` share a name with different meanings.

A reader who meets ``Ledger`` or ``decode`` must know which one it is without
looking at the import: two ``Ledger``s (the planner's view and the store's
file) or two ``client_tool_names`` that meant different things were real
confusions. What is counted, read from the source with ``ast`` (nothing is
imported): every module-level ``class``, ``def`` and ``async def`` whose name
does not start with ``_``, and every module-level type alias (a CamelCase
name assigned at module level, such as ``Event = A | B``). Constants
(``UPPER_CASE``), type variables and loggers are not names a reader looks up.
A re-export (``from .x import Name``) defines nothing and is not counted.

A name defined in two modules fails the test unless :data:`SAME_MEANING`
lists it with the reason it is one meaning.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from tests.support.markdown import ROOT

PACKAGES = ("sidecar", "protocol", "engines")

SAME_MEANING: dict[str, str] = {
    "main": "the codex-sidecar command: sidecar.launch.main is the console script's (the child started first), "
    "sidecar.cli.main the click CLI it hands over to, which console scripts installed before sidecar.launch still call",
}
"""Names defined in more than one module on purpose, each with why it is
one meaning."""


def type_aliases(node: ast.stmt) -> Iterator[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    for target in targets:
        if isinstance(target, ast.Name) and target.id[:1].isupper() and not target.id.isupper():
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("TypeVar"):
                continue
            yield target.id


def public_names(path: Path) -> Iterator[str]:
    """The public classes, functions and type aliases ``path`` defines at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if not node.name.startswith("_"):
                yield node.name
        else:
            yield from type_aliases(node)


def defined_twice(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, list[str]]:
    """Each public name defined in more than one module: the modules."""
    where: dict[str, list[str]] = defaultdict(list)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for name in set(public_names(path)):
                where[name].append(str(path.relative_to(root)))
    return {name: modules for name, modules in sorted(where.items()) if len(modules) > 1}


def test_no_two_modules_define_one_public_name() -> None:
    clashes = {name: modules for name, modules in defined_twice(ROOT).items() if name not in SAME_MEANING}
    assert not clashes, f"public names defined in more than one module (rename one, or say in SAME_MEANING why they are one): {clashes}"


def test_every_allowed_name_is_still_defined_twice() -> None:
    """An entry whose duplicate went away must go too (the list stays short and true)."""
    assert set(SAME_MEANING) <= set(defined_twice(ROOT))


def test_the_check_sees_classes_functions_and_type_aliases_but_not_re_exports(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one.py").write_text(
        "from typing import TypeVar\n"
        "class Ledger: ...\n"
        "def load(): ...\n"
        "async def fetch(): ...\n"
        "Event = int | str\n"
        "T = TypeVar('T')\n"
        "LIMIT = 5\n"
        "def _private(): ...\n"
    )
    (tmp_path / "b" / "two.py").write_text(
        "from a.one import fetch\n"
        "class Ledger: ...\n"
        "def load(): ...\n"
        "Event = bytes\n"
        "T = TypeVar('T')\n"
        "LIMIT = 6\n"
        "def _private(): ...\n"
    )
    assert defined_twice(tmp_path, ("a", "b")) == {
        "Event": ["a/one.py", "b/two.py"],
        "Ledger": ["a/one.py", "b/two.py"],
        "load": ["a/one.py", "b/two.py"],
    }
