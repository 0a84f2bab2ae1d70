"""`codex-sidecar doctor` reports every problem it checks for: each check is
broken once here, and shown passing once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.doctor import (
    can_write,
    check_codex,
    check_config_file,
    check_engine,
    check_state_dir,
    check_tokenizer,
    openclaw_snippet,
    parse_codex_version,
    sidecar_executable,
)

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = [sys.executable, "-m", "sidecar"]
GROUP = "openclaw.context_engines"

ENGINE_MODULE = """
from engines import AssembleResult, BaseContextEngine, CompactResult, EngineInfo, IngestResult


class Engine(BaseContextEngine):
    def __init__(self, config):
        super().__init__(config)
        self.info = EngineInfo(id="{id}", name="Doctor test engine", version="1.0")

    async def ingest(self, params):
        return IngestResult(ingested=True)

    async def assemble(self, params):
        return AssembleResult(messages=params.messages, estimated_tokens=0)

    async def compact(self, params):
        return CompactResult(ok=True, compacted=False)


def good(config):
    return Engine(config)


def broken(config):
    raise RuntimeError("the database is missing")
"""


def install_engine(site: Path, dist: str, engine_id: str, factory: str) -> None:
    """A third-party engine distribution on sys.path: a module and its
    ``*.dist-info`` with the entry point."""
    module = dist.replace("-", "_") + "_mod"
    (site / f"{module}.py").write_text(ENGINE_MODULE.replace("{id}", engine_id))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{engine_id} = {module}:{factory}\n")


def fake_codex(tmp_path, version_line: str) -> str:
    path = tmp_path / "codex"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(0o755)
    return str(path)


def test_parse_codex_version():
    assert parse_codex_version("codex-cli 0.169.0\n") == (0, 169, 0)
    assert parse_codex_version("no digits") is None


def test_codex_new_enough_passes(tmp_path):
    finding, path = check_codex(fake_codex(tmp_path, "codex-cli 0.151.0"))
    assert finding.ok, finding
    assert path == str(tmp_path / "codex")


def test_codex_older_than_the_sidecar_serves_fails(tmp_path):
    # 0.149.0 and 0.150.0 pass OpenClaw's own check, but have no thread/revert (docs/testing.md)
    finding, _ = check_codex(fake_codex(tmp_path, "codex-cli 0.150.0"))
    assert not finding.ok
    assert "0.150.0" in finding.message and "0.151.0" in finding.message


def test_a_codex_that_is_a_wrapper_around_the_sidecar_is_named_the_sidecar_not_an_old_codex(tmp_path, monkeypatch):
    """A ``codex`` script on PATH that starts ``codex-sidecar`` answers
    ``--version`` with the sidecar's version: that is the sidecar loop the
    sidecar stops on at start, not a codex older than 0.151.0."""
    from sidecar.config import Origin

    wrapper = fake_codex(tmp_path, "codex-sidecar 0.1.0")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    finding, _ = check_codex(None)
    assert not finding.ok and "needs at least" not in finding.message
    assert f"{wrapper} is the sidecar itself, not the codex binary (its --version prints 'codex-sidecar 0.1.0'); set codex_bin" in finding.message
    named, _ = check_codex(wrapper, origin=Origin("env", "CODEX_SIDECAR_CODEX_BIN"))
    assert "is the sidecar itself" in named.message and "; point CODEX_SIDECAR_CODEX_BIN at the real codex" in named.message


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


def _unwritable_dir(tmp_path: Path) -> Path:
    """A directory this user cannot create files in.  Mode 0500 does it for
    anyone but root; root writes through mode bits, and for root Linux's
    /proc/self is such a directory (procfs refuses new files)."""
    d = tmp_path / "readonly"
    d.mkdir()
    d.chmod(0o500)
    if can_write(d):
        d = Path("/proc/self")
        assert d.is_dir() and not can_write(d), "no unwritable directory to test with"
    return d


def test_state_dir_not_writable_fails(tmp_path):
    d = _unwritable_dir(tmp_path)
    finding = check_state_dir(d)
    assert not finding.ok and "not writable" in finding.message, finding


def test_missing_state_dir_under_an_unwritable_parent_fails(tmp_path):
    finding = check_state_dir(_unwritable_dir(tmp_path) / "codex-sidecar")
    assert not finding.ok and "cannot be created" in finding.message, finding


def test_the_write_probe_leaves_nothing_behind(tmp_path):
    assert can_write(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_legacy_and_builtin_engines_pass():
    assert check_engine("legacy", None, {}).ok
    assert check_engine("transcript-budget", (), {}).ok


def test_an_engine_that_is_not_installed_fails():
    finding = check_engine("no-such-engine", ("some-dist",), {})
    assert not finding.ok and "no-such-engine" in finding.message


def test_a_misspelt_engine_gets_did_you_mean_not_the_allowlist():
    """`losless` is a typo, not an untrusted engine: the doctor says so."""
    finding = check_engine("losless", None, {})
    assert not finding.ok
    assert "did you mean 'lossless'?" in finding.message and "allowlist" not in finding.message
    assert "installed: legacy, lossless, transcript-budget" in finding.message


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for third-party engine distributions."""
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    return d


