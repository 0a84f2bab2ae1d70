"""Record the fixtures of ``codex-sidecar engines lossless import``:
``fixtures/import/codex/.../rollout-*.jsonl`` (a Codex rollout, written by the
real codex 0.169.0 against the fake model) and
``fixtures/import/openclaw/agents/main/sessions/*.jsonl`` (an OpenClaw session
transcript, written by the real OpenClaw 2026.9.6 driving the real codex).

    PYTHONPATH=. .venv/bin/python -m tools.record_import_fixtures [--only codex|openclaw]

OpenClaw needs ``CODEX_SIDECAR_TEST_OPENCLAW_BIN`` and
``CODEX_SIDECAR_TEST_OPENCLAW_TEMPLATE`` (see the Makefile's OPENCLAW_ENV).
The fake API keys are replaced by a placeholder, the run's temporary paths
by ``/tmp/fixture``; each run's facts are the ones the import tests look for.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

from tools.codex_home import codex_env, find_codex_bin, make_codex_home
from tools.fake_model import FakeModel, ShellCall, Text
from tools.openclaw_home import FAKE_API_KEY, find_openclaw, make_openclaw_home

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "import"

CODEX_PROMPT = "Remember: the staging database lives on host pg-kestrel-07."
CODEX_REPLY = "Noted: staging is on pg-kestrel-07."
OPENCLAW_SCRIPT = [
    ("Remember: my locker code is 4711 and the boat is called Marlinspike.", [Text("Noted: locker 4711, boat Marlinspike.")]),
    ("Run the magic command.", [ShellCall("echo magic-$((40+2))"), Text("It printed magic-42.")]),
]
_SECRET = re.compile(r"sk-[A-Za-z0-9_-]{16,}")


def _scrub(text: str, tmp: str) -> str:
    text = _SECRET.sub("sk-REDACTED", text.replace(FAKE_API_KEY, "sk-REDACTED"))
    return text.replace(tmp, "/tmp/fixture")


def _copy(src: Path, dest: Path, tmp: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_scrub(src.read_text(), tmp))
    print(f"recorded {dest.relative_to(ROOT)} ({dest.stat().st_size} bytes)")


def record_codex(tmp: Path) -> None:
    codex = find_codex_bin()
    if codex is None:
        raise SystemExit("codex 0.169.0 is not installed under .tools/")
    with FakeModel() as model:
        model.script(Text(CODEX_REPLY), ShellCall("echo kestrel-$((3+4))"), Text("It printed kestrel-7."))
        home = make_codex_home(tmp / "codex-home", model.base_url)
        env = codex_env(home)
        env["CODEX_HOME"] = str(home)
        env["OPENAI_API_KEY"] = "sk-test-fixture-0123456789abcdef"
        work = tmp / "work"
        work.mkdir()
        run = subprocess.run(
            [codex, "exec", "--skip-git-repo-check", CODEX_PROMPT], env=env, cwd=work, capture_output=True, text=True, timeout=300
        )
        if run.returncode != 0:
            raise SystemExit(f"codex exec failed: {run.stderr[-2000:]}")
        # A second turn on the same thread: `codex exec resume --last`.
        run = subprocess.run(
            [codex, "exec", "--skip-git-repo-check", "resume", "--last", "Run the kestrel command."],
            env=env, cwd=work, capture_output=True, text=True, timeout=300,
        )
        if run.returncode != 0:
            raise SystemExit(f"codex exec resume failed: {run.stderr[-2000:]}")
    rollouts = sorted((home / "sessions").rglob("rollout-*.jsonl"))
    if len(rollouts) != 1:
        raise SystemExit(f"expected one rollout, found {rollouts}")
    target = OUT / "codex" / "sessions" / rollouts[0].relative_to(home / "sessions")
    shutil.rmtree(OUT / "codex", ignore_errors=True)
    _copy(rollouts[0], target, str(tmp))


def record_openclaw(tmp: Path) -> None:
    found = find_openclaw()
    codex = find_codex_bin()
    if found is None or codex is None:
        raise SystemExit("OpenClaw or codex is not installed (set the Makefile's OPENCLAW_ENV)")
    openclaw_bin, template = found
    with FakeModel() as model:
        steps = [step for _, replies in OPENCLAW_SCRIPT for step in replies]
        model.script(*steps)
        home = make_openclaw_home(tmp / "oc", openclaw_bin=openclaw_bin, template=template, app_server_command=codex, base_url=model.base_url)
        for prompt, _ in OPENCLAW_SCRIPT:
            home.agent("import-fixture", prompt)
    shutil.rmtree(OUT / "openclaw", ignore_errors=True)
    export_openclaw(home.state, OUT / "openclaw", str(tmp))


#: The tables of OpenClaw 2026.9's agent database the import reads (the
#: others hold auth profiles, memory, deliveries: not copied into fixtures).
OPENCLAW_TABLES = ("schema_meta", "session_windows", "transcript_events")


def export_openclaw(state: Path, out: Path, tmp: str) -> None:
    """OpenClaw 2026.9 keeps transcripts in ``agents/<id>/agent/openclaw-agent.sqlite``
    (``transcript_events``; earlier releases wrote ``agents/<id>/sessions/*.jsonl``).
    Recorded: that database with only :data:`OPENCLAW_TABLES` (their real
    DDL and rows, scrubbed), and the same sessions as session files (one
    entry a line, the JSONL format) with a ``sessions.json`` naming their keys."""
    src = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    conn = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    dest_path = out / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    dest_path.parent.mkdir(parents=True, exist_ok=True)
    dest = sqlite3.connect(dest_path)
    # OpenClaw's CHECK constraints call octet_length (SQLite 3.43+); older builds lack it.
    dest.create_function("octet_length", 1, lambda v: None if v is None else len(v.encode() if isinstance(v, str) else v), deterministic=True)
    sessions: dict[str, dict[str, str]] = {}
    try:
        for table in OPENCLAW_TABLES:
            (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
            dest.execute(ddl)
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            if rows:
                marks = ",".join("?" * len(rows[0]))
                dest.executemany(
                    f"INSERT INTO {table} VALUES ({marks})", [tuple(_scrub(v, tmp) if isinstance(v, str) else v for v in r) for r in rows]
                )
        dest.commit()
        dest.execute("VACUUM")
        for session, key in conn.execute("SELECT session_id, session_key FROM session_windows ORDER BY session_id"):
            lines = [
                _scrub(e, tmp)
                for (e,) in conn.execute("SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq", (session,))
                if e is not None
            ]
            path = out / "agents" / "main" / "sessions" / f"{session}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
            sessions[key] = {"sessionId": session, "sessionFile": path.name}
            print(f"recorded {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    finally:
        conn.close()
        dest.close()
    (out / "agents" / "main" / "sessions" / "sessions.json").write_text(json.dumps(sessions, indent=2, sort_keys=True) + "\n")
    print(f"recorded {dest_path.relative_to(ROOT)} ({dest_path.stat().st_size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["codex", "openclaw"])
    parser.add_argument("--keep", help="run in this folder and keep it (to look at what the tools wrote)")
    parser.add_argument("--from-state", help="record the OpenClaw fixtures from this kept run's OpenClaw state (no new run)")
    args = parser.parse_args()
    if args.from_state:
        shutil.rmtree(OUT / "openclaw", ignore_errors=True)
        export_openclaw(Path(args.from_state), OUT / "openclaw", str(Path(args.from_state).parent.parent))
        return
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="import-fixtures-") if not args.keep else contextlib.nullcontext(args.keep) as tmp:
        if args.only in (None, "codex"):
            record_codex(Path(tmp))
        if args.only in (None, "openclaw"):
            record_openclaw(Path(tmp))
    os.sync()


if __name__ == "__main__":
    main()
