"""``codex-sidecar engines lossless import``: real Codex rollouts and real
OpenClaw transcripts (``fixtures/import/``, recorded by
``tools/record_import_fixtures.py`` from codex 0.169.0 and OpenClaw 2026.9.6)
into the store, idempotently, on SQLite and PostgreSQL; lcm_grep then finds
their facts."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from click.testing import CliRunner

from engines import IngestBatchParams, ToolCallParams
from engines.lossless import Store
from engines.lossless.importer import (
    codex_messages,
    discover,
    import_transcript,
    openclaw_messages,
    openclaw_session_id,
    read_source,
)
from engines.testkit import FakeHost
from sidecar.cli import cli

from .conftest import make_engine

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "import"
CODEX = FIXTURES / "codex"
OPENCLAW = FIXTURES / "openclaw"
THREAD = "01a23462-3357-7c01-b9c3-6207a732e037"  # the recorded rollout's thread
OC_KEY = "agent:main:explicit:import-fixture"  # the recorded OpenClaw session's key


def _dump(store: Store) -> dict[str, list]:
    """Everything an import writes, for comparing two stores."""
    q = store.backend.execute
    return {
        "messages": [tuple(r) for r in q("SELECT id, session_id, ident, seq, turn, role, tool_name, timestamp, tokens, text FROM messages ORDER BY id")],
        "bodies": [bytes(r[0]) for r in q("SELECT body FROM messages ORDER BY id")],
        "sessions": [tuple(r) for r in q("SELECT session_id, session_key, agent_id FROM sessions ORDER BY session_id")],
    }


def _import_all(store: Store) -> int:
    new = 0
    for source in discover([FIXTURES]):
        for transcript in read_source(source):
            new += import_transcript(store, transcript).new
    return new


async def _grep(engine, session: str, key: str, **arguments) -> str:
    result = await engine.call_tool(ToolCallParams(session_id=session, session_key=key, call_id="c", name="lcm_grep", arguments=arguments))
    assert not result.is_error, result.text
    return result.text


async def test_importing_real_rollouts_and_transcripts_twice_gives_the_same_store(tmp_path, backend):
    with FakeHost(tmp_path / "state") as host:
        engine = await make_engine(host)
        store = engine.store
        first = _import_all(store)
        once = _dump(store)
        second = _import_all(store)
        assert first == 12 and second == 0  # 6 + 6 messages; the OpenClaw session's two sources are one session
        assert _dump(store) == once
        oc_session = openclaw_session_id("main", OC_KEY)
        assert once["sessions"] == sorted([(THREAD, THREAD, None), (oc_session, OC_KEY, "main")])
        # The sidecar handing the engine the same history stores nothing again.
        for source in discover([FIXTURES]):
            for transcript in read_source(source):
                params = IngestBatchParams(session_id=transcript.session_id, session_key=transcript.session_key, messages=transcript.messages)
                assert (await engine.ingest_batch(params)).ingested_count == 0
        assert _dump(store) == once

        # The facts of each are found, in their own session and, for the
        # OpenClaw agent, from another of its sessions.
        assert "pg-kestrel-07" in await _grep(engine, THREAD, THREAD, query="staging database host")
        assert "kestrel-7" in await _grep(engine, THREAD, THREAD, query=r"kestrel-\d\b", regex=True)
        assert "Marlinspike" in await _grep(engine, oc_session, OC_KEY, query="locker code boat")
        assert "magic-42" in await _grep(engine, oc_session, OC_KEY, query="magic")
        elsewhere = await _grep(engine, "codex-other", "agent:main:other", query="Marlinspike", scope="agent")
        assert f"session {oc_session}" in elsewhere
        await engine.dispose()


def test_a_rollout_reads_as_the_conversation_without_codexs_injected_context():
    (rollout,) = CODEX.rglob("rollout-*.jsonl")
    meta, messages, bad = codex_messages(rollout.read_bytes().splitlines())
    assert meta is not None and meta["id"] == THREAD and bad == 0
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "toolResult", "assistant"]
    assert messages[0].content == "Remember: the staging database lives on host pg-kestrel-07."
    assert messages[3].content[0].name == "exec_command" and messages[4].tool_name == "exec_command"
    assert "kestrel-7" in messages[4].content[0].text
    assert all(m.timestamp > 1_700_000_000_000 for m in messages)


def test_an_openclaw_transcript_reads_its_leaf_path_and_keeps_tool_result_text():
    entries = [json.loads(line) for line in (OPENCLAW / "agents" / "main" / "sessions" / "import-fixture.jsonl").read_text().splitlines()]
    messages, bad = openclaw_messages(entries)
    assert bad == 0
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "toolResult", "assistant"]
    assert messages[4].content[0].text == "magic-42"  # OpenClaw 2026.9 writes {"type": "toolResult"} blocks
    # A branch left behind (an edited turn) is not on the leaf path.
    branch = {"type": "message", "id": "x", "parentId": entries[1]["id"], "message": {"role": "user", "content": "abandoned", "timestamp": 1}}
    leaf = {**entries[-1], "id": "y", "parentId": entries[-1]["id"]}
    on_path, _ = openclaw_messages([*entries[:2], branch, *entries[2:], leaf])
    assert "abandoned" not in json.dumps([getattr(m, "content", "") for m in on_path], default=str)


def test_the_openclaw_session_is_the_one_the_sidecar_gives_it():
    # OpenClaw's buildCodexNativeHookRelayId: what a thread/start of this session carries.
    assert openclaw_session_id("main", "agent:main:main") == "codex-" + __import__("hashlib").sha256(
        b"openclaw:codex:native-hook-relay:v1\0main\0agent:main:main"
    ).hexdigest()[:40]


def test_folders_are_searched_and_openclaws_own_codex_threads_left_out(tmp_path):
    kinds = sorted(s.kind for s in discover([FIXTURES]))
    assert kinds == ["codex", "openclaw-jsonl", "openclaw-sqlite"]
    inner = tmp_path / "state" / "agents" / "main" / "agent" / "codex-home" / "sessions"
    inner.mkdir(parents=True)
    (rollout,) = CODEX.rglob("rollout-*.jsonl")
    (inner / rollout.name).write_bytes(rollout.read_bytes())
    assert discover([tmp_path / "state"]) == []
    assert [s.kind for s in discover([inner / rollout.name])] == ["codex"]  # given as a file: taken


# ---------------------------------------------------------------- the command


def _cli(tmp_path, *args: str):
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "sidecar"}"\n')
    return CliRunner().invoke(cli, ["--config-file", str(config), "engines", "lossless", "import", *args], catch_exceptions=False)


def test_the_import_command_is_idempotent_has_a_dry_run_and_a_progress_bar_on_stderr(tmp_path):
    db = tmp_path / "sidecar" / "engines" / "lossless" / "lossless.sqlite3"
    dry = _cli(tmp_path, str(FIXTURES), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout.splitlines()[-1])["newMessages"] == 12 and not db.exists()

    first = _cli(tmp_path, str(FIXTURES), "--progress")
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("imported 12 new message(s) from 3 session(s) in 3 file(s)")
    assert "3/3 files" in first.stderr and "files" not in first.stdout.replace("file(s)", "")
    store = Store.open(db.parent)
    once = _dump(store)
    store.close()

    quiet = _cli(tmp_path, str(FIXTURES))  # not a terminal: no bar
    assert quiet.stdout.startswith("imported 0 new message(s)") and quiet.stderr == ""
    again = _cli(tmp_path, str(FIXTURES), "--dry-run")
    assert again.stdout.startswith("would import 0 new message(s)")
    store = Store.open(db.parent)
    assert _dump(store) == once
    store.close()


def test_the_import_command_says_when_it_finds_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    result = _cli(tmp_path, str(tmp_path / "empty"))
    assert result.exit_code == 1 and "no Codex rollout or OpenClaw transcript" in result.stderr


def test_with_no_paths_finding_nothing_names_the_folders_it_looked_in(tmp_path, monkeypatch):
    """Not ``~/.codex``: the folders of this environment, ``$CODEX_HOME``'s
    included, and that paths may be given."""
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(tmp_path / "openclaw-state"))
    result = _cli(tmp_path)
    assert result.exit_code == 1
    assert f"under {tmp_path / 'codex-home' / 'sessions'} or {tmp_path / 'openclaw-state'} (none given: pass the folders or files" in result.stderr


def test_imported_history_keeps_no_credential_in_the_store(tmp_path):
    """An import stores what the engine would store of the same turns: the
    credentials a pasted conversation held are redacted (redact_secrets)."""
    from engines import UserMessage
    from engines.lossless import Store
    from engines.lossless.importer import Transcript, import_transcript

    secret = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
    transcript = Transcript(source="pasted.jsonl", kind="codex", session_id="s-secret", session_key="s-secret", messages=[UserMessage(content=f"my token is {secret} for the kestrel job", timestamp=1)], agent=None)
    store = Store.open_configured(None, tmp_path, "lossless.sqlite")
    try:
        assert import_transcript(store, transcript).new == 1
    finally:
        store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert secret.encode() not in raw
    assert b"kestrel" in raw


def test_the_import_command_redacts_credentials_unless_redact_secrets_is_off(tmp_path):
    """The command stores what the engine would: with ``redact_secrets``
    (the default) a credential pasted into a rollout stays out of the
    store; with it off, it is stored as it was."""
    secret = "hf_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z"
    (rollout,) = CODEX.rglob("rollout-*.jsonl")
    pasted = tmp_path / "history" / rollout.name
    pasted.parent.mkdir()
    pasted.write_text(rollout.read_text().replace("lives on host pg-kestrel-07.", f"lives on host pg-kestrel-07, token {secret}."))
    for redact, stored in ((None, False), ("false", True)):
        home = tmp_path / f"run-{redact}"
        home.mkdir()
        config = home / "config.toml"
        config.write_text(f'state_dir = "{home / "sidecar"}"\n' + (f"[engines.lossless]\nredact_secrets = {redact}\n" if redact else ""))
        result = CliRunner().invoke(cli, ["--config-file", str(config), "engines", "lossless", "import", str(pasted)], catch_exceptions=False)
        assert result.exit_code == 0 and result.stdout.startswith("imported 6 new message(s)"), result.output
        raw = b"".join(p.read_bytes() for p in (home / "sidecar" / "engines" / "lossless").iterdir() if p.is_file())
        assert b"pg-kestrel-07" in raw and (secret.encode() in raw) == stored, redact


# ---------------------------------------------------------------- what the sidecar served


def _rollout_of(thread: str, folder: Path) -> Path:
    """The recorded rollout as the rollout of ``thread`` (as Codex writes a
    backing thread's or another thread's: same conversation, its own id)."""
    (rollout,) = CODEX.rglob("rollout-*.jsonl")
    path = folder / rollout.name.replace(THREAD, thread)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rollout.read_text().replace(THREAD, thread))
    return path


async def _serve(state: Path, session: str, key: str, messages: list) -> None:
    """What the sidecar leaves when it served ``session`` with lossless: its
    transcript mirror (the sidecar's timestamps, not the rollout's), and the
    store holding it, by the engine's bootstrap from that mirror."""
    from engines import BootstrapParams
    from sidecar.store.lossless_view import store_dir
    from sidecar.store.mirror import TranscriptMirror
    from sidecar.store.sessionfile import session_path

    path = session_path(state, session)
    with TranscriptMirror.open(path, session, cwd="/work") as mirror:
        for n, message in enumerate(messages):
            mirror.append_message(msgspec.structs.replace(message, timestamp=message.timestamp + 1_234), f"k{n}")
    with FakeHost(store_dir(state)) as host:
        engine = await make_engine(host)
        result = await engine.bootstrap(BootstrapParams(session_id=session, session_key=key, session_file=str(path)))
        assert result.imported_messages == len(messages)
        await engine.dispose()