def test_an_allowlisted_third_party_engine_passes(site):
    install_engine(site, "doctor-good", "doctor-good", "good")
    finding = check_engine("doctor-good", ("doctor-good",), {})
    assert finding.ok, finding
    assert "Doctor test engine" in finding.message


def test_an_engine_whose_factory_raises_fails(site):
    install_engine(site, "doctor-broken", "doctor-broken", "broken")
    finding = check_engine("doctor-broken", ("doctor-broken",), {})
    assert not finding.ok
    assert "the database is missing" in finding.message


def test_an_engine_outside_the_allowlist_fails(site):
    install_engine(site, "doctor-good", "doctor-good", "good")
    finding = check_engine("doctor-good", ("someone-else",), {})
    assert not finding.ok
    assert "allowlist" in finding.message and "doctor-good" in finding.message


def test_an_installed_third_party_engine_with_no_allowlist_fails(site):
    install_engine(site, "doctor-good", "doctor-good", "good")
    finding = check_engine("doctor-good", None, {})
    assert not finding.ok
    assert "allowlist" in finding.message and "doctor-good" in finding.message


def test_tokenizer_present_passes():
    finding = check_tokenizer()
    assert finding.ok, "bpe-openai is a dependency: " + finding.message


def test_tokenizer_missing_fails_in_the_doctor(tmp_path):
    """bpe-openai shadowed by a package that cannot be imported: the doctor
    reports it (it used to die with a traceback)."""
    shadow = tmp_path / "shadow" / "bpe_openai"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('bpe-openai removed for this test')\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o700)
    config = tmp_path / "config.toml"
    config.write_text("")
    p = _doctor(
        {
            "CODEX_SIDECAR_CODEX_BIN": fake_codex(tmp_path, "codex-cli 0.169.0"),
            "CODEX_SIDECAR_STATE_DIR": str(state),
            "CODEX_SIDECAR_CONFIG": str(config),
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), str(ROOT)]),
        }
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert _failed(p.stdout) == {"tokenizer"}, p.stdout
    assert "bpe-openai" in p.stdout


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


