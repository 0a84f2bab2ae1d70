"""Engine tools as Codex dynamic tools: the pure decisions.

An engine's :class:`~engines.api.ToolSpec` list becomes ``dynamicTools``
entries on the client's ``thread/start`` (a name the client declares itself
stays the client's); Codex then asks for each call with the server request
``item/tool/call``, which the sidecar answers, and reports the call as a
``dynamicToolCall`` item, which the client never sees. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from engines import ToolCallResult, ToolSpec

DYNAMIC_TOOL_CALL = "dynamicToolCall"
"""The item type of a dynamic tool call (``thread/read``, ``item/*``)."""


def dynamic_tool(spec: ToolSpec) -> dict[str, Any]:
    """The ``dynamicTools`` entry Codex 0.169 takes for a function tool."""
    return {"type": "function", "name": spec.name, "description": spec.description, "inputSchema": spec.input_schema}


def client_tool_names(dynamic_tools: Any) -> set[str]:
    """The top-level function names a client's ``dynamicTools`` declares
    (a namespace's members are called with their namespace: no clash)."""
    names: set[str] = set()
    for entry in dynamic_tools if isinstance(dynamic_tools, list) else ():
        if not isinstance(entry, dict) or entry.get("type") == "namespace" or "tools" in entry:
            continue
        if isinstance(entry.get("name"), str):
            names.add(entry["name"])
    return names


def usable_specs(specs: Iterable[Any]) -> list[ToolSpec]:
    """The engine's specs Codex can take: a non-empty unique name, a
    description and an object schema each (the rest are left out)."""
    out: list[ToolSpec] = []
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, ToolSpec) or not spec.name or spec.name in seen:
            continue
        if not isinstance(spec.description, str) or not isinstance(spec.input_schema, dict):
            continue
        seen.add(spec.name)
        out.append(spec)
    return out


def merge_tools(params: Mapping[str, Any], specs: list[ToolSpec]) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """``thread/start`` params with the engine's tools appended to
    ``dynamicTools``, and the names offered; ``(None, ())`` when nothing is
    added (no tools, or the client declares every name). The client's own
    entries come first and are left as they are."""
    theirs = params.get("dynamicTools")
    if theirs is not None and not isinstance(theirs, list):
        return None, ()  # a shape Codex will refuse anyway: not ours to touch
    taken = client_tool_names(theirs)
    added = [s for s in specs if s.name not in taken]
    if not added:
        return None, ()
    merged = {**params, "dynamicTools": [*(theirs or ()), *(dynamic_tool(s) for s in added)]}
    return merged, tuple(s.name for s in added)


def engine_call(params: Any, offered: Callable[[str], frozenset[str]]) -> bool:
    """Whether an ``item/tool/call`` is for one of the engine's tools on its
    thread (no namespace, a name the engine was given the thread for)."""
    if not isinstance(params, dict) or params.get("namespace") is not None:
        return False
    thread_id, tool = params.get("threadId"), params.get("tool")
    return isinstance(thread_id, str) and isinstance(tool, str) and tool in offered(thread_id)


def call_arguments(arguments: Any) -> dict[str, Any] | None:
    """The call's arguments as the engine takes them (a JSON object), or
    None when they are not one."""
    return arguments if isinstance(arguments, dict) else None


def tool_answer(result: ToolCallResult) -> dict[str, Any]:
    """The ``item/tool/call`` result Codex expects (``DynamicToolCallResponse``)."""
    return {"contentItems": [{"type": "inputText", "text": result.text}], "success": not result.is_error}


def failed_answer(name: str, why: str) -> dict[str, Any]:
    """An answer the model can read when the engine could not give one."""
    return tool_answer(ToolCallResult(text=f"The {name} tool failed: {why}.", is_error=True))


# ---------------------------------------------------------------- hiding


def is_engine_item(item: Any, names: frozenset[str]) -> bool:
    """A ``dynamicToolCall`` item of one of ``names`` (no namespace)."""
    return (
        isinstance(item, dict)
        and item.get("type") == DYNAMIC_TOOL_CALL
        and item.get("namespace") is None
        and item.get("tool") in names
    )


def without_engine_items(value: Any, names: frozenset[str]) -> Any:
    """``value`` (a read's result) with every engine tool call item removed
    from every list it is in, whether the list holds items (a turn's
    ``items``) or ``thread/items/list`` entries (``{item, turnId, ...}``).
    ``value`` itself when there is none, so callers can tell by identity."""
    if not names:
        return value
    return _strip(value, names)


def _strip(value: Any, names: frozenset[str]) -> Any:
    if isinstance(value, list):
        changed = False
        out = []
        for element in value:
            if is_engine_item(element, names) or (isinstance(element, dict) and is_engine_item(element.get("item"), names)):
                changed = True
                continue
            new = _strip(element, names)
            changed = changed or new is not element
            out.append(new)
        return out if changed else value
    if isinstance(value, dict):
        result: dict[str, Any] | None = None
        for key, child in value.items():
            new = _strip(child, names)
            if new is not child:
                if result is None:
                    result = dict(value)
                result[key] = new
        return value if result is None else result
    return value


def mentions_tool_call(line: bytes) -> bool:
    """A cheap test before decoding: can the frame hold a dynamic tool call item?"""
    return b'"dynamicToolCall"' in line
