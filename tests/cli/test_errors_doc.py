"""docs/errors.md's table of messages is what the code says: each row's
message is produced here, by the code, from the cause the row gives; and no
row is left without a trigger, nor a trigger without a row."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.config import Origin, resolve_codex_bin, resolve_settings
from sidecar.doctor import check_codex, check_engine, check_state_dir, check_tokenizer
from sidecar.store import usable
from tests.support.harness import CHILDREN

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"


def documented() -> dict[str, str]:
    """id -> the message column of the table under "Messages for a person"."""
    text = DOC.read_text().split("## Messages for a person", 1)[1].split("\n# ", 1)[0]
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([a-z-]+)` \| `(.+?)`(?: \(or `.+?`\))? \|", line)
        if m:
            rows[m[1]] = m[2]
    return rows


def matches(template: str, text: str) -> bool:
    """The message's fixed parts appear in ``text`` in order (``…`` varies)."""
    pattern = ".*?".join(re.escape(part) for part in template.split("…"))
    return re.search(pattern, text, re.S) is not None


def sidecar(args: list[str], env: dict[str, str] | None = None, stdin: bytes = b"") -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full.update(env or {})
    out = subprocess.run([sys.executable, "-m", "sidecar", *args], input=stdin, capture_output=True, env=full, timeout=60)
    return out.stdout.decode() + out.stderr.decode()


def problems(tmp: Path, toml: str = "", env: dict[str, str] | None = None, flags: dict[str, str] | None = None) -> str:
    cfg = tmp / "c.toml"
    cfg.write_text(toml)
    return "\n".join(p.message for p in resolve_settings(flags or {}, env or {}, cfg).problems)


