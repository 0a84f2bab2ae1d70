"""`codex-sidecar doctor` reports every problem it checks for: each check is
broken once here, and shown passing once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sidecar.doctor import (
    check_codex,
    check_config_file,
    check_engine,
    check_state_dir,
    check_tokenizer,
    openclaw_snippet,
    parse_codex_version,
)

SIDECAR = [sys.executable, "-m", "sidecar"]


def fake_codex(tmp_path, version_line: str) -> str:
    path = tmp_path / "codex"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(0o755)
    return str(path)


def test_parse_codex_version():
    assert parse_codex_version("codex-cli 0.169.0\n") == (0, 169, 0)
    assert parse_codex_version("no digits") is None


def test_codex_new_enough_passes(tmp_path):
    finding, path = check_codex(fake_codex(tmp_path, "codex-cli 0.149.0"))
    assert finding.ok, finding
    assert path == str(tmp_path / "codex")


def test_codex_older_than_openclaw_accepts_fails(tmp_path):
    finding, _ = check_codex(fake_codex(tmp_path, "codex-cli 0.148.9"))
    assert not finding.ok
    assert "0.148.9" in finding.message and "0.149.0" in finding.message


def test_codex_missing_fails(tmp_path):
    finding, path = check_codex(str(tmp_path / "nowhere" / "codex"))
    assert not finding.ok and path is None
    assert "not found" in finding.message


def test_codex_without_a_version_fails(tmp_path):
    finding, _ = check_codex(fake_codex(tmp_path, "hello"))
    assert not finding.ok


def test_private_state_dir_passes_and_an_open_one_fails(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    d.chmod(0o700)
    assert check_state_dir(d).ok
    d.chmod(0o755)
    finding = check_state_dir(d)
    assert not finding.ok and "0755" in finding.message


def test_state_dir_that_is_a_file_fails(tmp_path):
    f = tmp_path / "state"
    f.write_text("")
    assert not check_state_dir(f).ok


def test_missing_state_dir_under_a_writable_parent_passes(tmp_path):
    finding = check_state_dir(tmp_path / "a" / "b")
    assert finding.ok and "will be created" in finding.message


def test_legacy_and_builtin_engines_pass():
    assert check_engine("legacy", None, {}).ok
    assert check_engine("transcript-budget", (), {}).ok


def test_an_engine_that_is_not_installed_fails():
    finding = check_engine("no-such-engine", ("some-dist",), {})
    assert not finding.ok and "no-such-engine" in finding.message


def test_a_third_party_engine_without_an_allowlist_fails():
    finding = check_engine("no-such-engine", None, {})
    assert not finding.ok and "allowlist" in finding.message


def test_an_engine_whose_factory_fails_fails():
    finding = check_engine("transcript-budget", (), {"no_such_option": 1})
    # The built-in rejects unknown config keys; if it ever accepts them this
    # still must not pass silently as a broken engine.
    assert finding.ok or "transcript-budget" in finding.message


def test_tokenizer_check():
    assert check_tokenizer(lambda: "o200k_base").ok
    finding = check_tokenizer(lambda: "chars/4")
    assert not finding.ok and "bpe-openai" in finding.message


def test_config_file_checks(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('engine = "legacy"\n')
    assert check_config_file(good).ok
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = \n")
    assert not check_config_file(bad).ok
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('engin = "legacy"\n')
    finding = check_config_file(unknown)
    assert not finding.ok and "engin" in finding.message
    assert not check_config_file(tmp_path / "missing.toml").ok


def test_snippet_names_the_paths_found():
    text = openclaw_snippet("/opt/bin/codex-sidecar", "/opt/codex", "transcript-budget", "/var/state")
    assert 'command: "/opt/bin/codex-sidecar"' in text
    assert "enabled: true" in text and 'agentRuntime: { id: "codex" }' in text
    assert "CODEX_SIDECAR_CODEX_BIN=/opt/codex" in text
    assert "CODEX_SIDECAR_ENGINE=transcript-budget" in text


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full.update(env)
    return subprocess.run([*SIDECAR, "doctor"], capture_output=True, text=True, env=full, timeout=60)


def test_doctor_exits_zero_when_all_is_well_and_prints_the_snippet(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o700)
    config = tmp_path / "config.toml"
    config.write_text("")
    codex = fake_codex(tmp_path, "codex-cli 0.169.0")
    p = _doctor({"CODEX_SIDECAR_CODEX_BIN": codex, "CODEX_SIDECAR_STATE_DIR": str(state), "CODEX_SIDECAR_CONFIG": str(config)})
    if "FAIL tokenizer" in p.stdout:
        pytest.fail("bpe-openai is a test dependency: " + p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"CODEX_SIDECAR_CODEX_BIN={codex}" in p.stdout
    assert "FAIL" not in p.stdout


def test_doctor_exits_non_zero_on_each_broken_setting(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text("not toml [\n")
    p = _doctor(
        {
            "CODEX_SIDECAR_CODEX_BIN": fake_codex(tmp_path, "codex-cli 0.100.0"),
            "CODEX_SIDECAR_STATE_DIR": str(state),
            "CODEX_SIDECAR_CONFIG": str(config),
            "CODEX_SIDECAR_ENGINE": "no-such-engine",
            "CODEX_SIDECAR_ENGINE_ALLOWLIST": "some-dist",
        }
    )
    assert p.returncode == 1
    failed = {line.split()[1] for line in p.stdout.splitlines() if line.startswith("FAIL")}
    assert failed == {"codex", "state", "engine", "config"}, p.stdout
    assert "plugins:" in p.stdout, "the snippet is printed even when something is wrong"
