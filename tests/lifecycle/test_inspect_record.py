"""A turn's inspection record: what ``codex-sidecar view`` reads of it.

Against the fake app-server: the text a projection sent (input and
``additionalContext``) and the budget, the fields the view added, beside
what Codex really got, the text in ``inspect-text/`` beside the records."""

from __future__ import annotations

import json

from sidecar.lifecycle.turns import INSPECT_TEXT_CHARS
from sidecar.store.inspect import decode_records, inspect_text_path
from tests.support.modes import client_turn_starts, context_of, inspect_records, modes_sidecar, recall


async def test_a_projected_turn_s_record_carries_the_text_sent_and_the_budget(tmp_path):
    engine = recall(lambda prompt: f"RECALL<{prompt[-8:]}>")
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "Question one: the tram?")
        await run.turn_ok(tid, "Question two: the bakery?")

    records = inspect_records(run, tid)
    texts = decode_records(inspect_text_path(tmp_path / "state", tid).read_bytes())
    starts = [json.loads(line) for line in run.child_lines("turn/start")]
    assert [t["turnId"] for t in texts] == [r["turnId"] for r in records]
    for record, text, start in zip(records, texts, starts, strict=True):
        # exactly what went to Codex: its additionalContext and its input's text, beside the record
        assert "sent" not in record  # the records stay small: the text has a file of its own
        assert text["sent"]["additionalContext"] == context_of(start)
        assert text["sent"]["input"] == "\n\n".join(i["text"] for i in start["params"]["input"] if i.get("type") == "text")
        assert isinstance(record["budget"], int) and record["budget"] > 0
    assert len(client_turn_starts(run)) == 2


def test_the_sent_text_kept_is_bounded():
    from sidecar.lifecycle.turns import sent_text
    from sidecar.projection import Projection

    big = "x" * (INSPECT_TEXT_CHARS + 10)
    kept = sent_text(Projection(input=({"type": "text", "text": big},), additional_context={"k": {"kind": "application", "value": big}}))
    assert len(kept["input"]) == len(kept["additionalContext"]) == INSPECT_TEXT_CHARS
