"""CODEX_HOME config and codex discovery: the knobs every live test relies on."""

from __future__ import annotations

import os
import stat
import tomllib

from tools import codex_home
from tools.codex_home import ENV_CODEX_BIN, codex_env, find_codex_bin, make_codex_home


def test_config_points_codex_at_the_fake_provider_with_retries_off(tmp_path):
    home = make_codex_home(tmp_path / "home", "http://127.0.0.1:1234/v1")
    cfg = tomllib.loads((home / "config.toml").read_text())
    assert cfg["model"] == "mock-model"
    assert cfg["model_provider"] == "mock"
    assert cfg["approval_policy"] == "never"
    assert cfg["sandbox_mode"] == "read-only"
    assert cfg["model_providers"]["mock"] == {
        "name": "mock",
        "base_url": "http://127.0.0.1:1234/v1",
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    # the plugin sync would reach github.com; tests stay on loopback
    assert cfg["features"] == {"plugins": False}
    plain = make_codex_home(tmp_path / "plain", "http://127.0.0.1:1234/v1", offline=False)
    assert "features" not in tomllib.loads((plain / "config.toml").read_text())


def test_extra_root_keys_and_tables_both_land_where_toml_puts_them(tmp_path):
    home = make_codex_home(
        tmp_path,
        "http://127.0.0.1:1/v1",
        approval_policy="on-request",
        sandbox_mode="workspace-write",
        extra='model_reasoning_effort = "low"\n[features]\nplugins = false\n',
    )
    cfg = tomllib.loads((home / "config.toml").read_text())
    assert cfg["approval_policy"] == "on-request"
    assert cfg["sandbox_mode"] == "workspace-write"
    assert cfg["model_reasoning_effort"] == "low"
    assert cfg["features"] == {"plugins": False}
    assert "model_reasoning_effort" not in cfg["model_providers"]["mock"]


def test_find_codex_bin_prefers_the_env_var(tmp_path, monkeypatch):
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(ENV_CODEX_BIN, str(fake))
    assert find_codex_bin() == str(fake)
    monkeypatch.setenv(ENV_CODEX_BIN, str(tmp_path / "missing"))
    assert find_codex_bin() is None  # a wrong explicit path is not silently replaced


def test_find_codex_bin_falls_back_to_the_project_install(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_CODEX_BIN, raising=False)
    monkeypatch.setattr(codex_home, "_LOCAL_BIN", tmp_path / "nope")
    assert find_codex_bin() is None
    local = tmp_path / "codex"
    local.write_text("#!/bin/sh\n")
    local.chmod(0o755)
    monkeypatch.setattr(codex_home, "_LOCAL_BIN", local)
    assert find_codex_bin() == str(local)


def test_codex_env_isolates_credentials_but_keeps_sidecar_settings(tmp_path):
    env = codex_env(
        tmp_path,
        base={
            "PATH": os.defpath,
            "OPENAI_API_KEY": "sk-x",
            "CODEX_API_KEY": "y",
            "CODEX_HOME": "/root/.codex",
            "HTTPS_PROXY": "http://proxy:1",
            "CODEX_SIDECAR_ENGINE": "kept",
        },
    )
    assert env["CODEX_HOME"] == str(tmp_path)
    assert "OPENAI_API_KEY" not in env and "CODEX_API_KEY" not in env and "HTTPS_PROXY" not in env
    assert env["CODEX_SIDECAR_ENGINE"] == "kept"
    assert env["PATH"] == os.defpath
