"""docs/ENGINE_API.md and the code it describes name the same things.

The contract engine authors read is the file; the code is ``engines/api.py``
(the data types and the host) and ``engines/engine.py`` (the engine object:
protocols, ``BaseContextEngine``, how optional methods are found).  Every
public name of those modules is in the document, every type, field, function
and method the document names exists in them, and the file is a readable
document of a sane size (a botched edit once made it 2.9 MB, one character a
line)."""

from __future__ import annotations

import inspect
import re

import msgspec
import pytest

import engines
from engines import api, engine, tokens
from tests.support.markdown import ROOT, code_spans, prose_and_code, table_rows

DOC = ROOT / "docs" / "ENGINE_API.md"

# Names the document may use in code spans that are neither in engines/api.py
# nor in engines/engine.py: the entry-point constant and the token counter
# live elsewhere in the package, and Protocol is typing's.
ELSEWHERE = {
    "ENTRY_POINT_GROUP": "engines.loader",
    "count_tokens": "engines.tokens (and EngineHost.count_tokens)",
    "Protocol": "typing",
    "None": "Python",
    "factory": "the entry point's value, the engine author's own callable",
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_LIKE = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")  # CamelCase, not CONSTANT
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*[A-Z]$")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _public() -> dict[str, object]:
    names = {name: getattr(api, name) for name in api.__all__}
    names.update({name: getattr(engine, name) for name in engine.__all__})
    return names


def _named_in_spans(text: str) -> set[str]:
    """Identifiers a code span names as a contract name: ``Foo``, ``foo(...)``,
    ``engines.foo``, ``Foo.field``, ``CONSTANT``."""
    named: set[str] = set()
    for span in code_spans(text):
        head = span.split("(", 1)[0].strip()
        if head.startswith("engines."):
            head = head.removeprefix("engines.")
            if "." in head:  # a submodule's name: engines.tokens.count_tokens
                named.add(head.rsplit(".", 1)[1])
                continue
        head = head.split(".", 1)[0]
        if not _IDENT.fullmatch(head):
            continue
        if _TYPE_LIKE.match(head) or _CONSTANT.match(head) or "(" in span:
            named.add(head)
    return named


def _doc_classes(code_lines: list[str]) -> dict[str, set[str]]:
    """The members each ``class X`` of the document's code blocks declares."""
    members: dict[str, set[str]] = {}
    current: str | None = None
    for line in code_lines:
        cls = re.match(r"^class (\w+)", line)
        if cls:
            current = cls.group(1)
            members.setdefault(current, set())
            continue
        if current is None:
            continue
        method = re.match(r"^\s+(?:async\s+)?def (\w+)", line)
        attribute = re.match(r"^\s+(\w+):\s", line)
        if method:
            members[current].add(method.group(1))
        elif attribute:
            members[current].add(attribute.group(1))
    return members


def _doc_fields() -> dict[str, set[str]]:
    """Struct name -> the fields the document's tables give it."""
    fields: dict[str, set[str]] = {}
    for row in table_rows(_text()):
        if len(row) < 2:
            continue
        first = re.match(r"`(\w+)`", row[0])
        if first is None:
            continue
        name = first.group(1)
        if _TYPE_LIKE.match(name):  # | `TextBlock` (...) | `text: str` |
            owner = name
        else:  # | `ingest_batch` | params fields | result |
            owner = "".join(part.title() for part in name.split("_")) + "Params"
        for span in re.findall(r"`([^`]+)`", row[1]):
            field = re.match(r"^(\w+)(?::|$)", span.strip())
            if field:
                fields.setdefault(owner, set()).add(field.group(1))
        # results written as `Result(field: type, ...)`, anywhere in the row
        for cell in row[1:]:
            for span in re.findall(r"`([^`]+)`", cell):
                call = re.match(r"^(\w+)\((.*)\)$", span.strip(), re.S)
                if call and _TYPE_LIKE.match(call.group(1)):
                    fields.setdefault(call.group(1), set()).update(re.findall(r"(\w+):", call.group(2)))
    return fields


def test_the_document_is_a_readable_size():
    text = _text()
    assert 4_000 < len(text.encode()) < 64_000, f"{DOC.name} is {len(text.encode())} bytes"
    lines = text.splitlines()
    one_char = sum(1 for line in lines if len(line.strip()) == 1)
    assert one_char <= 5, f"{one_char} lines of a single character"
    assert text.count("**Status:**") == 1


def test_every_contract_name_the_document_uses_exists_in_the_code():
    public = _public()
    missing = sorted(name for name in _named_in_spans(_text()) if name not in public and name not in ELSEWHERE)
    assert not missing, f"ENGINE_API.md names what engines/api.py and engines/engine.py lack: {missing}"
    for name, where in ELSEWHERE.items():
        if where.startswith("engines.loader"):
            assert name in engines.__all__
    assert callable(tokens.count_tokens)


def test_every_public_name_of_the_contract_modules_is_in_the_document():
    text = _text()
    _, code = prose_and_code(text)
    named = {word for span in code_spans(text) for word in _IDENT.findall(span)} | set(_doc_classes(code))
    missing = sorted(name for name in _public() if name not in named)
    assert not missing, f"engines/api.py or engines/engine.py export names ENGINE_API.md never mentions: {missing}"


def test_every_field_in_the_tables_exists_on_its_type():
    public = _public()
    wrong: list[str] = []
    for owner, names in sorted(_doc_fields().items()):
        cls = public.get(owner)
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            continue
        have = {f.name for f in msgspec.structs.fields(cls)}
        wrong += [f"{owner}.{name}" for name in sorted(names - have)]
    assert not wrong, f"fields in ENGINE_API.md that the code does not have: {wrong}"


def test_every_struct_field_is_in_the_document():
    """A field added to the code and not to the contract fails here."""
    words = {word for span in code_spans(_text()) for word in _IDENT.findall(span)}
    missing = []
    for name, obj in _public().items():
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            missing += [f"{name}.{f.name}" for f in msgspec.structs.fields(obj) if f.name not in words]
    assert not missing, f"fields ENGINE_API.md never mentions: {missing}"


@pytest.mark.parametrize(
    ("doc_class", "code_classes"),
    [
        ("ContextEngine", (engine.ContextEngineWithOptionals, engine.ContextEngineWithTools, engine.BaseContextEngine)),
        ("EngineHost", (api.EngineHost,)),
    ],
)
def test_every_member_of_the_documented_protocols_exists(doc_class, code_classes):
    _, code = prose_and_code(_text())
    declared = _doc_classes(code)
    assert doc_class in declared and declared[doc_class], f"no `class {doc_class}` block in ENGINE_API.md"
    have = set()
    for cls in code_classes:
        have |= {name for name, _ in inspect.getmembers(cls)} | set(getattr(cls, "__annotations__", {}))
    missing = sorted(declared[doc_class] - have)
    assert not missing, f"{doc_class} members in ENGINE_API.md that the code lacks: {missing}"


def test_the_documented_method_lists_match_the_code():
    _, code = prose_and_code(_text())
    declared = _doc_classes(code)["ContextEngine"]
    assert set(engine.REQUIRED_METHODS) | set(engine.OPTIONAL_METHODS) | set(engine.EXTENSION_METHODS) <= declared
