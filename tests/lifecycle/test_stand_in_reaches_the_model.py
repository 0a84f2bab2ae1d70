"""Through the whole turn path (engine assemble, delta plan, rebuild,
projection into ``additionalContext``), the model reads an engine's
out-of-line stand-in for a tool output as its text, the reference first,
and an ordinary tool result as its placeholder."""

from __future__ import annotations

from typing import Any

from engines import AssembleResult, AssistantMessage, CompactionSummaryMessage, TextBlock, ToolCallBlock, ToolResultMessage
from sidecar.projection import CONTEXT_KEY
from tests.support.modes import modes_sidecar, scripted_engine

STAND_IN = (
    "[large bash output kept out of line: msg_00c0ffee00c0ffee, 61000 tokens, not shown here. "
    "Read it with lcm_expand id=msg_00c0ffee00c0ffee (a page at a time; offset= gives the next page), "
    "or ask lcm_expand_query a question about it.]\n"
    "Extractive summary (no model call):\n"
    "2412 lines, 241830 characters.\n"
    "Lines that look like errors or warnings:\n"
    "  2001: ERROR: replica pg-kestrel-07 lagging by 4250 ms"
)


def _tool_pair(call_id: str, text: str) -> list[Any]:
    return [
        AssistantMessage(content=[ToolCallBlock(id=call_id, name="bash", arguments={"command": "export.sh"})], timestamp=5),
        ToolResultMessage(tool_call_id=call_id, tool_name="bash", content=[TextBlock(text=text)], is_error=False, timestamp=6),
    ]


def _engine():
    """From the third turn: a summary, a tool call whose output is a
    stand-in, an ordinary tool call, then the newest two messages."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) >= 4:
            summary = CompactionSummaryMessage(summary="Earlier: the export was run.", tokens_before=20, timestamp=0)
            messages = [summary, *_tool_pair("c1", STAND_IN), *_tool_pair("c2", "secret-ordinary-output " * 50), *messages[-2:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    return scripted_engine(assemble)


def _context(seen: dict[str, Any]) -> str:
    extra = seen.get("additionalContext") or {}
    return "".join(extra[k]["value"] for k in sorted(extra) if k.startswith(CONTEXT_KEY))


async def test_the_model_reads_the_stand_in_reference_and_summary_but_not_ordinary_outputs(tmp_path):
    async with modes_sidecar(tmp_path, _engine()) as run:
        tid = await run.start_thread()
        for n, text in enumerate(["P1 export", "P2 again", "P3 what failed?"], 1):
            await run.turn_ok(tid, f"{text} {n}")
    seen = run.seen(tid)
    context = _context(seen[2])
    assert "[toolResult]\n[tool result: bash ok, kept out of line]\n" + STAND_IN in context
    assert "lcm_expand id=msg_00c0ffee00c0ffee" in context and "ERROR: replica pg-kestrel-07" in context
    assert "[tool result: bash ok, 1150 chars]" in context and "secret-ordinary-output" not in context
