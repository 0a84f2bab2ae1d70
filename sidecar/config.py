"""Where settings come from: flags, then ``CODEX_SIDECAR_*``, then a TOML file.

The file is ``$CODEX_SIDECAR_CONFIG`` or ``--config-file``, else
``$XDG_CONFIG_HOME/codex-sidecar/config.toml`` (``~/.config/...``) when it
exists. Its top-level keys are the setting names below; engine settings live
in ``[engines.<id>]`` tables. Unknown keys are an error, so a typo in a
config fails loudly instead of being ignored; it stops the commands that
serve, not ``version`` or ``engines``, and ``doctor`` reports it.

A setting declares itself by one :class:`Setting` row in :data:`SETTINGS`:
its flag (``--name-with-dashes``), variable (``CODEX_SIDECAR_NAME``), file key
(``name``), type (click's semantics: it validates every source alike), default and
help follow from the row; :func:`resolve_settings` records where each value
came from, and ``doctor``, ``sidecar/status`` and the start-up log show it.
"""

from __future__ import annotations

import os
from collections import namedtuple as _namedtuple
from pathlib import Path

from .early import ACTIVE_ENV as ACTIVE_ENV
from .early import is_self as _is_self

TYPE_CHECKING = False  # typing costs ~3 ms, paid before codex is spawned when settings are given (sidecar.launch)
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping
    from typing import Any

ENV_PREFIX = "CODEX_SIDECAR_"


# The setting types convert as click's do, without importing click (~16 ms
# and ~1 MB that a session's start-up does not otherwise need: it does not
# parse its argv with click, sidecar.launch): a value click would accept is
# converted here; anything else goes to the click type itself, whose error
# message the user sees, as before.


class Choice:
    def __init__(self, choices: list[str]) -> None:
        self.choices = tuple(choices)

    def convert(self, value: Any) -> Any:
        if isinstance(value, str) and value in self.choices:
            return value
        import click

        try:  # what click accepts (a case-folded match, ...), it converts; what it rejects, said without its "."
            return click.Choice(self.choices).convert(value, None, None)
        except click.BadParameter:
            raise click.BadParameter(f"{value!r} is not one of {', '.join(map(repr, self.choices))}") from None


def _range_words(lo: float | None, hi: float | None) -> str:
    """``at least 1``, ``between 0 and 100000``."""
    if lo is not None and hi is not None:
        return f"between {lo:g} and {hi:g}"
    return f"at least {lo:g}" if lo is not None else f"at most {hi:g}"


def _out_of_range(value: Any, kind: str, parse: Any, lo: float | None, hi: float | None) -> Exception:
    """``'lots' is not a whole number (expected ...)`` or ``-5 is out of range (expected at least 1)``."""
    import click

    try:
        parse.convert(value, None, None)
    except click.BadParameter:
        return click.BadParameter(f"{value!r} is not {kind} (expected {kind}, {_range_words(lo, hi)})")
    return click.BadParameter(f"{value} is out of range (expected {_range_words(lo, hi)})")


class IntRange:
    def __init__(self, min: int | None = None, max: int | None = None) -> None:
        self.min, self.max = min, max

    def convert(self, value: Any) -> Any:
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            try:
                n = int(value)
            except ValueError:
                n = None
            if n is not None and (self.min is None or n >= self.min) and (self.max is None or n <= self.max):
                return n
        import click

        try:  # what click accepts, it converts; what it rejects, said in plain words
            return click.IntRange(min=self.min, max=self.max).convert(value, None, None)
        except click.BadParameter:
            raise _out_of_range(value, "a whole number", click.INT, self.min, self.max) from None


class FloatRange:
    def __init__(self, min: float | None = None, max: float | None = None) -> None:
        self.min, self.max = min, max

    def convert(self, value: Any) -> Any:
        if isinstance(value, (str, float)) or (isinstance(value, int) and not isinstance(value, bool)):
            try:
                x = float(value)
            except ValueError:
                x = None
            if x is not None and (self.min is None or x >= self.min) and (self.max is None or x <= self.max):
                return x
        import click

        try:
            return click.FloatRange(min=self.min, max=self.max).convert(value, None, None)
        except click.BadParameter:
            raise _out_of_range(value, "a number", click.FLOAT, self.min, self.max) from None


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def _to_bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    import click

    try:
        return click.BOOL.convert(value, None, None)
    except click.BadParameter:  # click lists "" first among its words: ", 0, 1, f, ..."
        raise click.BadParameter(f"{value!r} is not true or false (expected true, false, yes, no, on, off, 1 or 0)") from None


