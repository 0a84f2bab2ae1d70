"""Command line: a drop-in for ``codex``, plus the sidecar's own commands.

OpenClaw launches its configured app-server command with codex's own argv,
``-c key=value`` overrides first: ``[-c k=v]... app-server --listen stdio://``.
``main`` recognises that shape before click parses anything and hands those
tokens to the real codex exactly as they came. Sidecar options may precede
them; everything else about the sidecar comes from ``CODEX_SIDECAR_*`` and
the config file, since OpenClaw's argv belongs to codex.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
from typing import Any

import click

from .child import forward_signals_to, start_process
from .config import ACTIVE_ENV, SETTINGS, ConfigError, default_state_dir, load_config_file, resolve_codex_bin
from .logs import setup_logging

log = logging.getLogger("codex_sidecar.cli")

SUBCOMMANDS = ("proxy", "version", "engines", "inspect", "doctor")
_DROP_IN = "_codex"


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    ctx.meta["config_file"] = value
    try:
        data = load_config_file(value)
    except ConfigError as exc:
        # `doctor` reports a broken file among its findings; everything else stops here.
        ctx.meta["config_error"] = exc
        data = {}
    ctx.default_map = {**(ctx.default_map or {}), **{k: v for k, v in data.items() if k != "engines"}}
    ctx.meta["engines_config"] = data.get("engines", {})
    return value


def _print_version(ctx: click.Context, value: bool) -> None:
    """``--version``, as click's version option prints it; the version is
    read only then (``importlib.metadata`` is not on the start-up path)."""
    if not value or ctx.resilient_parsing:
        return
    from . import __version__

    click.echo(f"codex-sidecar, version {__version__}")
    ctx.exit()


def _setting_options(fn: Any) -> Any:
    for s in reversed(SETTINGS):
        if s.type is bool:
            opt = click.option(
                f"{s.flag}/--no-{s.flag[2:]}",
                s.name,
                default=s.default,
                envvar=s.envvar,
                show_envvar=True,
                show_default=True,
                help=s.help,
            )
        else:
            opt = click.option(
                s.flag,
                s.name,
                type=s.type,
                default=s.default,
                envvar=s.envvar,
                show_envvar=True,
                show_default=s.default is not None,
                metavar=s.metavar,
                help=s.help,
            )
        fn = opt(fn)
    return fn


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    invoke_without_command=False,
)
@click.option(
    "--config-file",
    type=click.Path(dir_okay=False),
    envvar="CODEX_SIDECAR_CONFIG",
    show_envvar=True,
    is_eager=True,
    expose_value=False,
    callback=_load_config,
    help="TOML config file (default: $XDG_CONFIG_HOME/codex-sidecar/config.toml, if it exists).",
)
@_setting_options
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda ctx, _p, v: _print_version(ctx, v), help="Show the version and exit.")
@click.pass_context
def cli(ctx: click.Context, **settings: Any) -> None:
    """Sits in place of `codex app-server` and relays its JSON-RPC both ways.

    \b
    Drop-in (what OpenClaw runs):
      codex-sidecar [OPTIONS] [-c key=value]... app-server --listen stdio:// [ARGS]...
    The real codex is spawned with exactly the arguments after the sidecar's
    own options. Any other child:
      codex-sidecar [OPTIONS] proxy -- COMMAND [ARGS]...

    Settings come from flags, then CODEX_SIDECAR_* variables, then the config
    file. Logs go to stderr; stdout carries protocol frames only.
    """
    # click reads an empty variable as unset; an allowlist set to nothing
    # means "only the built-ins", as the empty flag does, not "trust all".
    if os.environ.get("CODEX_SIDECAR_ENGINE_ALLOWLIST") == "" and ctx.get_parameter_source("engine_allowlist") is not click.core.ParameterSource.COMMANDLINE:
        settings["engine_allowlist"] = ()
    ctx.obj = settings
    if ctx.meta.get("config_error") is not None and ctx.invoked_subcommand != "doctor":
        raise ctx.meta["config_error"]


@cli.command("proxy", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def proxy_cmd(ctx: click.Context, command: tuple[str, ...]) -> None:
    """Relay for any child command (e.g. a test double of the app-server)."""
    sys.exit(_serve(ctx.obj, list(command), ctx.meta.get("engines_config", {})))


@cli.command(_DROP_IN, hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("codex_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def drop_in_cmd(ctx: click.Context, codex_args: tuple[str, ...]) -> None:
    settings = ctx.obj
    if os.environ.get(ACTIVE_ENV) and not settings.get("codex_bin"):
        raise ConfigError(
            f"started by another codex-sidecar (pid {os.environ[ACTIVE_ENV]}), so `codex` on PATH "
            "leads back to the sidecar; set --codex-bin or CODEX_SIDECAR_CODEX_BIN to the real codex"
        )
    codex = resolve_codex_bin(settings.get("codex_bin"))
    sys.exit(_serve(settings, [codex, *codex_args], ctx.meta.get("engines_config", {})))


@cli.group("engines", invoke_without_command=True)
@click.pass_context
def engines_cmd(ctx: click.Context) -> None:
    """List the context engines installed, where they come from, and which is selected.

    \b
    Per-engine views:
      codex-sidecar engines lossless status [THREAD] [--json]
    """
    if ctx.invoked_subcommand is not None:
        return
    from engines import list_engines

    settings = ctx.obj
    allow = settings.get("engine_allowlist")
    rows = list_engines()
    for e in rows:
        trusted = e.builtin or allow is None or _normalise(e.distribution) in {_normalise(a) for a in allow}
        mark = "*" if e.id == settings["engine"] else " "
        click.echo(f"{mark} {e.id:<24} {e.distribution or '-'} {e.version or '-':<10} {e.value}{'' if trusted else '  (not in allowlist)'}")
    if not any(e.id == settings["engine"] for e in rows):
        click.echo(f"selected engine {settings['engine']!r} is not installed; the sidecar would run legacy", err=True)


@engines_cmd.group("lossless")
def lossless_cmd() -> None:
    """The built-in lossless engine's store."""


