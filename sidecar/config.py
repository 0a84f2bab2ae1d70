"""Where settings come from: flags, then ``CODEX_SIDECAR_*``, then a TOML file.

The file is ``$CODEX_SIDECAR_CONFIG`` or ``--config-file``, else
``$XDG_CONFIG_HOME/codex-sidecar/config.toml`` (``~/.config/...``) when it
exists. Its top-level keys are the setting names below; engine settings live
in ``[engines.<id>]`` tables. Unknown keys are an error, so a typo in a
config fails loudly instead of being ignored.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

ENV_PREFIX = "CODEX_SIDECAR_"
ACTIVE_ENV = "CODEX_SIDECAR_ACTIVE"
"""Set in the child's environment, so a sidecar that would spawn itself can tell."""


class NameList(click.ParamType):
    """A list of names: comma-separated on the command line or in a variable,
    a TOML array in the config file."""

    name = "names"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, ...]:
        if isinstance(value, (list, tuple)):
            return tuple(str(v).strip() for v in value if str(v).strip())
        return tuple(v.strip() for v in str(value).split(",") if v.strip())


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "codex-sidecar"


@dataclass(frozen=True)
class Setting:
    name: str
    type: Any
    default: Any
    help: str
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def envvar(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("codex_bin", str, None, "The real codex executable (default: `codex` on PATH, never this program).", "PATH"),
    Setting("log_format", click.Choice(["text", "json"]), "text", "Log format on stderr; json gives one object a line."),
    Setting("log_level", click.Choice(["debug", "info", "warning", "error"]), "info", "Lowest log level written to stderr."),
    Setting("record", str, None, "Append every frame, both ways, to this JSONL file (created 0600).", "FILE"),
    Setting("record_redact", bool, False, "Replace message text, tool I/O and images in the recording by their length."),
    Setting("max_line_bytes", click.IntRange(min=1024), 64 * 1024 * 1024, "Longest line parsed; longer lines are forwarded unparsed.", "BYTES"),
    Setting("eof_grace", click.FloatRange(min=0), 2.0, "Seconds the child gets to exit after the client closes stdin, before SIGTERM.", "SECONDS"),
    Setting("kill_grace", click.FloatRange(min=0), 3.0, "Seconds between SIGTERM and SIGKILL for a lingering child.", "SECONDS"),
    Setting(
        "busy_poll_us",
        click.IntRange(min=0, max=100_000),
        300,
        "Microseconds the relay keeps polling after traffic before it sleeps: cuts the latency it adds "
        "(a sleeping process is slow to wake, on VMs especially) for at most that much CPU per burst; 0 = off; "
        "always off on a single CPU.",
        "MICROSECONDS",
    ),
    Setting("engine", str, "legacy", "Context engine id (entry point in openclaw.context_engines); legacy = pass through.", "ID"),
    Setting("engine_allowlist", NameList(), None, "Distributions trusted to provide engines (comma-separated); unset trusts all installed, with a warning.", "DISTS"),
    Setting("state_dir", str, None, "Where transcript mirrors live (default: $XDG_STATE_HOME/codex-sidecar).", "DIR"),
    Setting("engine_deadline", click.FloatRange(min=0.1), 20.0, "Seconds an engine call may take before the sidecar falls back to the client's request.", "SECONDS"),
    Setting("token_budget", click.IntRange(min=1), None, "Token budget passed to the engine (default: the model's context window minus --token-reserve).", "TOKENS"),
    Setting(
        "token_reserve",
        click.IntRange(min=0),
        20_000,
        "Tokens the default budget keeps out of the model's context window (OpenClaw's own reserve); an explicit --token-budget wins.",
        "TOKENS",
    ),
    Setting(
        "citations_mode",
        click.Choice(["auto", "on", "off"]),
        None,
        "citations_mode passed to the engine's assemble: OpenClaw's memory.citations (auto, on, off); unset passes none, as OpenClaw does.",
    ),
    Setting("session_key", str, "{thread_id}", "Session key template for engines; {thread_id} (or {session_id}) is replaced by the session id.", "TEMPLATE"),
    Setting(
        "stale_slack",
        click.FloatRange(min=0.0, max=1.0),
        0.10,
        "delta: share of what the thread holds (at least 4,000 chars) that may be content the engine dropped before the sidecar rebuilds; 0 = exact, rebuild on any drop.",
        "FRACTION",
    ),
    Setting(
        "projection_mode",
        click.Choice(["auto", "per_turn", "epoch", "delta"]),
        "auto",
        "How assembled context reaches Codex: delta (only what the thread lacks; rebuild in place when the engine drops held content), "
        "epoch (rebuild once per engine epoch), per_turn (every turn, the spec's first version), auto (what the engine asks for, else delta).",
    ),
    Setting(
        "rebuild",
        click.Choice(["revert", "fresh"]),
        "fresh",
        "How delta and epoch rebuild Codex's history: fresh (switch the client's thread onto a Codex thread started ahead of time, "
        "behind the client's thread id; for threads started through this sidecar, others revert) or revert (the Codex thread in place).",
    ),
)
SETTING_NAMES = frozenset(s.name for s in SETTINGS)


class ConfigError(click.ClickException):
    pass


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "codex-sidecar" / "config.toml"


def load_config_file(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """Read the TOML file; ``None`` means the default location, if present."""
    explicit = path is not None
    p = Path(path) if path is not None else default_config_path()
    if not p.exists():
        if explicit:
            raise ConfigError(f"config file not found: {p}")
        return {}
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {p}: {exc}") from None
    unknown = set(data) - SETTING_NAMES - {"engines"}
    if unknown:
        raise ConfigError(f"unknown keys in {p}: {', '.join(sorted(unknown))}")
    engines = data.get("engines", {})
    if not isinstance(engines, dict) or not all(isinstance(v, dict) for v in engines.values()):
        raise ConfigError(f"{p}: [engines] must hold one table per engine id")
    return data


def resolve_codex_bin(configured: str | None) -> str:
    """The real codex: the configured path, else ``codex`` on PATH minus ourselves."""
    if configured:
        path = shutil.which(configured) or configured
        if not os.path.exists(path):
            raise ConfigError(f"codex binary not found: {configured}")
        if _is_self(path):
            raise ConfigError(f"{configured} is the sidecar itself, not the codex binary")
        return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "codex")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not _is_self(candidate):
            return candidate
    raise ConfigError(
        "cannot find the real codex binary: set --codex-bin, CODEX_SIDECAR_CODEX_BIN "
        "or codex_bin in the config file, or put codex on PATH"
    )


def _is_self(path: str) -> bool:
    """True for this program or a console script that launches it."""
    real = os.path.realpath(path)
    if sys.argv and sys.argv[0] and real == os.path.realpath(sys.argv[0]):
        return True
    try:
        with open(real, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and b"sidecar.cli" in head