class NameList:
    """A list of names: comma-separated on the command line or in a variable,
    a TOML array in the config file."""

    name = "names"

    def convert(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, (list, tuple)):
            return tuple(str(v).strip() for v in value if str(v).strip())
        return tuple(v.strip() for v in str(value).split(",") if v.strip())


class KeyTemplate:
    """The ``session_key`` template: a string naming only ``{session_id}``
    and ``{thread_id}`` (a typo such as ``{sesion_id}`` is refused here,
    rather than giving every engine the bare session id)."""

    name = "template"

    def convert(self, value: Any) -> str:
        if not isinstance(value, str):
            problem = f"expected a string, got {type(value).__name__}"
        else:
            try:
                value.format_map({"thread_id": "", "session_id": ""})
                return value
            except KeyError as exc:
                problem = f"{value!r} names {{{exc.args[0]}}}; a session key template may name only {{session_id}} and {{thread_id}}"
            except (ValueError, IndexError, AttributeError, TypeError) as exc:
                problem = f"{value!r} is not a template ({exc}); write {{session_id}} for the session id, {{{{ and }}}} for a brace"
        import click  # only for a bad value (click costs a session's start-up ~16 ms)

        raise click.BadParameter(problem)


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "codex-sidecar"


class Setting:
    """One setting's row. (This module's records are plain slotted classes,
    not msgspec Structs: the entry point resolves the settings a user gave
    before it spawns codex, and msgspec's import, ~10-30 ms of CPU, would
    then delay codex; sidecar.launch.)"""

    __slots__ = ("default", "help", "metavar", "name", "type")
    name: str
    type: Any
    default: Any
    help: str
    metavar: str | None

    def __init__(self, name: str, type: Any, default: Any, help: str, metavar: str | None = None) -> None:
        self.name, self.type, self.default, self.help, self.metavar = name, type, default, help, metavar

    def __repr__(self) -> str:
        return f"Setting({self.name!r})"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def envvar(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("codex_bin", str, None, "The real codex executable (default: `codex` on PATH, never this program).", "PATH"),
    Setting("log_format", Choice(["text", "json"]), "text", "Log format on stderr; json gives one object a line."),
    Setting("log_level", Choice(["debug", "info", "warning", "error"]), "info", "Lowest log level written to stderr."),
    Setting("record", str, None, "Append every frame, both ways, to this JSONL file (created 0600).", "FILE"),
    Setting("record_redact", bool, False, "Replace message text, tool I/O and images in the recording by their length."),
    Setting("max_line_bytes", IntRange(min=1024), 64 * 1024 * 1024, "Longest line parsed; longer lines are forwarded unparsed.", "BYTES"),
    Setting("eof_grace", FloatRange(min=0), 2.0, "Seconds the child gets to exit after the client closes stdin, before SIGTERM.", "SECONDS"),
    Setting("kill_grace", FloatRange(min=0), 3.0, "Seconds between SIGTERM and SIGKILL for a lingering child.", "SECONDS"),
    Setting(
        "busy_poll_us",
        IntRange(min=0, max=100_000),
        300,
        "Microseconds the relay keeps polling after traffic before it sleeps: cuts the latency it adds "
        "(a sleeping process is slow to wake, on VMs especially) for at most that much CPU per burst; 0 = off; "
        "always off on a single CPU.",
        "MICROSECONDS",
    ),
    Setting("engine", str, "legacy", "Context engine id (entry point in openclaw.context_engines); legacy = pass through.", "ID"),
    Setting("engine_allowlist", NameList(), None, "Distributions trusted to provide engines (comma-separated); unset trusts all installed, with a warning.", "DISTS"),
    Setting("state_dir", str, None, "Where transcript mirrors live (default: $XDG_STATE_HOME/codex-sidecar).", "DIR"),
    Setting("engine_deadline", FloatRange(min=0.1), 20.0, "Seconds an engine call may take before the sidecar falls back to the client's request.", "SECONDS"),
    Setting("token_budget", IntRange(min=1), None, "Token budget passed to the engine (default: the model's context window minus --token-reserve).", "TOKENS"),
    Setting(
        "token_reserve",
        IntRange(min=0),
        20_000,
        "Tokens the default budget keeps out of the model's context window (OpenClaw's own reserve); an explicit --token-budget wins.",
        "TOKENS",
    ),
    Setting(
        "citations_mode",
        Choice(["auto", "on", "off"]),
        None,
        "citations_mode passed to the engine's assemble: OpenClaw's memory.citations (auto, on, off); unset passes none, as OpenClaw does.",
    ),
    Setting("session_key", KeyTemplate(), "{thread_id}", "Session key template for engines; {thread_id} (or {session_id}) is replaced by the session id.", "TEMPLATE"),
    Setting(
        "stale_slack",
        FloatRange(min=0.0, max=1.0),
        0.10,
        "delta: share of what the thread holds (at least 4,000 chars) that may be content the engine dropped before the sidecar rebuilds; 0 = exact, rebuild on any drop.",
        "FRACTION",
    ),
    Setting(
        "projection_mode",
        Choice(["auto", "per_turn", "epoch", "delta"]),
        "auto",
        "How assembled context reaches Codex: delta (only what the thread lacks; rebuild in place when the engine drops held content), "
        "epoch (rebuild once per engine epoch), per_turn (every turn, the spec's first version), auto (what the engine asks for, else delta).",
    ),
    Setting(
        "rebuild",
        Choice(["revert", "fresh"]),
        "fresh",
        "How delta and epoch rebuild Codex's history: fresh (switch the client's thread onto a Codex thread started ahead of time, "
        "behind the client's thread id; for threads started through this sidecar, others revert) or revert (the Codex thread in place).",
    ),
)
SETTING_NAMES = frozenset(s.name for s in SETTINGS)