def raised(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as exc:  # the message is what the user reads
        return str(getattr(exc, "message", exc))
    raise AssertionError("no error")


def state_problem(tmp: Path, op: str, code: int, monkeypatch: pytest.MonkeyPatch) -> str:
    state = tmp / "state"
    state.mkdir(exist_ok=True)
    real_statvfs = os.statvfs

    def fail(*_a: object, **_k: object) -> None:
        raise OSError(code, os.strerror(code))

    if op == "listdir":
        monkeypatch.setattr(usable.os, "listdir", fail)
    elif op == "access":
        monkeypatch.setattr(usable.os, "access", lambda *_a, **_k: False)
    else:  # a full disk
        monkeypatch.setattr(usable.os, "statvfs", lambda p: os.statvfs_result([*real_statvfs(p)[:3], 0, 0, *real_statvfs(p)[5:10]]))
    problem = usable.state_dir_problem(state, create=True)
    assert problem is not None
    return problem.message()


def _fake_codex(tmp: Path, version: str) -> str:
    fake = tmp / "codex"
    fake.write_text(f"#!/bin/sh\necho 'codex-cli {version}'\n")
    fake.chmod(0o755)
    return str(fake)


TRIGGERS: dict[str, Callable[[Path, pytest.MonkeyPatch], str]] = {
    "config-unknown-key": lambda t, m: problems(t, 'state-dir = "/x"\n'),
    "config-bad-value-file": lambda t, m: problems(t, "token_budget = -5\n"),
    "config-bad-value-env": lambda t, m: problems(t, env={"CODEX_SIDECAR_TOKEN_BUDGET": "-5"}),
    "config-bad-value-flag": lambda t, m: problems(t, flags={"token_budget": "-5"}),
    "config-not-found": lambda t, m: "\n".join(p.message for p in resolve_settings({}, {}, t / "absent.toml").problems),
    "config-unreadable": lambda t, m: problems(t, "engine = \n"),
    "config-engines-table": lambda t, m: problems(t, 'engines = "lossless"\n'),
    "codex-not-found": lambda t, m: raised(lambda: resolve_codex_bin("/no/codex", Origin("env", "CODEX_SIDECAR_CODEX_BIN"))),
    "codex-not-on-path": lambda t, m: (m.setenv("PATH", str(t)), raised(lambda: resolve_codex_bin(None)))[1],
    "codex-is-self": lambda t, m: sidecar(["app-server"], {"CODEX_SIDECAR_CODEX_BIN": str(Path(sys.executable).parent / "codex-sidecar")}),
    "sidecar-loop": lambda t, m: sidecar(["app-server"], {"CODEX_SIDECAR_ACTIVE": "1"}),
    "codex-too-old": lambda t, m: check_codex(_fake_codex(t, "0.100.0"))[0].message,
    "child-not-found": lambda t, m: sidecar(["proxy", "--", str(t / "nothing-here")]),
    "child-not-a-program": lambda t, m: ((t / "script").write_text("echo hi\n"), (t / "script").chmod(0o755), sidecar(["proxy", "--", str(t / "script")]))[2],
    "command-near-miss": lambda t, m: sidecar(["docter"], {"CODEX_SIDECAR_CODEX_BIN": "/bin/false"}),
    "recording-unopenable": lambda t, m: sidecar(["--record", str(t / "no" / "such" / "dir" / "r.jsonl"), "proxy", "--", "true"]),
    "state-not-a-folder": lambda t, m: ((t / "f").write_text(""), check_state_dir(t / "f").message)[1],
    "state-cannot-create": lambda t, m: (m.setattr(usable, "private_dir", lambda p: (_ for _ in ()).throw(PermissionError(errno.EACCES, "denied"))), usable.state_dir_problem(t / "new", create=True).message())[1],  # type: ignore[union-attr]
    "state-unreadable": lambda t, m: state_problem(t, "listdir", errno.EACCES, m),
    "state-unwritable": lambda t, m: state_problem(t, "access", errno.EACCES, m),
    "state-full": lambda t, m: state_problem(t, "statvfs", errno.ENOSPC, m),
    "state-open-mode": lambda t, m: ((t / "open").mkdir(mode=0o755), (t / "open").chmod(0o755), check_state_dir(t / "open").message)[2],
    "engine-not-installed": lambda t, m: check_engine("losless", None, {}).message,
    "engine-not-loaded": lambda t, m: _loader_log("losless"),
    "engine-cannot-start": lambda t, m: check_engine("lossless", None, {"database_url": "postgresql://u:p@127.0.0.1:1/x"}).message,
    "engine-no-allowlist": lambda t, m: _third_party_without_allowlist(t, m),
    "tokenizer-inexact": lambda t, m: check_tokenizer(lambda: "cl100k_base").message,
    "inspect-no-turns": lambda t, m: sidecar(["inspect", "00000000-0000-0000-0000-000000000000", "--state-dir", str(t)]),
    "inspect-not-a-thread": lambda t, m: sidecar(["inspect", "../etc", "--state-dir", str(t)]),
    "lossless-no-store": lambda t, m: sidecar(["engines", "lossless", "status", "--state-dir", str(t)]),
    "lossless-import-nothing": lambda t, m: sidecar(["engines", "lossless", "import", str(t), "--state-dir", str(t)]),
    "lossless-store-unusable": lambda t, m: _damaged_store(t),
    "lossless-store-permission": lambda t, m: _store_of_another_user(t, m),
    "lossless-config-invalid": lambda t, m: check_engine("lossless", None, {"retention_day": 30}).message,
}


def _store_of_another_user(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store's file refused to this user (the tests may run as root, whom
    permission bits do not stop: the refusal is the one ``os.open`` gives)."""
    from engines.lossless import store

    real_open = os.open

    def refused(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("lossless.sqlite3"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store.os, "open", refused)
    return raised(lambda: store.Store.open(tmp))


def _damaged_store(tmp: Path) -> str:
    """A file in the store's place that is no SQLite database."""
    store = tmp / "engines" / "lossless"
    store.mkdir(parents=True)
    (store / "lossless.sqlite3").write_text("not a database\n")
    return sidecar(["engines", "lossless", "status", "--state-dir", str(tmp)])


def _loader_log(engine_id: str) -> str:
    from engines import load_engine_or_legacy

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        load_engine_or_legacy(engine_id, {}, allowlist=None)
    finally:
        root.removeHandler(handler)
    return "\n".join(r.getMessage() for r in records)


def _third_party_without_allowlist(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    from tests.cli.test_doctor import install_engine

    site = tmp / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    install_engine(site, "errors-doc-engine", "errors-doc-engine", "good")
    return check_engine("errors-doc-engine", None, {}).message


def test_every_documented_message_has_a_trigger_and_every_trigger_a_row():
    assert set(documented()) == set(TRIGGERS)


@pytest.mark.parametrize("row", sorted(TRIGGERS))
def test_the_code_produces_each_documented_message(row, tmp_path, monkeypatch):
    template = documented()[row]
    text = TRIGGERS[row](tmp_path, monkeypatch)
    assert matches(template, text), f"{row}: {template!r} not in {text!r}"


def test_the_state_rows_are_the_codes_the_sidecar_logs():
    """The state dir's error log line carries ``code``: the table's id."""
    source = (ROOT / "sidecar" / "store" / "usable.py").read_text()
    codes = set(re.findall(r'"(state-[a-z-]+)"\)', source))
    assert codes == {row for row in documented() if row.startswith("state-") and row != "state-open-mode"}


def test_child_scripts_used_above_exist():
    assert (CHILDREN / "echo_rpc.py").exists()


def test_openclaw_s_write_epipe_is_a_sidecar_that_exited_at_start_and_the_docs_say_so(tmp_path):
    """What OpenClaw logs for a sidecar that stopped on a setting: its write
    of ``initialize`` finds the pipe closed (EPIPE). Both documents map that
    line to its cause and to doctor, run as the gateway's user."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env.update(CODEX_SIDECAR_TOKEN_BUDGET="lots", CODEX_SIDECAR_CODEX_BIN=str(tmp_path / "codex"), XDG_CONFIG_HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.wait(timeout=60) == 1
    assert proc.stdin is not None
    with pytest.raises(BrokenPipeError):
        proc.stdin.write(b'{"id":1,"method":"initialize","params":{}}\n')
        proc.stdin.flush()
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()
    assert proc.stderr is not None and b"invalid value CODEX_SIDECAR_TOKEN_BUDGET=lots" in proc.stderr.read()
    for doc in (DOC, ROOT / "docs" / "openclaw.md"):
        text = " ".join(doc.read_text().split())
        assert 'codex app-server write failed error="write EPIPE"' in text, doc
        assert "exited at start" in text and "codex-sidecar doctor` as the gateway's user" in text, doc
