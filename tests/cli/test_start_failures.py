"""What a new user's first mistakes end in: one clear line, and no codex started.

Real faults, no injection: a script without ``#!`` and a copy of a real
binary marked for another architecture are what the kernel refuses with
``ENOEXEC``; a mistyped command runs the real entry point with a "codex"
that leaves a mark when anything starts it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "sidecar", *args], input="", capture_output=True, text=True, env=full, timeout=60, cwd=cwd)


def marking_codex(tmp: Path) -> tuple[Path, Path]:
    """A codex that writes a file whenever it is started (what the user would get: codex's own screen)."""
    mark = tmp / "codex-started"
    codex = tmp / "codex"
    codex.write_text(f"#!/bin/sh\necho \"$@\" >> {mark}\n")
    codex.chmod(0o755)
    return codex, mark


@pytest.mark.parametrize(("typed", "meant"), [("docter", "doctor"), ("engins", "engines"), ("inspekt", "inspect"), ("verison", "version")])
def test_a_near_miss_of_a_sidecar_command_says_did_you_mean_and_starts_no_codex(tmp_path, typed, meant):
    codex, mark = marking_codex(tmp_path)
    out = run([typed], {"CODEX_SIDECAR_CODEX_BIN": str(codex)})
    assert out.returncode == 2
    assert f"no such command {typed!r} (did you mean {meant!r}?)" in out.stderr
    assert not mark.exists(), "codex was started for a typo"


def test_a_near_miss_with_codex_on_path_starts_nothing_either(tmp_path):
    codex, mark = marking_codex(tmp_path)
    out = run(["docter"], {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert "did you mean 'doctor'?" in out.stderr
    assert not mark.exists()


@pytest.mark.parametrize("word", ["exec", "review", "login", "resume"])
def test_codex_own_commands_still_go_to_codex(tmp_path, word):
    codex, mark = marking_codex(tmp_path)
    out = run([word, "x"], {"CODEX_SIDECAR_CODEX_BIN": str(codex)})
    assert out.returncode == 0, out.stderr
    assert mark.read_text().split() == [word, "x"]


def script_without_shebang(tmp: Path) -> Path:
    script = tmp / "codex-script"
    script.write_text("echo 'codex-cli 0.169.0'\n")
    script.chmod(0o755)
    return script


def foreign_binary(tmp: Path) -> Path:
    """A real ELF executable marked for another machine (e_machine), as a
    download for the wrong architecture is: the kernel answers ENOEXEC."""
    true = Path(shutil.which("true") or "/bin/true").resolve()
    data = bytearray(true.read_bytes())
    assert data[:4] == b"\x7fELF"
    little = data[5] == 1
    machine = int.from_bytes(data[18:20], "little" if little else "big")
    other = 0xB7 if machine != 0xB7 else 0x3E  # aarch64, or x86-64 on an aarch64 host
    data[18:20] = other.to_bytes(2, "little" if little else "big")
    out = tmp / "codex-foreign"
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


@pytest.mark.parametrize("make", [script_without_shebang, foreign_binary], ids=["no-shebang", "wrong-architecture"])
@pytest.mark.parametrize(
    "args",
    [
        ["--codex-bin", "{bin}", "app-server", "--listen", "stdio://"],
        ["proxy", "--", "{bin}", "app-server"],
        ["--codex-bin", "{bin}", "app-server", "--help"],
    ],
    ids=["drop-in", "proxy", "codex-own"],
)
def test_a_codex_bin_that_is_no_program_is_one_clear_line(tmp_path, make, args):
    binary = make(tmp_path)
    out = run([a.replace("{bin}", str(binary)) for a in args])
    assert out.returncode in (1, 126)
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert f"cannot start child: {binary} is not a program this machine can run" in lines[0]
    assert out.stdout == ""


def test_a_folder_as_the_child_is_one_clear_line(tmp_path):
    out = run(["proxy", "--", str(tmp_path)])
    assert out.returncode == 126
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].endswith(f"cannot start child: permission denied command={tmp_path} from=the proxy command")


def test_an_unforeseen_failure_is_one_line_with_its_traceback_only_at_debug(capsys, monkeypatch):
    from sidecar import launch

    monkeypatch.delenv("CODEX_SIDECAR_LOG_LEVEL", raising=False)
    try:
        raise OSError(5, "Input/output error", "/some/file")
    except OSError as exc:
        assert launch._one_line(exc) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["codex-sidecar: error: OSError: [Errno 5] Input/output error: '/some/file' (CODEX_SIDECAR_LOG_LEVEL=debug prints the traceback)"]
    monkeypatch.setenv("CODEX_SIDECAR_LOG_LEVEL", "debug")
    try:
        raise ValueError("bad")
    except ValueError as exc:
        launch._one_line(exc)
    assert "Traceback" in capsys.readouterr().err