if TYPE_CHECKING:
    import click

    class ConfigError(click.ClickException):
        pass


def __getattr__(name: str) -> Any:
    """``ConfigError``, a ``click.ClickException`` (click shows it and exits
    1), defined when first asked for: importing click is not on a session's
    start-up path."""
    if name != "ConfigError":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import click

    cls = type("ConfigError", (click.ClickException,), {"__module__": __name__, "__doc__": "A setting or the config file the command cannot use."})
    globals()["ConfigError"] = cls
    return cls


def _config_error(message: str) -> Exception:
    cls = globals().get("ConfigError") or __getattr__("ConfigError")
    return cls(message)


# ------------------------------------------------------------------ sources


class Origin:
    """Where a setting's value came from: shown by ``doctor``, ``sidecar/status``
    and the start-up log line, and named by every error about the value.

    ``kind``: ``flag``, ``env``, ``file`` or ``default``; ``where``:
    ``--token-budget``, ``CODEX_SIDECAR_TOKEN_BUDGET``, ``/path/config.toml``
    or ``""``; ``key``: the config file's key (``file`` only). Immutable."""

    __slots__ = ("key", "kind", "where")
    kind: str
    where: str
    key: str

    def __init__(self, kind: str, where: str, key: str = "") -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "where", where)
        object.__setattr__(self, "key", key)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Origin is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Origin) and (self.kind, self.where, self.key) == (other.kind, other.where, other.key)

    def __hash__(self) -> int:
        return hash((self.kind, self.where, self.key))

    def __repr__(self) -> str:
        return f"Origin(kind={self.kind!r}, where={self.where!r}, key={self.key!r})"

    def __str__(self) -> str:
        if self.kind == "file":
            return f"{self.key} in {self.where}"
        return self.where if self.kind != "default" else "default"

    def fix(self) -> str:
        """What to change to change the value."""
        if self.kind == "flag":
            return f"change {self.where} on the command line"
        if self.kind == "env":
            return f"change or unset {self.where}"
        if self.kind == "file":
            return f"edit {self.key} in {self.where}"
        return "set it with a flag, a CODEX_SIDECAR_* variable or the config file"


