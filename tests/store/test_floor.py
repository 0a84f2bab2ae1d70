"""sidecar/store/ is a floor below the session: it imports nothing of
sidecar/session/ (nor of the lifecycle or the relay above it), so the two
folders form no import loop (issue 34: ``store/learned.py`` imported
``session/state.py`` while ``session/state.py`` imports the store)."""

from __future__ import annotations

import ast

from tests.support.markdown import ROOT

ABOVE = ("session", "lifecycle", "relay", "rebuild", "history", "host")


def imported(path) -> set[str]:
    """The sidecar folders a module of sidecar/store/ imports (relative or absolute)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level >= 2 and node.module:
                out.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("sidecar."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("sidecar."))
    return out


def test_the_store_imports_nothing_of_the_floors_above_it():
    found = {p.name: sorted(imported(p) & set(ABOVE)) for p in sorted((ROOT / "sidecar" / "store").glob("*.py"))}
    assert {name: folders for name, folders in found.items() if folders} == {}
