"""Every relative link in docs/ and the READMEs leads somewhere: the file
exists, and an ``#anchor`` is a heading (GitHub's anchor rules) or an
explicit anchor of the file it points into.  A repository file named in
code (``tests/support/harness.py``) exists too."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.markdown import ROOT, anchors, code_spans, github_slug, link_targets

DOCUMENTS = sorted([ROOT / "README.md", ROOT / "tests" / "README.md", *(ROOT / "docs").rglob("*.md")])


def _relative(target: str) -> bool:
    return "://" not in target and not target.startswith(("mailto:", "//"))


def broken_links(document: Path) -> list[str]:
    broken: list[str] = []
    for target in link_targets(document.read_text(encoding="utf-8")):
        if not _relative(target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not path.exists():
            broken.append(f"{target}: no such file")
            continue
        if not anchor:
            continue
        if path.is_dir() or path.suffix != ".md":
            broken.append(f"{target}: an anchor into something that is not Markdown")
        elif unquote(anchor).lower() not in anchors(path.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading with that anchor in {path.name}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    broken = broken_links(document)
    assert not broken, f"{document.relative_to(ROOT)}: {broken}"


_FILE_SPAN = re.compile(r"^(?:\.\./)?((?:tests|sidecar|engines|protocol|tools|docs|fixtures)/[\w./-]*\.(?:py|md|toml|json|jsonl))$")


def missing_files(document: Path) -> list[str]:
    """Repository files a code span names (``sidecar/relay/router.py``) that do not exist."""
    found = (_FILE_SPAN.match(span) for span in code_spans(document.read_text(encoding="utf-8")))
    return sorted({m.group(1) for m in found if m and not (ROOT / m.group(1)).exists()})


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_file_named_in_code_exists(document):
    missing = missing_files(document)
    assert not missing, f"{document.relative_to(ROOT)} names files that do not exist: {missing}"


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("2. Packaging", "2-packaging"),
        ("The turn's end", "the-turns-end"),
        ("`turn/start` and `sidecar/...`", "turnstart-and-sidecar"),
        ("Additions: engine tools and the host", "additions-engine-tools-and-the-host"),
        ("Data types (msgspec Structs; snake_case in Python)", "data-types-msgspec-structs-snake_case-in-python"),
        ("A [link](x.md) in a heading", "a-link-in-a-heading"),
        ("Fail open -- any error", "fail-open----any-error"),
    ],
)
def test_anchors_follow_githubs_rules(heading, slug):
    assert github_slug(heading) == slug


def test_duplicate_headings_are_numbered():
    assert anchors("# A\n## A\n### A\n```\n# not a heading\n```\n") == {"a", "a-1", "a-2"}


def test_a_missing_file_and_a_missing_anchor_are_found(tmp_path):
    (tmp_path / "other.md").write_text("# Here\n")
    doc = tmp_path / "doc.md"
    doc.write_text("[ok](other.md#here) [gone](missing.md) [bad](other.md#there) [self](#nothing) [web](https://x.org/#y)\n`[code](nowhere.md)`\n")
    assert broken_links(doc) == [
        "missing.md: no such file",
        "other.md#there: no heading with that anchor in other.md",
        "#nothing: no heading with that anchor in doc.md",
    ]
