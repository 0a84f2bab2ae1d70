"""A large tool output kept out of line reaches the model, through the
sidecar's projection, as its reference and summary; the model can read the
original back whole with the id it was shown."""

from __future__ import annotations

import re

from engines import UserMessage
from engines.tokens import count_tokens
from sidecar.projection import CONTEXT_CLOSE, CONTEXT_HEADER, CONTEXT_OPEN, CONTEXT_SAFETY_NOTE, REQUEST_HEADER, char_budget_for_tokens, project_turn_input

from .conftest import SESSION, T0, assemble, make_engine, run_turn, turn
from .test_large_outputs import big_log, expand, tool_turn

BUDGET = 32_000  # the engine's default budget


async def _pages(engine, mid: str) -> str:
    """The message ``mid`` read back with lcm_expand, page after page."""
    pages, offset = [], 0
    while True:
        page = await expand(engine, id=mid, max_tokens=16_000, **({"offset": offset} if offset else {}))
        assert not page.is_error, page.text
        body = page.text.split("\n", 1)[1]
        more = re.search(r"\n\[… message cut at \d+ tokens: characters \d+-\d+ not shown; call lcm_expand with id=\S+ offset=(\d+)", body)
        if more is None:
            return "".join([*pages, body])
        pages.append(body[: more.start()])
        offset = int(more.group(1))


async def test_the_projected_request_after_a_60k_token_output_carries_its_reference_and_summary(host):
    engine = await make_engine(host, {})  # defaults: 32,000-token budget, 25,000-token threshold
    log = big_log(60_000)
    history: list = []
    await run_turn(engine, history, turn(1))
    await run_turn(engine, history, tool_turn(2, log))
    prompt = "what failed in the export?"
    result = await assemble(engine, [*history, UserMessage(content=prompt, timestamp=T0 + 99_000)])
    items = [{"type": "text", "text": prompt, "text_elements": []}]
    per_turn = project_turn_input(result.messages, items, char_budget=char_budget_for_tokens(BUDGET))
    delta = project_turn_input(result.messages, items, placement="additional_context")
    assert per_turn.messages_dropped == 0
    for text in (per_turn.text, delta.text):
        assert text is not None
        # The model reads the reference and the summary (the error line the log holds).
        ids = re.findall(r"lcm_expand id=(msg_[0-9a-f]+)", text)
        assert len(ids) == 1, text[-3000:]
        assert "kept out of line" in text and "ERROR: replica pg-kestrel-07 lagging by 4250 ms" in text
        # Within the budget plus the projection's framing: its header and
        # trailer, and a label line (and a separator) an entry.
        entries = text.count("\n\n[")
        framing = count_tokens("\n".join([CONTEXT_HEADER, CONTEXT_SAFETY_NOTE, CONTEXT_OPEN, CONTEXT_CLOSE, REQUEST_HEADER])) + 12 * (entries + 1)
        assert count_tokens(text) <= BUDGET + framing
        assert count_tokens(text) < 5_000  # the 60k tokens stayed out
    assert per_turn.text is not None and delta.text is not None and per_turn.text.startswith(delta.text)
    # Deterministic bytes: the same assembly projects the same.
    again = await assemble(engine, [*history, UserMessage(content=prompt, timestamp=T0 + 99_000)])
    assert project_turn_input(again.messages, items, char_budget=char_budget_for_tokens(BUDGET)).text == per_turn.text
    # The id the model was shown gives the original back whole.
    (row,) = [r for r in engine.store.messages_between(SESSION, 1) if r.tokens > 25_000]
    assert row.id == ids[0]
    whole = await _pages(engine, ids[0])
    assert whole == row.text and whole.endswith("\n" + log)  # the stored text: a one-line header, then the output
