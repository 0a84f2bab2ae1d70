"""Credentials through a live sidecar with ``lossless`` (real codex 0.169.0,
the fake model): the client's thread and the sidecar's transcript mirror
keep every credential the user pasted; the store, every summary request to
the model and every summary hold none; the model's turn requests still read
the raw turns as the user wrote them, and no turn is rebuilt for it."""

from __future__ import annotations

from typing import Any

from tests.live.test_lossless import COMPACTING, env_for, history, is_summary_call, open_store, reply_for
from tests.support.codex import needs_codex
from tests.support.live import TURN_TIMEOUT, finalized, sidecar
from tools.codex_home import make_codex_home
from tools.fake_model import FakeModel, Text, input_texts

pytestmark = needs_codex

# (credential, what of it must not be stored)
PLANTED = [
    ("ghp_PLANTEDghpAbCdEfGhIjKlMnOpQrStUvWx01", "PLANTEDghp"),
    ("hf_PLANTEDhfAbCdEfGhIjKlMnOpQrStUvWx0", "PLANTEDhf"),
    ("AIzaSyPLANTEDgoogle0123456789abcdefghij", "PLANTEDgoogle"),
    ("AKIAPLANTEDAWSKEY012", "AKIAPLANTEDAWSKEY012"),
    ("sk-proj-PLANTEDopenaiAbCdEf0123456789", "PLANTEDopenai"),
]


def prompt(n: int) -> str:
    secret = PLANTED[n % len(PLANTED)][0]
    words = " ".join(f"w{n}x{k}" for k in range(25))
    return f"[t{n}] my password is PLANTEDpw{n}x and the key is {secret}; topic {n}: {words}"


async def converse(tmp_path, config: str) -> tuple[str, list, list, dict]:
    """16 turns with a credential in each; (thread id, the client's history,
    the model's requests, the thread's sidecar/status)."""
    work = tmp_path / "work"
    work.mkdir(parents=True)

    def model_reply(body: dict) -> Any:
        if is_summary_call(body):
            return Text("MODEL-SUMMARY " + input_texts(body, "user")[-1][-400:])  # repeats what it read
        return Text(reply_for(input_texts(body, "user")[-1]))

    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        env = env_for(tmp_path, home, config)
        model.script(*[model_reply] * 500)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            for text in PROMPTS:
                done = await client.run_turn(tid, text, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                status = await finalized(client, tid, done["turn"]["id"])
            seen = await history(client, tid)
        return tid, seen, list(model.requests), status["lifecycle"]["threads"][tid]


PROMPTS = [prompt(n) for n in range(16)]
CORES = [core for _, core in PLANTED] + [f"PLANTEDpw{n}x" for n in range(16)]


async def test_the_store_and_the_summary_model_see_no_credential_the_client_keeps_them_all(tmp_path):
    tid, seen, requests, thread = await converse(tmp_path / "on", COMPACTING)
    tmp = tmp_path / "on"
    # The client's thread and the sidecar's mirror of it are whole.
    assert seen == [m for text in PROMPTS for m in (("user", text), ("assistant", reply_for(text)))]
    mirror = b"".join(p.read_bytes() for p in (tmp / "state" / "sessions").rglob("*.jsonl"))
    assert all(core.encode() in mirror for core in CORES)
    # The store (every file of it) and every summary request hold none.
    store_bytes = b"".join(p.read_bytes() for p in (tmp / "state" / "engines" / "lossless").iterdir() if p.is_file())
    summary_requests = "\n".join(t for r in requests if is_summary_call(r) for t in input_texts(r))
    assert summary_requests, "the conversation was summarised"
    assert [c for c in CORES if c.encode() in store_bytes or c in summary_requests] == []
    store = open_store(tmp)
    try:
        assert store.summaries(tid) and not [c for s in store.summaries(tid) for c in CORES if c in s.text]
    finally:
        store.close()
    # The last turn's request read its raw turns as written (the client's copies) ...
    last = "\n".join(input_texts([r for r in requests if not is_summary_call(r)][-1]))
    assert PROMPTS[-1] in last and PROMPTS[-2] in last
    # ... and the sidecar rebuilt the thread no more often than with redaction off.
    _, _, _, plain = await converse(tmp_path / "off", COMPACTING + "redact_secrets = false\n")
    assert thread["rebuilds"] == plain["rebuilds"]