@lossless_cmd.command("status")
@click.argument("thread", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a session instead of a table.")
@click.pass_context
def lossless_status_cmd(ctx: click.Context, thread: str | None, as_json: bool) -> None:
    """Per session (THREAD: that one only): stored messages and tokens,
    summaries per depth, extractive summaries pending, the last compaction
    and what the last assembly held.

    Reads the engine's store under the state directory (read-only), so it
    works while the sidecar runs or after.
    """
    from .store.lossless_view import StoreMissing, lossless_rows, render_lossless

    settings = ctx.obj
    state_dir = settings.get("state_dir") or str(default_state_dir())
    try:
        rows = lossless_rows(state_dir, thread)
    except StoreMissing as exc:
        raise click.ClickException(str(exc)) from None
    if not rows:
        raise click.ClickException(f"the lossless store under {state_dir} holds no session{' ' + thread if thread else ''}")
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True))
        return
    for line in render_lossless(rows):
        click.echo(line)


def _normalise(name: str | None) -> str:
    return (name or "").lower().replace("_", "-").replace(".", "-")


@cli.command("inspect")
@click.argument("thread")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a turn instead of a table.")
@click.pass_context
def inspect_cmd(ctx: click.Context, thread: str, as_json: bool) -> None:
    """Per turn of THREAD: what the engine assembled, how it was projected, sizes.

    Reads the state directory, so it works while the sidecar runs or after.
    """
    from .store.inspect import InspectLog, inspect_path

    settings = ctx.obj
    state_dir = settings.get("state_dir") or str(default_state_dir())
    try:
        records = InspectLog(inspect_path(state_dir, thread)).records()
    except ValueError:
        raise click.ClickException("not a thread id") from None
    if not records:
        raise click.ClickException(f"no turns recorded for {thread} under {state_dir}")
    if as_json:
        for r in records:
            click.echo(json.dumps(r, sort_keys=True))
        return
    click.echo(
        f"{'#':>3} {'status':<11} {'mode':<9} {'epoch':<10} {'assembled':>9} {'est.tok':>8} {'channels':<44} "
        f"{'input chars':>18} {'codex in tok':>12} {'hold ms':>8} {'rebuild':<12}"
    )
    for n, r in enumerate(records, 1):
        a, inj, size = r.get("assembled") or {}, r.get("injected") or {}, r.get("turnInputChars") or {}
        channels = ",".join(inj.get("channels") or []) or (f"none ({r['fallback']})" if r.get("fallback") else "none")
        click.echo(
            f"{n:>3} {str(r.get('status')):<11} {str(r.get('mode')):<9} {str(r.get('epoch') or '-'):<10} "
            f"{str(a.get('count')):>9} {str(a.get('estimatedTokens')):>8} {channels:<44} "
            f"{size.get('original', 0):>8} -> {size.get('sent', 0):<7} {str(r.get('codexInputTokens')):>12} "
            f"{_ms(r.get('holdMs')):>8} {_rebuild_cell(r):<12}".rstrip()
        )