async def test_importing_the_rollouts_of_a_thread_the_sidecar_served_adds_nothing(tmp_path):
    """The client's thread and the backing thread a rebuild moved it onto
    are the sidecar's (its mirror, its backing map): their rollouts are left
    out and said so; a rollout of a thread it never saw is imported."""
    from sidecar.history.backing import BackingThreads

    state = tmp_path / "sidecar"
    (rollout,) = CODEX.rglob("rollout-*.jsonl")
    _, messages, _ = codex_messages(rollout.read_bytes().splitlines())
    await _serve(state, THREAD, THREAD, messages)
    backing, unknown = "01a23462-aaaa-7000-8000-000000000001", "01a23462-bbbb-7000-8000-000000000002"
    threads = BackingThreads(state, ())
    alias = threads.remember_start(THREAD, {"cwd": "/work"})
    threads.note_spare(THREAD, backing)
    threads.switch(THREAD)
    threads.confirm(THREAD)
    threads.save(alias)
    history = tmp_path / "codex-home" / "sessions"
    for thread in (THREAD, backing, unknown):
        _rollout_of(thread, history)
    db = state / "engines" / "lossless" / "lossless.sqlite3"
    store = Store.open(db.parent)
    before = _dump(store)
    store.close()

    dry = _cli(tmp_path, str(history), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert sorted(line.split(": ", 1)[1] for line in dry.stdout.splitlines() if line.startswith("skip ")) == [
        f"a Codex thread a rebuild moved a served thread onto ({backing})",
        f"a thread or OpenClaw session the sidecar served ({THREAD})",
    ]
    assert dry.stdout.splitlines()[-1].startswith("would import 6 new message(s) from 1 session(s) in 3 file(s)")
    assert dry.stdout.rstrip().endswith("; skipped 2 session(s) the sidecar already stored (1 backing, 1 served)")

    result = _cli(tmp_path, str(history), "--json")
    assert result.exit_code == 0, result.output
    *rows, totals = (json.loads(line) for line in result.stdout.splitlines())
    assert {r["sessionId"]: (r.get("skipped"), r["new"]) for r in rows} == {THREAD: ("served", 0), backing: ("backing", 0), unknown: (None, 6)}
    assert totals["newMessages"] == 6 and totals["skipped"] == {"backing": 1, "served": 1}
    store = Store.open(db.parent)
    after = _dump(store)
    store.close()
    served_rows = [r for r in after["messages"] if r[1] == THREAD]
    assert served_rows == [r for r in before["messages"] if r[1] == THREAD] and len(served_rows) == 6
    assert {s[0] for s in after["sessions"]} == {THREAD, unknown}


async def test_importing_openclaws_transcript_of_a_session_the_sidecar_served_adds_nothing(tmp_path):
    """OpenClaw's transcript of a session that ran through the sidecar is
    a second record of what its mirror holds (OpenClaw's timestamps): both
    of OpenClaw's sources of it are left out, by the session the sidecar
    bound the thread to; the rollout beside them is imported."""
    from sidecar.store import bindings

    state = tmp_path / "sidecar"
    session = openclaw_session_id("main", OC_KEY)
    entries = [json.loads(line) for line in (OPENCLAW / "agents" / "main" / "sessions" / "import-fixture.jsonl").read_text().splitlines()]
    messages, _ = openclaw_messages(entries)
    await _serve(state, session, OC_KEY, messages)
    bindings.save(state, bindings.Binding("01a23462-cccc-7000-8000-000000000003", session, "relay"))

    result = _cli(tmp_path, str(FIXTURES))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("imported 6 new message(s) from 1 session(s) in 3 file(s)")
    assert "; skipped 2 session(s) the sidecar already stored (2 served)" in result.stdout
    store = Store.open(state / "engines" / "lossless")
    try:
        assert len([r for r in _dump(store)["messages"] if r[1] == session]) == 6
    finally:
        store.close()