DEFAULT = Origin("default", "")


class SettingProblem:
    """A value the sidecar cannot use. ``setting`` is None for the config
    file as a whole (unreadable, or a key that is no setting)."""

    __slots__ = ("message", "setting")
    setting: str | None
    message: str

    def __init__(self, setting: str | None, message: str) -> None:
        self.setting, self.message = setting, message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SettingProblem) and (self.setting, self.message) == (other.setting, other.message)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SettingProblem(setting={self.setting!r}, message={self.message!r})"


class Resolved(_namedtuple("Resolved", "values origins problems config_file config_origin engines")):
    """Every setting's value and origin, and what was wrong on the way: a
    record (``values``, ``origins``: name -> :class:`Origin`, ``problems``:
    :class:`SettingProblem` values, ``config_file``: the config file read or
    None, ``config_origin``, ``engines``: the ``[engines.<id>]`` tables)."""

    __slots__ = ()
    values: dict[str, Any]
    origins: dict[str, Origin]
    problems: list[SettingProblem]
    config_file: Path | None
    config_origin: Origin
    engines: dict[str, Any]

    def problems_for(self, needs: Collection[str] | None) -> list[SettingProblem]:
        """The problems that stop a command needing ``needs`` (None: all
        settings, and a config file with keys that are no setting)."""
        return [p for p in self.problems if needs is None or (p.setting is not None and p.setting in needs)]

    def shown(self) -> dict[str, dict[str, Any]]:
        """``{name: {"value", "source"}}`` for status and logs."""
        out = {s.name: {"value": self.values.get(s.name), "source": str(self.origins.get(s.name, DEFAULT))} for s in SETTINGS}
        out["config_file"] = {"value": str(self.config_file) if self.config_file else None, "source": str(self.config_origin)}
        return out


def _convert(setting: Setting, value: Any) -> Any:
    """The value in the setting's type; ``click.BadParameter`` if it is not one."""
    if setting.type is bool:
        return _to_bool(value)
    if setting.type is str:
        if isinstance(value, str):
            return value
        import click

        raise click.BadParameter(f"expected a string, got {type(value).__name__}")
    return setting.type.convert(value)


