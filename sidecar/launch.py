"""The console entry point: the child started before the sidecar's imports.

OpenClaw starts one app-server per turn and waits for its ``initialize``
answer, so whatever the sidecar spends before codex can answer adds to every
turn. Its own start-up (the settings, trio, the relay: ~0.12 s of CPU) can
overlap codex's (~0.1-0.2 s) only if codex is already running.

:func:`main` works out, from the argv, the environment and the config file
and with the standard library only (no click, no trio), which child a
session would run (:func:`plan_session`); when it can tell for sure, it
starts that child at once and passes it signals as the CLI would
(:func:`~sidecar.child.forward_signals_to`). Then the session runs without
click (:func:`sidecar.serve.serve_planned`: the settings resolved as the CLI
resolves them) if every setting is good; otherwise, and for every other
command, the click CLI runs as it always did. Either takes the early child
where it would start one if it is the same command with the same
environment (:func:`adopt`). Anything else (a setting with a problem,
``--help``, another command, a codex resolved differently) ends the early
child before the sidecar exits or starts its own (:func:`discard`, as gently
as the relay ends codex): what the user sees is unchanged, and no child is
left behind.

Nothing here may import more than the standard library's cheapest modules
(``tests/cli/test_launch.py`` checks what this module imports).
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .child import forward_signals_to, start_process

ACTIVE_ENV = "CODEX_SIDECAR_ACTIVE"
"""Set in the child's environment, so a sidecar that would spawn itself can tell
(:data:`sidecar.config.ACTIVE_ENV` is this)."""

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
SUBCOMMANDS = ("proxy", "version", "engines", "inspect", "doctor", "_codex")
"""The CLI's commands: a first word that is none of them starts codex's argv."""

NOT_A_SESSION = frozenset({"-h", "--help", "-V", "--version", "help", "daemon", "generate-ts", "generate-json-schema", "--print-startup-config"})
"""Words after ``app-server`` (codex 0.169.0's ``app-server --help``) that
print something and exit instead of speaking JSON-RPC on stdio."""


def serves_app_server(codex_args: tuple[str, ...] | list[str]) -> bool:
    """Whether codex's argv starts an app-server session (to relay), rather
    than asking for help or a version, generating bindings, managing the
    daemon, or running another codex command."""
    args = list(codex_args)
    if "--" in args:
        args = args[: args.index("--")]
    if any(a in ("-h", "--help", "-V", "--version") for a in args) or "app-server" not in args:
        return False
    return not any(a in NOT_A_SESSION for a in args[args.index("app-server") + 1 :])


def is_self(path: str) -> bool:
    """True for this program or a console script that launches it."""
    real = os.path.realpath(path)
    if sys.argv and sys.argv[0] and real == os.path.realpath(sys.argv[0]):
        return True
    try:
        with open(real, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and (b"sidecar.cli" in head or b"sidecar.launch" in head)


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

    __slots__ = ("argv", "drop_in", "given")

    def __init__(self, argv: list[str], given: dict[str, Any], drop_in: bool) -> None:
        self.argv, self.given, self.drop_in = argv, given, drop_in


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
        # The config file is checked after the spawn, by the settings'
        # resolution (a problem: the CLI reports it, the child is ended).
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


class EarlyChild:
    """A child started before the CLI ran: what runs, with which environment,
    and the signal handlers :func:`~sidecar.child.forward_signals_to` replaced.
    (A plain class: ``dataclasses`` costs ~8 ms of imports before the spawn.)"""

    __slots__ = ("argv", "env", "handlers", "plan", "popen")

    def __init__(self, popen: subprocess.Popen[bytes], argv: list[str], env: dict[str, str], handlers: dict[int, Any], plan: SessionPlan | None = None) -> None:
        self.popen = popen
        self.argv = argv
        self.env = env
        self.handlers = handlers
        self.plan = plan


_early: EarlyChild | None = None


def child_env() -> dict[str, str]:
    """The child's environment: the sidecar's, marked as started by a sidecar."""
    env = dict(os.environ)
    env[ACTIVE_ENV] = str(os.getpid())
    return env


def start_early(args: list[str], start: Callable[[list[str], dict[str, str]], subprocess.Popen[bytes]] = start_process) -> EarlyChild | None:
    """Start the child :func:`plan_session` names, if it names one; it is
    then passed :data:`~sidecar.child.FORWARDED_SIGNALS` until adopted or
    discarded. A child that cannot be started is left to the CLI, which
    tries again and says why."""
    global _early
    plan = plan_session(args, os.environ)
    if plan is None:
        return None
    argv = plan.argv
    env = child_env()
    try:
        popen = start(argv, env)
    except OSError:
        return None
    _early = EarlyChild(popen, argv, env, forward_signals_to(popen), plan)
    return _early


def adopt(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], dict[int, Any]] | None:
    """The early child and the handlers to restore once it is done, if it
    runs exactly ``argv`` with ``env``; else None, and any early child is
    ended first."""
    global _early
    early = _early
    if early is None:
        return None
    if early.argv == argv and early.env == env:
        _early = None
        return early.popen, early.handlers
    discard()
    return None


EOF_GRACE = 2.0
"""Seconds a discarded child gets to exit on its own after its stdin closes
(the relay's default ``eof_grace``: the settings may be what is wrong)."""
TERM_GRACE = 3.0
"""Then seconds between SIGTERM and SIGKILL (the relay's default ``kill_grace``)."""


def discard() -> None:
    """End the early child the CLI did not take as the relay ends codex when
    its client leaves: stdin closed, then SIGTERM after :data:`EOF_GRACE`,
    SIGKILL after :data:`TERM_GRACE` more; then the signal handlers are put
    back. Codex exits on its own at stdin EOF once started (~1 s): no signal
    cuts short the login shell it may be snapshotting (a pyenv rehash lock
    left behind stalls every later codex; docs/testing.md)."""
    global _early
    early, _early = _early, None
    if early is None:
        return
    popen = early.popen
    try:
        if popen.stdin is not None:
            popen.stdin.close()
        for sig, grace in ((None, EOF_GRACE), (signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, None)):
            if popen.poll() is not None:
                break
            if sig is not None:
                popen.send_signal(sig)
            try:
                popen.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        if popen.stdout is not None:
            popen.stdout.close()
    finally:
        for signum, handler in early.handlers.items():
            signal.signal(signum, handler)


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
        from .cli import main as cli_main

        cli_main(args)
    finally:
        discard()
        gc.enable()


def _serve_without_click(plan: SessionPlan) -> int | None:
    """The session's exit status, or None when the CLI must run it (a
    setting with a problem, which it reports). An error once the session
    started shows as click shows it."""
    from .serve import serve_planned

    try:
        return serve_planned(plan.argv, plan.given, plan.drop_in)
    except Exception as exc:
        import click

        if not isinstance(exc, click.ClickException):
            raise
        exc.show()
        return exc.exit_code
