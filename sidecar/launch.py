"""The console entry point: the child started before the sidecar's imports.

OpenClaw starts one app-server per turn and waits for its ``initialize``
answer, so whatever the sidecar spends before codex can answer adds to every
turn. Its own start-up (the settings, trio, the relay: ~0.12 s of CPU) can
overlap codex's (~0.1-0.2 s) only if codex is already running.

:func:`main` works out, from the argv, the environment and the config file
and with the standard library only (no click, no trio), which child a
session would run (:func:`plan_session`); when it can tell for sure, it
starts that child at once and passes it signals as the CLI would
(:func:`~sidecar.child.forward_signals_to`). If any setting is given (a
flag, a ``CODEX_SIDECAR_*`` variable, a config file), it could be wrong: the
settings are resolved first (:func:`settings_could_fail`), and a problem
starts no child at all, so the CLI's error is the last line the user sees
rather than one buried under codex's start-up lines. Then the session runs without
click (:func:`sidecar.serve.serve_planned`: the settings resolved as the CLI
resolves them) if every setting is good; otherwise, and for every other
command, the click CLI runs as it always did. Either takes the early child
where it would start one if it is the same command with the same
environment (:func:`~sidecar.early.adopt`). Anything else (a setting with a problem,
``--help``, another command, a codex resolved differently) ends the early
child before the sidecar exits or starts its own (:func:`~sidecar.early.discard`, as gently
as the relay ends codex): what the user sees is unchanged, and no child is
left behind.

Nothing here may import more than the standard library's cheapest modules
(``tests/cli/test_launch.py`` checks what this module imports).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from .child import forward_signals_to, start_process
from .early import ACTIVE_ENV, EarlyChild, child_env, discard, is_self, keep, serves_app_server

TYPE_CHECKING = False  # typing costs ~3 ms before codex is spawned: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

VALUE_SETTINGS = frozenset(
    {
        "codex_bin",
        "log_format",
        "log_level",
        "record",
        "max_line_bytes",
        "eof_grace",
        "kill_grace",
        "busy_poll_us",
        "engine",
        "engine_allowlist",
        "state_dir",
        "engine_deadline",
        "token_budget",
        "token_reserve",
        "citations_mode",
        "session_key",
        "stale_slack",
        "projection_mode",
        "rebuild",
    }
)
"""The settings whose flag takes a value (``--name VALUE``, ``--name=VALUE``).
Kept equal to :data:`sidecar.config.SETTINGS` by a test: importing that module
costs click."""
BOOL_SETTINGS = frozenset({"record_redact"})
"""The settings whose flag is ``--name`` / ``--no-name``."""
SUBCOMMANDS = ("proxy", "version", "engines", "inspect", "doctor", "view", "_codex")
"""The CLI's commands: a first word that is none of them starts codex's argv."""


# ----------------------------------------------------------- the prediction


def _leading_options(args: list[str]) -> tuple[dict[str, Any], int] | None:
    """The sidecar's own options before the command (name -> raw value, the
    last one given, as click keeps it) and the index of the first token after
    them; None when a token is not one this module understands for sure
    (``--help``, ``--version``, a typo): the CLI decides then."""
    given: dict[str, Any] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.startswith("--") or tok == "--" or tok == "--config" or tok.startswith("--config="):
            break  # the command, or codex's own `--config`
        name, eq, value = tok[2:].partition("=")
        key = name.replace("-", "_")
        if key == "config_file" or key in VALUE_SETTINGS:
            if not eq:
                if i + 1 >= len(args):
                    return None
                i += 1
                value = args[i]
            given[key] = value
        elif key in BOOL_SETTINGS or (key.startswith("no_") and key[3:] in BOOL_SETTINGS):
            if eq:
                return None
            given[key.removeprefix("no_")] = not key.startswith("no_")
        else:
            return None
        i += 1
    return given, i


def _config_table(given: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The config file's table as the CLI will read it (``{}``: no file);
    None when the CLI would stop on it (missing, unreadable, unknown keys)."""
    explicit = given.get("config_file") or environ.get("CODEX_SIDECAR_CONFIG") or None
    if explicit is not None:
        path = explicit
    else:
        base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = os.path.join(base, "codex-sidecar", "config.toml")
        if not os.path.exists(path):
            return {}
    import tomllib  # only when there is a file

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError):
        return None
    if set(data) - VALUE_SETTINGS - BOOL_SETTINGS - {"engines"}:
        return None
    return data


def _codex_path(configured: str | None, environ: Mapping[str, str]) -> str | None:
    """What :func:`sidecar.config.resolve_codex_bin` resolves, or None where it raises."""
    if configured:
        if os.sep in configured:
            path = configured  # what shutil.which(...) or configured gives a path; shutil costs ~2 ms here
        else:
            import shutil

            path = shutil.which(configured) or configured
        return path if os.path.exists(path) and not is_self(path) else None
    for directory in environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "codex")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK) and not is_self(candidate):
            return candidate
    return None


class SessionPlan:
    """A session this module is sure of: the child's argv, the sidecar
    options given before the command (name -> raw value, as click would pass
    them), and whether it is the drop-in (codex's argv) or ``proxy``."""

    __slots__ = ("argv", "drop_in", "given", "resolved")

    def __init__(self, argv: list[str], given: dict[str, Any], drop_in: bool) -> None:
        self.argv, self.given, self.drop_in = argv, given, drop_in
        self.resolved: Any = None
        """The settings, when they were resolved before the spawn (:func:`start_early`)."""


SETTING_VARIABLES = frozenset("CODEX_SIDECAR_" + name.upper() for name in VALUE_SETTINGS | BOOL_SETTINGS) - {"CODEX_SIDECAR_CODEX_BIN"}
"""The variables that set a setting whose value can be wrong (``codex_bin``
is checked by :func:`_codex_path`, and by the spawn itself)."""