def _ms(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def _rebuild_cell(record: dict[str, Any]) -> str:
    """``revert 52 ms`` for a turn that rebuilt the thread's history."""
    if not record.get("rebuilt"):
        return "-"
    revert = record.get("revertMs")
    return f"revert {revert:.0f} ms" if isinstance(revert, (int, float)) else "yes"


@cli.command("doctor")
@click.pass_context
def doctor_cmd(ctx: click.Context) -> None:
    """Check codex, the state dir, the engine, the tokenizer and the config
    file; print the OpenClaw config for what was found. Exits 1 on a problem."""
    from .doctor import openclaw_snippet, run_checks, sidecar_executable

    settings = ctx.obj
    state_dir = settings.get("state_dir") or str(default_state_dir())
    findings, codex = run_checks(settings, ctx.meta.get("engines_config", {}), ctx.meta.get("config_file"), state_dir)
    for f in findings:
        click.echo(f"{'ok  ' if f.ok else 'FAIL'} {f.check:<12} {f.message}")
    click.echo("")
    click.echo(openclaw_snippet(sidecar_executable(), codex, settings.get("engine") or "legacy", state_dir))
    problems = sum(not f.ok for f in findings)
    if problems:
        click.echo(f"\n{problems} problem(s) found", err=True)
        ctx.exit(1)


@cli.command("version")
def version_cmd() -> None:
    """Print the sidecar's version."""
    from . import __version__

    click.echo(f"codex-sidecar {__version__}")


def _claim_stdout() -> int:
    """Keep stdout for protocol frames: return a private descriptor of it and
    point fd 1 (and ``sys.stdout``) at stderr, so a ``print`` in an engine or
    a library lands in the log instead of in the client's JSON-RPC stream."""
    sys.stdout.flush()
    protocol = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def _serve(settings: dict[str, Any], argv: list[str], engines_config: dict[str, Any]) -> int:
    protocol_out = _claim_stdout()
    setup_logging(settings["log_format"], settings["log_level"])
    env = dict(os.environ)
    env[ACTIVE_ENV] = str(os.getpid())
    # Codex takes ~0.2 s to start: start it first, and import the rest of
    # the sidecar and load the engine while it does.
    try:
        popen = start_process(argv, env)
    except FileNotFoundError:
        log.error("cannot start child: not found", extra={"fields": {"command": argv[0]}})
        return 127
    except PermissionError:
        log.error("cannot start child: permission denied", extra={"fields": {"command": argv[0]}})
        return 126
    previous = forward_signals_to(popen)
    try:
        return _serve_started(settings, argv, env, engines_config, protocol_out, popen)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if popen.poll() is None:
            # Only when the sidecar gave up before relaying (e.g. a recording
            # it cannot open); a relay that ran has seen codex exit.
            popen.kill()
            popen.wait()


def _serve_started(
    settings: dict[str, Any], argv: list[str], env: dict[str, str], engines_config: dict[str, Any], protocol_out: int, popen: Any
) -> int:
    import trio

    from .child import Child
    from .record import Recorder
    from .relay import Proxy, ProxyOptions
    from .session.options import LifecycleOptions

    recorder = None
    if settings.get("record"):
        try:
            recorder = Recorder(settings["record"], redact=settings["record_redact"])
        except OSError as exc:
            raise click.ClickException(f"cannot open recording {settings['record']}: {exc.strerror}") from None
    options = ProxyOptions(
        max_line=settings["max_line_bytes"],
        eof_grace=settings["eof_grace"],
        kill_grace=settings["kill_grace"],
        busy_poll=settings["busy_poll_us"] / 1e6,
    )
    state_dir = settings.get("state_dir") or str(default_state_dir())
    lifecycle_options = LifecycleOptions(
        engine_deadline=settings["engine_deadline"],
        token_budget=settings.get("token_budget"),
        session_key_template=settings["session_key"],
        projection_mode=settings["projection_mode"],
        stale_slack=settings["stale_slack"],
        rebuild=settings["rebuild"],
    )

    async def serve() -> int:
        # FdStreams belong to the trio run that uses them: make them inside it.
        proxy = Proxy(
            argv,
            client_in=trio.lowlevel.FdStream(os.dup(0)),
            client_out=trio.lowlevel.FdStream(protocol_out),
            env=env,
            options=options,
            recorder=recorder,
            child=Child(popen),
        )
        # The relay runs at once and passes the client's initialize: the
        # lifecycle is imported and the engine loaded (off the event loop)
        # while codex starts. Everything else the client sends waits until
        # the engine is bound and the lifecycle's hooks are in.
        proxy.hold_client()
        lifecycle: Any = None

        async def set_up() -> None:
            nonlocal lifecycle
            try:
                engine, lifecycle_cls = await trio.to_thread.run_sync(_load_lifecycle, settings, engines_config, abandon_on_cancel=True)
                # The engine's host, bound before the client's held lines go on;
                # an engine whose bind fails runs as legacy.
                bound, host = await _bind(engine, state_dir, lifecycle_options.engine_deadline)
                # With no engine (legacy, or one that failed to load or bind) the
                # lifecycle keeps only the history earlier rebuilds moved: the thread stays whole.
                lifecycle = lifecycle_cls(proxy, bound, state_dir, lifecycle_options, host=host)
                lifecycle.install(proxy.hooks)
            finally:
                proxy.release_client()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(set_up)
            try:
                return await proxy.run()
            finally:
                nursery.cancel_scope.cancel()
                if lifecycle is not None:
                    with trio.CancelScope(shield=True):
                        await lifecycle.dispose()

    try:
        return trio.run(serve)
    finally:
        if recorder is not None:
            recorder.close()


def _load_lifecycle(settings: dict[str, Any], engines_config: dict[str, Any]) -> tuple[Any, Any]:
    """In a worker thread while the relay runs: the lifecycle's modules and
    the engine (None for legacy), then the start-up heap frozen."""
    from .lifecycle import Lifecycle

    if settings.get("record"):
        from .scrub import load

        load()  # the secret scanner's rules (~0.4 s), here rather than on a frame's path
    engine = _load_engine(settings, engines_config)
    freeze_startup_heap()
    return engine, Lifecycle


async def _bind(engine: Any, state_dir: str, deadline: float) -> tuple[Any, Any]:
    """(the engine, its host) once bound; (None, None) when there is no
    engine or it could not be bound (logged: the sidecar runs legacy)."""
    if engine is None:
        return None, None
    from .host import SidecarHost, bind_engine, engine_state_dir

    try:
        folder = engine_state_dir(state_dir, engine.info.id)
    except OSError as exc:
        log.error("engine state folder unusable; running legacy", extra={"fields": {"engineId": engine.info.id, "error": type(exc).__name__}})
        return None, None
    host = SidecarHost(str(folder))
    if not await bind_engine(engine, host, deadline):
        return None, None
    return engine, host


def freeze_startup_heap() -> int:
    """Move what start-up built out of the collector's way; the number frozen.

    Modules, the engine and whatever it loaded live as long as the process.
    Left in the oldest generation, each full collection walks all of them, and
    one comes some turns in, in the middle of a turn: 23-32 ms with the bench
    engines on the benchmark machine, ~1 ms after this.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _load_engine(settings: dict[str, Any], engines_config: dict[str, Any]) -> Any:
    """The selected engine, or None for legacy (the lifecycle does not run).

    An engine that fails to load leaves the sidecar running as legacy, loudly.
    """
    from engines import is_legacy, load_engine_or_legacy

    engine_id = settings["engine"]
    allow = settings.get("engine_allowlist")
    engine = load_engine_or_legacy(engine_id, engines_config.get(engine_id, {}), allowlist=allow)
    if is_legacy(engine):
        return None
    log.info("context engine loaded", extra={"fields": {"engineId": engine.info.id, "version": engine.info.version}})
    return engine


def split_drop_in(args: list[str]) -> list[str]:
    """Rewrite a drop-in argv into click's form, leaving codex's tokens intact.

    Leading sidecar options are kept for click; from the first token that is
    not one of them, if that token is codex's (``-c``/``--config``, or a word
    that is not a sidecar command), everything is passed to codex as is.
    """
    takes_value = {"--config-file"} | {s.flag for s in SETTINGS if s.type is not bool}
    flags = {f for s in SETTINGS if s.type is bool for f in (s.flag, "--no-" + s.flag[2:])}
    i = 0
    while i < len(args):
        tok = args[i]
        name = tok.split("=", 1)[0]
        if name in takes_value:
            i += 1 if "=" in tok else 2
        elif tok in flags:
            i += 1
        else:
            break
    rest = args[i:]
    if not rest:
        return args
    head = rest[0]
    is_codex = (
        head in ("-c", "--config")
        or head.startswith("--config=")
        or (not head.startswith("-") and head not in SUBCOMMANDS and head != _DROP_IN)
    )
    if is_codex:
        return [*args[:i], _DROP_IN, "--", *rest]
    return args


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    cli.main(split_drop_in(args), prog_name="codex-sidecar")


if __name__ == "__main__":
    main()
