"""An engine's stand-in for a tool output it keeps out of line is shown to
the model as its text (the reference it needs for ``lcm_expand`` and the
short summary); every other tool result stays a one-line placeholder."""

from __future__ import annotations

from engines import AssistantMessage, TextBlock, ToolCallBlock, ToolResultMessage, UserMessage
from sidecar.projection import OUT_OF_LINE_STAND_IN, project_turn_input

STAND_IN = (
    "[large bash output kept out of line: msg_0123456789abcdef, 60012 tokens, not shown here. "
    "Read it with lcm_expand id=msg_0123456789abcdef (a page at a time; offset= gives the next page), "
    "or ask lcm_expand_query a question about it.]\n"
    "Extractive summary (no model call):\n"
    "2001 lines, 180000 characters.\n"
    "First lines:\n"
    "  1: 2025-05-01T10:00:00 worker-0 processed batch 0\n"
    "Lines that look like errors or warnings:\n"
    "  2001: ERROR: replica pg-kestrel-07 lagging by 4250 ms"
)


def _history(result_text: str, *, is_error: bool = False, blocks: list | None = None) -> list:
    return [
        UserMessage(content="run the export", timestamp=1),
        AssistantMessage(content=[ToolCallBlock(id="c1", name="bash", arguments={"command": "export.sh"})], timestamp=2),
        ToolResultMessage(tool_call_id="c1", tool_name="bash", content=blocks or [TextBlock(text=result_text)], is_error=is_error, timestamp=3),
        AssistantMessage(content=[TextBlock(text="the export ran")], timestamp=4),
    ]


def _entry(text: str) -> str:
    """The rendered ``[toolResult]`` entry of a projection."""
    return next(e for e in text.split("\n\n[") if e.startswith("toolResult]"))


def test_a_stand_in_is_shown_as_its_text_with_the_reference_and_summary():
    items = [{"type": "text", "text": "what failed?", "text_elements": []}]
    projection = project_turn_input(_history(STAND_IN), items)
    assert projection.text is not None
    assert _entry(projection.text) == "toolResult]\n[tool result: bash ok, kept out of line]\n" + STAND_IN
    # Deterministic bytes, in either placement.
    assert project_turn_input(_history(STAND_IN), items).text == projection.text
    block = project_turn_input(_history(STAND_IN), items, placement="additional_context")
    assert block.text is not None and STAND_IN in block.text
    errored = project_turn_input(_history(STAND_IN, is_error=True), items).text
    assert errored is not None and "[tool result: bash error, kept out of line]" in errored


def test_ordinary_tool_results_stay_placeholders():
    items = [{"type": "text", "text": "what failed?", "text_elements": []}]
    for text, blocks in [
        ("plain output\nERROR: nothing to see", None),
        ("log line\n" + STAND_IN, None),  # the marker must open the output
        (STAND_IN.replace("60012 tokens", "many tokens"), None),
        ("", [TextBlock(text=STAND_IN), TextBlock(text="more")]),  # one text part only
    ]:
        projection = project_turn_input(_history(text, blocks=blocks), items)
        assert projection.text is not None
        entry = _entry(projection.text)
        assert entry.startswith("toolResult]\n[tool result: bash ok, ") and entry.endswith(" chars]"), entry
        assert "msg_0123456789abcdef" not in projection.text and "ERROR" not in projection.text


def test_a_long_stand_in_is_cut_at_the_part_limit_and_keeps_its_reference():
    long = STAND_IN + "\n" + "\n".join(f"  {i}: filler line {i}" for i in range(2000))
    assert OUT_OF_LINE_STAND_IN.match(long)
    items = [{"type": "text", "text": "what failed?", "text_elements": []}]
    projection = project_turn_input(_history(long), items, max_part_chars=2_000)
    assert projection.text is not None
    entry = _entry(projection.text)
    assert "lcm_expand id=msg_0123456789abcdef" in entry and "[truncated " in entry
    assert len(entry) < 2_200
