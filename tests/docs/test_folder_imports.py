"""No import loop between the folders of ``sidecar/``.

A folder is a floor: ``session/`` decides and does no I/O, ``relay/`` moves
lines, ``lifecycle/`` does the I/O of the jobs. A loop between two folders
means neither can be read, tested or replaced without the other. The graph is
built from the source with ``ast`` (nothing is imported): an edge from a
module's folder to the folder of every ``sidecar`` module it imports, at any
depth (a function's lazy import too), and imports under ``if TYPE_CHECKING``
count as well: a type that names the relay still ties ``session/`` to it.
The modules directly in ``sidecar/`` (``methods``, ``projection``, ``serve``,
the CLI...) are not a floor of their own: the entry points at the top import
everything, the pure ones at the bottom almost nothing, so each counts as
its own node (``sidecar/methods.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.markdown import ROOT

SIDECAR = ROOT / "sidecar"

NOT_YET: set[tuple[str, ...]] = set()
"""Loops still there, each as its sorted nodes (issue 34): none. A new loop
fails."""


def node(module: str, root: Path = SIDECAR) -> str | None:
    """``sidecar.session.state`` -> ``session``; ``sidecar.methods`` ->
    ``methods.py``; ``sidecar`` itself (its ``__init__``) -> ``__init__.py``;
    anything outside ``sidecar`` -> None."""
    parts = module.split(".")
    if parts[0] != "sidecar":
        return None
    if len(parts) == 1:
        return "__init__.py"
    sub = root / parts[1]
    return parts[1] if sub.is_dir() else f"{parts[1]}.py"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, root: Path) -> set[str]:
    """Every module (or ``module.name``) ``path`` imports, absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = package[: len(package) - n.level + 1] if n.level else []
            mod = ".".join([*base, *([n.module] if n.module else [])])
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in n.names)  # ``from . import methods``
    return out


def folder_graph(root: Path) -> dict[str, set[str]]:
    """Folder (or top module) -> the folders and top modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        src = node(module_name(path, root), root)
        assert src is not None
        for mod in imported(path, root):
            dst = node(mod, root)
            # ``from sidecar import x`` names a module only when ``x.py`` is one
            if dst is not None and dst != src and (not dst.endswith(".py") or (root / dst).exists()):
                graph.setdefault(src, set()).add(dst)
    return graph


def loops(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.add(tuple(sorted(scc)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_loop_between_the_folders_of_sidecar() -> None:
    assert loops(folder_graph(SIDECAR)) == NOT_YET


def test_session_imports_nothing_of_the_relay() -> None:
    """``session/`` decides and does no I/O: what it needs of the relay is a
    Protocol of its own (``session/context.py``'s ``Relay``)."""
    assert "relay" not in folder_graph(SIDECAR).get("session", set())


def test_the_thread_imports_nothing_of_the_store() -> None:
    """``thread/`` is the ground floor: it names the open files it carries
    by Protocols of its own (``thread/files.py``) that the store's classes
    satisfy; the store imports the thread's records it writes."""
    assert "store" not in folder_graph(SIDECAR).get("thread", set())


def test_only_the_top_imports_the_method_table() -> None:
    """The table's rows name the jobs' methods, so ``methods.py`` sits above
    the floors; they import its vocabulary (``rows.py``) and are handed what
    they read of it (the relay its notifications, the history's edge its
    thread-id keys, the lifecycle its rows)."""
    graph = folder_graph(SIDECAR)
    assert {src for src, dsts in graph.items() if "methods.py" in dsts} <= {"serve.py"}
    assert graph.get("rows.py", set()) == set()


def test_the_check_sees_loops_through_type_checking_and_relative_imports(tmp_path: Path) -> None:
    root = tmp_path / "sidecar"
    for folder in ("a", "b", "c"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "top.py").write_text("from .a import x\n")
    (root / "a" / "x.py").write_text("from ..b.y import Y\n")
    (root / "b" / "y.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import z\n")
    (root / "c" / "z.py").write_text("def f():\n    from sidecar.a import x\n")
    graph = folder_graph(root)
    assert graph == {"top.py": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert loops(graph) == {("a", "b", "c")}