def _doctor(env: dict[str, str], argv0: list[str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full.update(env)
    return subprocess.run([*(argv0 or SIDECAR), "doctor"], capture_output=True, text=True, env=full, timeout=60)


def _failed(stdout: str) -> set[str]:
    return {line.split()[1] for line in stdout.splitlines() if line.startswith("FAIL")}


def test_doctor_exits_zero_when_all_is_well_and_prints_the_snippet_for_what_it_found(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o700)
    config = tmp_path / "config.toml"
    config.write_text('engine = "transcript-budget"\n')
    codex = fake_codex(tmp_path, "codex-cli 0.169.0")
    p = _doctor({"CODEX_SIDECAR_CODEX_BIN": codex, "CODEX_SIDECAR_STATE_DIR": str(state), "CODEX_SIDECAR_CONFIG": str(config)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert _failed(p.stdout) == set(), p.stdout
    # python -m sidecar: the console script beside this interpreter.
    command = str(Path(sys.executable).parent / "codex-sidecar")
    assert f'command: "{command}"' in p.stdout
    assert f"CODEX_SIDECAR_CODEX_BIN={codex}" in p.stdout
    assert f"CODEX_SIDECAR_STATE_DIR={state}" in p.stdout
    assert "CODEX_SIDECAR_ENGINE=transcript-budget" in p.stdout


def test_the_snippet_names_the_script_the_doctor_runs_as(tmp_path):
    script = tmp_path / "bin" / "codex-sidecar"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert sidecar_executable(str(script)) == str(script)


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
    assert _failed(p.stdout) == {"codex", "state", "engine", "config"}, p.stdout
    assert "plugins:" in p.stdout, "the snippet is printed even when something is wrong"


def test_a_recording_the_sidecar_could_not_open_fails_the_doctor_and_a_good_one_is_not_created(tmp_path):
    """Serving stops on a ``record`` it cannot open ("cannot open
    recording"): doctor says so too, with the setting to change, and
    checking a good path leaves no file behind (doctor may run as root)."""
    from sidecar.config import Origin
    from sidecar.doctor import check_record

    env = Origin("env", "CODEX_SIDECAR_RECORD")
    (missing,) = check_record(str(tmp_path / "no" / "such" / "r.jsonl"), env)
    assert not missing.ok
    assert missing.message == f"cannot open recording {tmp_path / 'no' / 'such' / 'r.jsonl'}: No such file or directory (set by CODEX_SIDECAR_RECORD; change or unset CODEX_SIDECAR_RECORD)"
    (folder,) = check_record(str(tmp_path), env)
    assert not folder.ok and "Is a directory" in folder.message
    (good,) = check_record(str(tmp_path / "r.jsonl"), env)
    assert good.ok and not (tmp_path / "r.jsonl").exists()
    assert check_record(None) == []


def test_the_state_dir_an_engine_creates_passes_the_doctor(tmp_path):
    """The first turn with an engine creates the state dir (binding the
    engine's folder): it must be 0700, or doctor fails from then on."""
    from sidecar.host import engine_state_dir

    state = tmp_path / "fresh" / "codex-sidecar"
    old = os.umask(0o022)
    try:
        engine_state_dir(state, "transcript-budget")
    finally:
        os.umask(old)
    assert check_state_dir(state).ok, check_state_dir(state)
    assert oct(state.stat().st_mode & 0o777) == oct(0o700)
    assert oct((state / "engines").stat().st_mode & 0o777) == oct(0o700)


def test_a_distribution_that_registers_a_built_in_id_is_shown_ignored(tmp_path, monkeypatch):
    """Sessions load the built-in without reading entry points, so doctor is
    where an impostor is reported."""
    dist = tmp_path / "impostor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: impostor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[openclaw.context_engines]\ntranscript-budget = impostor_mod:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for selected in ("transcript-budget", "lossless", "legacy"):  # whichever engine is selected
        finding = check_engine(selected, None, {})
        assert finding.ok, finding
        assert finding.message.endswith("; ignored, as built-in ids cannot be replaced: impostor ('transcript-budget')"), finding.message
    (dist / "entry_points.txt").write_text("[openclaw.context_engines]\nnew-engine = impostor_mod:make\n")
    assert "ignored" not in check_engine("lossless", None, {}).message


def test_doctor_without_a_codex_names_the_one_make_demo_installed(tmp_path, monkeypatch):
    from sidecar import doctor

    (tmp_path / "Makefile").write_text("CODEX_VER   := 0.169.0\n")
    for version in ("0.149.0", "0.169.0", "0.171.0"):
        codex = tmp_path / ".tools" / f"codex-{version}" / "node_modules" / ".bin" / "codex"
        codex.parent.mkdir(parents=True)
        codex.write_text("#!/bin/sh\n")
        codex.chmod(0o755)
    pinned = tmp_path / ".tools" / "codex-0.169.0" / "node_modules" / ".bin" / "codex"
    assert doctor.demo_codex_hint(tmp_path) == f"; make demo installed one: --codex-bin {pinned} (or CODEX_SIDECAR_CODEX_BIN)"
    assert doctor.demo_codex_hint(tmp_path / "nothing") == ""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(doctor, "demo_codex_hint", lambda: f"; make demo installed one: --codex-bin {pinned} (or CODEX_SIDECAR_CODEX_BIN)")
    finding, _ = doctor.check_codex(None)
    assert not finding.ok and f"make demo installed one: --codex-bin {pinned}" in finding.message