def _bad(setting: Setting, origin: Origin, raw: Any, exc: Any) -> SettingProblem:
    shown = f"{setting.name} = {raw!r}" if origin.kind == "file" else f"{origin.where}={raw}" if origin.kind == "env" else f"{origin.where} {raw}"
    where = f" in {origin.where}" if origin.kind == "file" else ""
    return SettingProblem(setting.name, f"invalid value {shown}{where}: {exc.message} ({origin.fix()})")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'state_dir'?)`` or ``""``."""
    import difflib

    options = sorted(set(choices))
    close = difflib.get_close_matches(name.replace("-", "_").lower(), options, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "codex-sidecar" / "config.toml"


def read_config_file(path: str | os.PathLike[str] | None) -> tuple[dict[str, Any], list[SettingProblem], Path | None]:
    """The TOML file's table, its problems and its path (None: no file);
    ``path`` None means the default location, if present. Never raises: a
    command decides whether a problem stops it."""
    explicit = path is not None
    p = Path(path) if path is not None else default_config_path()
    if not p.exists():
        if explicit:
            return {}, [SettingProblem(None, f"config file not found: {p} (create it, or unset --config-file / CODEX_SIDECAR_CONFIG)")], None
        return {}, [], None
    import tomllib  # only with a file (its parser compiles regexes: ~2 ms)

    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        return {}, [SettingProblem(None, f"cannot read config file {p}: {exc} (fix the file, or point CODEX_SIDECAR_CONFIG elsewhere)")], p
    problems = []
    valid = sorted(SETTING_NAMES | {"engines"})
    for key in sorted(set(data) - SETTING_NAMES - {"engines"}):
        problems.append(
            SettingProblem(None, f"unknown key {key!r} in {p}{did_you_mean(key, valid)}; valid keys: {', '.join(valid)}")
        )
        del data[key]
    engines = data.get("engines", {})
    if not isinstance(engines, dict) or not all(isinstance(v, dict) for v in engines.values()):
        problems.append(SettingProblem("engine", f"{p}: [engines] must hold one table per engine id ([engines.<id>])"))
        data.pop("engines", None)
    return data, problems, p


def load_config_file(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """Read the TOML file; ``None`` means the default location, if present.
    Any problem raises :class:`ConfigError` (the first one's message)."""
    data, problems, _p = read_config_file(path)
    if problems:
        raise _config_error(problems[0].message)
    return data


def resolve_settings(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    config_file: str | os.PathLike[str] | None,
    config_origin: Origin = DEFAULT,
) -> Resolved:
    """Each setting from the first of: a flag given (``flags``: name -> raw
    value, only those on the command line), its ``CODEX_SIDECAR_*`` variable
    (an empty one counts as unset, except the allowlist's: trust only the
    built-ins), the config file's key, the default. A value that does not
    convert is a problem naming where it came from, and the setting keeps
    its default."""
    data, problems, path = read_config_file(config_file)
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    for s in SETTINGS:
        raw: Any = None
        origin = DEFAULT
        if s.name in flags and flags[s.name] is not None:
            raw, origin = flags[s.name], Origin("flag", s.flag)
        elif env.get(s.envvar, "") != "" or (s.name == "engine_allowlist" and s.envvar in env):
            raw, origin = env[s.envvar], Origin("env", s.envvar)
        elif s.name in data and path is not None:
            raw, origin = data[s.name], Origin("file", str(path), s.name)
        if origin.kind == "default":
            values[s.name] = s.default
        else:
            try:
                values[s.name] = _convert(s, raw)
            except Exception as exc:
                import click  # a value the types reject is the only way here: click is loaded

                if not isinstance(exc, click.BadParameter):
                    raise
                problems.append(_bad(s, origin, raw, exc))
                values[s.name], origin = s.default, DEFAULT
        origins[s.name] = origin
    return Resolved(values, origins, problems, path, config_origin, data.get("engines", {}))


def resolve_codex_bin(configured: str | None, origin: Origin = DEFAULT) -> str:
    """The real codex: the configured path, else ``codex`` on PATH minus ourselves.
    Errors name the setting that gave the path (``origin``)."""
    if configured:
        source = f" (from {origin})" if origin.kind != "default" else ""
        fix = f"point {origin} at the real codex" if origin.kind != "default" else "set codex_bin to the real codex"
        if os.sep in configured:
            path = configured  # what shutil.which(...) or configured gives a path (shutil costs ~4 ms to import)
        else:
            import shutil

            path = shutil.which(configured) or configured
        if not os.path.exists(path):
            raise _config_error(f"codex binary not found: {configured}{source}; {fix}")
        if _is_self(path):
            raise _config_error(f"{configured}{source} is the sidecar itself, not the codex binary; {fix}")
        return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "codex")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not _is_self(candidate):
            return candidate
    raise _config_error(
        "cannot find the real codex binary: set --codex-bin, CODEX_SIDECAR_CODEX_BIN "
        "or codex_bin in the config file, or put codex on PATH"
    )


def resolve_given(given: Mapping[str, Any], env: Mapping[str, str]) -> Resolved:
    """The settings for the command line's options ``given`` (name -> raw
    value, ``config_file`` included, as click passes them), the variables and
    the config file, as the CLI resolves them (``sidecar.launch`` and
    ``sidecar.serve``, which run a session without click)."""
    env_config = env.get("CODEX_SIDECAR_CONFIG") or None
    if "config_file" in given:
        config_file, config_origin = given["config_file"], Origin("flag", "--config-file")
    elif env_config is not None:
        config_file, config_origin = env_config, Origin("env", "CODEX_SIDECAR_CONFIG")
    else:
        config_file, config_origin = None, DEFAULT
    flags = {k: v for k, v in given.items() if k != "config_file"}
    return resolve_settings(flags, env, config_file, config_origin)
