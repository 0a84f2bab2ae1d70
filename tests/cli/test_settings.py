"""Settings: each value's true source, errors that say what to change, and
what is in effect shown where the user looks (doctor, status, the log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.cli import hoist_settings, inspect_table, serves_app_server
from sidecar.config import SETTINGS, ConfigError, Origin, resolve_codex_bin, resolve_settings
from tests.support.harness import CHILDREN

SIDECAR = [sys.executable, "-m", "sidecar"]


def run(args, env=None, stdin=b"", home: Path | None = None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    if home is not None:
        full.update(XDG_CONFIG_HOME=str(home / "config"), XDG_STATE_HOME=str(home / "state"))
    full.update(env or {})
    return subprocess.run(SIDECAR + args, input=stdin, capture_output=True, env=full, timeout=60)


# ------------------------------------------------------------ resolution


def test_each_value_records_where_it_came_from(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('token_budget = 9000\nengine = "lossless"\nrebuild = "revert"\n')
    r = resolve_settings({"rebuild": "fresh"}, {"CODEX_SIDECAR_ENGINE": "transcript-budget"}, cfg)
    assert r.values["token_budget"] == 9000 and str(r.origins["token_budget"]) == f"token_budget in {cfg}"
    assert r.values["engine"] == "transcript-budget" and str(r.origins["engine"]) == "CODEX_SIDECAR_ENGINE"
    assert r.values["rebuild"] == "fresh" and str(r.origins["rebuild"]) == "--rebuild"
    assert str(r.origins["state_dir"]) == "default" and r.problems == []
    assert r.shown()["config_file"]["value"] == str(cfg)


def test_a_bad_value_in_the_config_file_is_reported_as_the_file_s_key_not_the_flag(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("token_budget = -5\n")
    r = resolve_settings({}, {}, cfg)
    (p,) = r.problems
    assert p.setting == "token_budget"
    assert f"token_budget = -5 in {cfg}" in p.message and f"edit token_budget in {cfg}" in p.message
    assert "--token-budget" not in p.message and "CODEX_SIDECAR_TOKEN_BUDGET" not in p.message
    assert r.values["token_budget"] is None  # the default, not the bad value


def test_a_bad_value_in_a_variable_names_the_variable_and_a_flag_the_flag():
    (p,) = resolve_settings({}, {"CODEX_SIDECAR_EOF_GRACE": "soon"}, None).problems
    assert p.message.startswith("invalid value CODEX_SIDECAR_EOF_GRACE=soon:") and "change or unset CODEX_SIDECAR_EOF_GRACE" in p.message
    (p,) = resolve_settings({"log_level": "loud"}, {}, None).problems
    assert p.message.startswith("invalid value --log-level loud:") and "change --log-level on the command line" in p.message


def test_an_empty_allowlist_variable_trusts_only_the_built_ins_and_other_empty_variables_are_unset():
    r = resolve_settings({}, {"CODEX_SIDECAR_ENGINE_ALLOWLIST": "", "CODEX_SIDECAR_ENGINE": ""}, None)
    assert r.values["engine_allowlist"] == () and r.values["engine"] == "legacy"


def test_a_near_miss_config_key_gets_did_you_mean_and_the_valid_keys(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('state-dir = "/x"\n')
    (p,) = resolve_settings({}, {}, cfg).problems
    assert p.setting is None
    assert "unknown key 'state-dir'" in p.message and "did you mean 'state_dir'?" in p.message
    assert "valid keys: " + ", ".join(sorted({s.name for s in SETTINGS} | {"engines"})) in p.message


def test_a_missing_codex_names_the_setting_that_gave_its_path(tmp_path):
    cfg = tmp_path / "c.toml"
    with pytest.raises(ConfigError, match=rf"/no/codex \(from codex_bin in {cfg}\); point codex_bin in {cfg} at the real codex"):
        resolve_codex_bin("/no/codex", Origin("file", str(cfg), "codex_bin"))
    with pytest.raises(ConfigError, match=r"\(from CODEX_SIDECAR_CODEX_BIN\)"):
        resolve_codex_bin("/no/codex", Origin("env", "CODEX_SIDECAR_CODEX_BIN"))


# ------------------------------------------------------------ which commands stop


def test_an_unknown_key_stops_the_commands_that_serve_but_not_version_or_engines(tmp_path):
    cfg = tmp_path / "config" / "codex-sidecar" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('state-dir = "/x"\n')
    version = run(["version"], home=tmp_path)
    assert version.returncode == 0 and version.stdout == b"codex-sidecar 0.1.0\n" and version.stderr == b""
    engines = run(["engines"], home=tmp_path)
    assert engines.returncode == 0 and b"lossless" in engines.stdout and b"did you mean 'state_dir'?" in engines.stderr
    proxy = run(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], home=tmp_path)
    assert proxy.returncode != 0 and b"did you mean 'state_dir'?" in proxy.stderr and b"valid keys" in proxy.stderr


def test_a_bad_state_dir_value_stops_inspect_but_not_engines(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("state_dir = []\n")
    env = {"CODEX_SIDECAR_CONFIG": str(cfg)}
    assert run(["engines"], env).returncode == 0
    out = run(["inspect", "00000000-0000-0000-0000-000000000000"], env)
    assert out.returncode != 0 and b"in " + str(cfg).encode() in out.stderr


def test_doctor_reports_invalid_settings_instead_of_dying(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('token_budget = -5\nstate-dir = "/x"\n')
    out = run(["doctor"], {"CODEX_SIDECAR_CONFIG": str(cfg), "CODEX_SIDECAR_ENGINE": "losless"}, home=tmp_path)
    text = out.stdout.decode()
    assert out.returncode == 1 and "Traceback" not in out.stderr.decode() and "Usage" not in out.stderr.decode()
    assert f"FAIL setting      invalid value token_budget = -5 in {cfg}" in text
    assert "FAIL config file  unknown key 'state-dir'" in text and "did you mean 'state_dir'?" in text
    assert "FAIL engine       engine 'losless' is not installed (did you mean 'lossless'?)" in text


# ------------------------------------------------------------ what is in effect


def test_doctor_shows_each_setting_and_its_source(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("token_budget = 9000\n")
    out = run(["--rebuild", "revert", "doctor"], {"CODEX_SIDECAR_CONFIG": str(cfg), "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "s")})
    lines = out.stdout.decode().splitlines()
    row = {line.split()[0]: line for line in lines if line.startswith("  ") and " = " in line}
    assert row["token_budget"].endswith(f"(token_budget in {cfg})") and " 9000 " in row["token_budget"]
    assert row["state_dir"].endswith("(CODEX_SIDECAR_STATE_DIR)") and str(tmp_path / "s") in row["state_dir"]
    assert row["rebuild"].endswith("(--rebuild)")
    assert row["config_file"].endswith("(CODEX_SIDECAR_CONFIG)")


def test_doctor_shows_the_codex_found_on_path(tmp_path):
    fake = tmp_path / "bin" / "codex"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'codex-cli 0.169.0'\n")
    fake.chmod(0o755)
    out = run(["doctor"], {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}, home=tmp_path)
    (row,) = [line for line in out.stdout.decode().splitlines() if line.startswith("  codex_bin ")]
    assert str(fake) in row and row.endswith("(codex on PATH)")


def test_status_and_the_start_up_line_show_the_settings_and_their_sources(tmp_path):
    env = {
        "CODEX_SIDECAR_TOKEN_BUDGET": "5000",
        "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "s"),
        "CODEX_SIDECAR_ENGINE": "transcript-budget",
        "CODEX_SIDECAR_LOG_FORMAT": "json",
        "ECHO_RPC_QUIET": "1",
    }
    out = run(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], env, stdin=b'{"id":1,"method":"sidecar/status"}\n', home=tmp_path)
    settings = json.loads(out.stdout.splitlines()[0])["result"]["settings"]
    assert settings["token_budget"] == {"value": 5000, "source": "CODEX_SIDECAR_TOKEN_BUDGET"}
    assert settings["state_dir"] == {"value": str(tmp_path / "s"), "source": "CODEX_SIDECAR_STATE_DIR"}
    assert settings["codex_bin"] == {"value": sys.executable, "source": "the proxy command"} and settings["config_file"]["value"] is None
    (loaded,) = [e for e in map(json.loads, out.stderr.decode().splitlines()) if e["msg"] == "context engine loaded"]
    assert loaded["tokenBudget"] == 5000 and loaded["tokenBudgetFrom"] == "CODEX_SIDECAR_TOKEN_BUDGET"
    assert loaded["stateDir"] == str(tmp_path / "s") and loaded["stateDirFrom"] == "CODEX_SIDECAR_STATE_DIR"
    assert loaded["codexBin"] == sys.executable and loaded["configFile"] == "none"


# ------------------------------------------------------------ rough edges


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["inspect", "T", "--state-dir", "/x", "--json"], ["--state-dir", "/x", "inspect", "T", "--json"]),
        (["engines", "--engine=lossless"], ["--engine=lossless", "engines"]),
        (["--log-level", "info", "engines", "lossless", "status", "--state-dir=/y"], ["--log-level", "info", "--state-dir=/y", "engines", "lossless", "status"]),
        (["doctor", "--record-redact"], ["--record-redact", "doctor"]),
        (["proxy", "--", "cat", "--state-dir", "/x"], ["proxy", "--", "cat", "--state-dir", "/x"]),
        (["_codex", "--", "app-server", "inspect", "--state-dir", "x"], ["_codex", "--", "app-server", "inspect", "--state-dir", "x"]),
    ],
)
def test_sidecar_options_after_a_command_are_moved_before_it(argv, expected):
    assert hoist_settings(argv) == expected


def test_state_dir_after_inspect_is_used(tmp_path):
    out = run(["inspect", "00000000-0000-0000-0000-000000000000", "--state-dir", str(tmp_path)])
    assert b"No such option" not in out.stderr and f"under {tmp_path}".encode() in out.stderr


def test_version_and_dash_dash_version_print_the_same():
    assert run(["version"]).stdout == run(["--version"]).stdout == b"codex-sidecar 0.1.0\n"


def test_engines_has_a_header_and_marks_the_selected_engine():
    lines = run(["engines"], {"CODEX_SIDECAR_ENGINE": "lossless"}).stdout.decode().splitlines()
    assert lines[0].split() == ["ENGINE", "DISTRIBUTION", "VERSION", "ENTRY", "POINT"]
    assert [line.split()[1] for line in lines if line.startswith("*")] == ["lossless"]
    # every row's columns start where the header's do
    start = lines[0].index("DISTRIBUTION")
    assert all(line[start - 1] == " " and line[start] != " " for line in lines[1:4])


def test_a_misspelt_engine_in_engines_gets_did_you_mean():
    out = run(["engines"], {"CODEX_SIDECAR_ENGINE": "losless"})
    assert b"'losless' is not installed (did you mean 'lossless'?)" in out.stderr


def test_the_inspect_table_stays_in_line_with_long_channels_and_labels_a_switch():
    base = {"status": "completed", "mode": "delta", "assembled": {"count": 3, "estimatedTokens": 10}, "turnInputChars": {"original": 5, "sent": 7}}
    records = [
        {**base, "injected": {"channels": ["developerInstructions"]}, "rebuilt": True, "revertMs": 52.4},
        {**base, "injected": {"channels": ["developerInstructions", "turnInput", "threadHistory", "anotherLongChannelName"]}, "rebuilt": True, "switched": True, "revertMs": 40.0},
    ]
    lines = inspect_table(records)
    at = lines[0].index("input chars")
    assert all(len(line) > at and line[at - 1] == " " for line in lines[1:])
    assert lines[1].endswith("revert 52 ms") and lines[2].endswith("switch 40 ms")
    assert len({line.index(" delta ") for line in lines[1:]}) == 1


@pytest.mark.parametrize(
    "args, relayed",
    [
        (["app-server", "--listen", "stdio://"], True),
        (["-c", "a=1", "app-server"], True),
        (["app-server", "--help"], False),
        (["app-server", "-h"], False),
        (["--version"], False),
        (["exec", "hi"], False),
        (["app-server", "generate-ts", "--out", "x"], False),
        (["app-server", "daemon", "status"], False),
        (["app-server", "--print-startup-config"], False),
        (["app-server", "proxy"], True),
        (["-c", "model=help", "app-server", "--listen", "stdio://"], True),
    ],
)
def test_only_an_app_server_session_is_relayed(args, relayed):
    assert serves_app_server(args) is relayed


def test_app_server_help_is_codex_s_own_output_with_no_warnings(tmp_path):
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\nfor i in $(seq 1 93); do echo \"help line $i for $*\"; done\n")
    fake.chmod(0o755)
    out = run(["app-server", "--help"], {"CODEX_SIDECAR_CODEX_BIN": str(fake)})
    assert out.returncode == 0
    assert out.stdout.decode().splitlines() == [f"help line {i} for app-server --help" for i in range(1, 94)]
    assert b"invalid frame" not in out.stderr and out.stderr == b""


def test_status_names_the_setting_that_gave_the_codex_it_started(tmp_path):
    codex = str(CHILDREN / "argv_echo.py")
    env = {"CODEX_SIDECAR_CODEX_BIN": codex, "ARGV_ECHO_LOG": str(tmp_path / "argv.json"), "ECHO_RPC_QUIET": "1"}
    out = run(["app-server", "--listen", "stdio://"], env, stdin=b'{"id":1,"method":"sidecar/status"}\n', home=tmp_path)
    settings = json.loads(out.stdout.splitlines()[0])["result"]["settings"]
    assert settings["codex_bin"] == {"value": codex, "source": "CODEX_SIDECAR_CODEX_BIN"}


def test_a_misspelt_engine_at_start_up_logs_did_you_mean_and_its_setting(tmp_path):
    env = {"CODEX_SIDECAR_ENGINE": "losless", "CODEX_SIDECAR_LOG_FORMAT": "json", "ECHO_RPC_QUIET": "1", "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "s")}
    out = run(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], env, stdin=b'{"id":1,"method":"initialize"}\n', home=tmp_path)
    assert json.loads(out.stdout.splitlines()[0])["id"] == 1
    (e,) = [e for e in map(json.loads, out.stderr.decode().splitlines()) if e["level"] == "error"]
    assert e["msg"] == "engine 'losless' is not installed (did you mean 'lossless'?)"
    assert e["setting"] == "CODEX_SIDECAR_ENGINE" and e["fix"] == "change or unset CODEX_SIDECAR_ENGINE"


@pytest.mark.parametrize(
    "value",
    ["1024", " 2048 ", "1_024", "12", "-5", "abc", "", "1e3", 4096, 1023, 2048.0, True, "nan", "inf", "0.5", "1", "0", "yes", "Off", "maybe", ["a"]],
)
def test_every_setting_converts_as_click_would(value):
    """The settings convert without importing click on a session's start-up,
    so each type must accept what click accepts, give the same value, and
    reject with click's own message."""
    import click

    from sidecar.config import SETTINGS, _convert

    for s in SETTINGS:
        if s.type is str or s.name in ("engine_allowlist", "session_key"):
            continue
        reference = click.BOOL if s.type is bool else {
            "Choice": lambda t: click.Choice(t.choices),
            "IntRange": lambda t: click.IntRange(min=t.min, max=t.max),
            "FloatRange": lambda t: click.FloatRange(min=t.min, max=t.max),
        }[type(s.type).__name__](s.type)
        try:
            want: object = ("ok", reference.convert(value, None, None))
        except click.BadParameter as exc:
            want = ("bad", exc.message)
        except Exception as exc:  # click.BOOL on an int: as before
            want = ("raises", type(exc))
        try:
            got: object = ("ok", _convert(s, value))
        except click.BadParameter as exc:
            got = ("bad", exc.message)
        except Exception as exc:
            got = ("raises", type(exc))
        if got[0] == want[0] == "bad":
            continue  # click's words ("not a valid integer range", "Recognized values: , 0, 1") are replaced: below
        assert got == want or (got[0] == want[0] == "ok" and got[1] != got[1]), (s.name, value)  # (nan != nan)


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('token_budget = "lots"', "token_budget = 'lots' in {cfg}: 'lots' is not a whole number (expected a whole number, at least 1)"),
        ("token_budget = -5", "token_budget = -5 in {cfg}: -5 is out of range (expected at least 1)"),
        ('engine_deadline = "soon"', "engine_deadline = 'soon' in {cfg}: 'soon' is not a number (expected a number, at least 0.1)"),
        ("busy_poll_us = 200000", "busy_poll_us = 200000 in {cfg}: 200000 is out of range (expected between 0 and 100000)"),
        ('record_redact = "maybe"', "record_redact = 'maybe' in {cfg}: 'maybe' is not true or false (expected true, false, yes, no, on, off, 1 or 0) (edit"),
        ('session_key = "{sesion_id}"', "session_key = '{sesion_id}' in {cfg}: '{sesion_id}' names {sesion_id}; a session key template may name only {session_id} and {thread_id} (edit"),
        ('session_key = "agent:{thread_id"', "session_key = 'agent:{thread_id' in {cfg}: 'agent:{thread_id' is not a template (expected '}' before end of string)"),
        ('log_level = "verbose"', "log_level = 'verbose' in {cfg}: 'verbose' is not one of 'debug', 'info', 'warning', 'error' (edit"),
    ],
)
def test_a_setting_says_in_plain_words_what_it_expects(tmp_path, toml, said):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + "\n")
    (problem,) = resolve_settings({}, {}, cfg).problems
    assert said.replace("{cfg}", str(cfg)) in problem.message
    assert "range" not in problem.message.split(": ", 1)[1].replace("out of range", "")