def settings_could_fail(given: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether any setting is given at all (a flag, a variable, a config
    file): only then can resolving them fail, and they are resolved before
    codex is spawned, so that a bad value stops the sidecar before codex
    prints a line (the error is the last thing the user sees)."""
    if any(k != "codex_bin" for k in given):
        return True
    if "CODEX_SIDECAR_CONFIG" in environ or not SETTING_VARIABLES.isdisjoint(environ):
        return True
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.exists(os.path.join(base, "codex-sidecar", "config.toml"))


def predict_child(args: list[str], environ: Mapping[str, str]) -> list[str] | None:
    """The argv of the child the CLI will relay for ``args``, when this is
    sure of it; None otherwise (another command, help, anything the CLI may
    reject or resolve differently). A wrong guess costs a child started and
    ended for nothing, never a different behaviour: :func:`adopt` compares."""
    plan = plan_session(args, environ)
    return None if plan is None else plan.argv


def plan_session(args: list[str], environ: Mapping[str, str]) -> SessionPlan | None:
    """:func:`predict_child`, with what the session needs to run without click."""
    lead = _leading_options(args)
    if lead is None:
        return None
    given, i = lead
    rest = args[i:]
    if not rest:
        return None
    head = rest[0]
    if head == "proxy":
        command = rest[1:]
        if command[:1] == ["--"]:
            command = command[1:]
        elif any(t.startswith("-") for t in command):
            return None  # options of `proxy` itself, or unknown ones click may take: the CLI decides
        if not command:
            return None
        # The config file is checked before the spawn, with every other
        # setting given (start_early: a problem, and no child is started).
        return SessionPlan(command, given, drop_in=False)
    if head.startswith("-") and not (head in ("-c", "--config") or head.startswith("--config=")):
        return None
    if head in SUBCOMMANDS or not serves_app_server(rest):
        return None
    configured: Any = given.get("codex_bin") or environ.get("CODEX_SIDECAR_CODEX_BIN")
    if not configured:  # only then may the config file name it (read before the spawn: ~3 ms)
        data = _config_table(given, environ)
        if data is None:
            return None
        configured = data.get("codex_bin")
    if configured is not None and not isinstance(configured, str):
        return None
    if environ.get(ACTIVE_ENV) and not configured:
        return None  # `codex` on PATH may be another sidecar: the CLI refuses
    codex = _codex_path(configured or None, environ)
    return None if codex is None else SessionPlan([codex, *rest], given, drop_in=True)


# ---------------------------------------------------------- the early child


def start_early(args: list[str], start: Callable[[list[str], dict[str, str]], subprocess.Popen[bytes]] = start_process) -> EarlyChild | None:
    """Start the child :func:`plan_session` names, if it names one; it is
    then passed :data:`~sidecar.child.FORWARDED_SIGNALS` until adopted or
    discarded. A child that cannot be started is left to the CLI, which
    tries again and says why."""
    plan = plan_session(args, os.environ)
    if plan is None:
        return None
    if settings_could_fail(plan.given, os.environ):
        from .config import resolve_given  # stdlib only (~2 ms): serve's imports wait for the spawn

        plan.resolved = resolve_given(plan.given, os.environ)
        if plan.resolved.problems:
            return None  # no codex: the CLI says what is wrong, and its words are the last
    argv = plan.argv
    env = child_env()
    try:
        popen = start(argv, env)
    except OSError:
        return None
    return keep(EarlyChild(popen, argv, env, forward_signals_to(popen), plan))


def main(argv: list[str] | None = None) -> None:
    """``codex-sidecar``: the child started early when it can be, then the CLI."""
    # No collection during start-up: it only walks the modules being
    # imported (~7% of the CPU before the first answer). A session turns it
    # back on once its start-up heap is frozen (cli.freeze_startup_heap),
    # any other command at once.
    gc.disable()
    args = list(sys.argv[1:] if argv is None else argv)
    early = start_early(args)
    try:
        if early is not None and early.plan is not None:
            # Sure of the command: the session runs without click when every
            # setting is good (sidecar.serve); else the CLI says what is not.
            status = _serve_without_click(early.plan)
            if status is not None:
                sys.exit(status)
            # The CLI stops here (a problem the check before the spawn did
            # not see): the child ends first, so the CLI's error is the last line.
            discard()
        from .cli import main as cli_main

        cli_main(args)
    except Exception as exc:  # noqa: BLE001 - a failure nothing above put into words: one line, not a traceback
        discard()
        sys.exit(_one_line(exc))
    finally:
        discard()
        gc.enable()


def _one_line(exc: BaseException) -> int:
    """Say ``exc`` on one line of stderr (its traceback only at the debug
    log level, for a bug report); the exit status 1."""
    if (os.environ.get("CODEX_SIDECAR_LOG_LEVEL") or "").lower() == "debug":
        import traceback

        traceback.print_exception(exc)
    where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in str(exc) else ""
    print(f"codex-sidecar: error: {type(exc).__name__}: {exc}{where} (CODEX_SIDECAR_LOG_LEVEL=debug prints the traceback)", file=sys.stderr)
    return 1


def _serve_without_click(plan: SessionPlan) -> int | None:
    """The session's exit status, or None when the CLI must run it (a
    setting with a problem, which it reports). An error once the session
    started shows as click shows it."""
    from .serve import serve_planned

    try:
        return serve_planned(plan.argv, plan.given, plan.drop_in, plan.resolved)
    except Exception as exc:
        import click

        if not isinstance(exc, click.ClickException):
            raise
        exc.show()
        return exc.exit_code
