"""A session: the relay first, then the lifecycle and the engine.

What ``proxy`` and the drop-in ``app-server`` run once the settings are
resolved, from the CLI (click) or straight from the entry point
(:func:`sidecar.launch.main`, which skips click when it is sure of the
command and every setting is good). Imports nothing of click: a session's
start-up is paid on every OpenClaw turn.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .child import forward_signals_to, start_process
from .config import ACTIVE_ENV, DEFAULT, Origin, Resolved, default_state_dir, did_you_mean, resolve_codex_bin, resolve_given
from .early import adopt, child_env
from .logs import setup_logging

log = logging.getLogger("codex_sidecar.cli")


def serve_planned(argv: list[str], given: dict[str, Any], drop_in: bool, resolved: Resolved | None = None) -> int | None:
    """Run the session :func:`sidecar.launch.plan_session` planned, with the
    settings resolved as the CLI resolves them (``resolved``: already, by
    :func:`resolve_planned`); None (nothing done) when anything would make
    the CLI stop or warn: it runs then, and says so.

    ``given``: the sidecar's options from the command line (name -> raw
    value; ``config_file`` included), as click passes them.
    """
    if resolved is None:
        resolved = resolve_planned(given)
    if resolved.problems:
        return None
    if not drop_in:
        return _serve(resolved, argv, "the proxy command")
    settings, origin = resolved.values, resolved.origins["codex_bin"]
    if os.environ.get(ACTIVE_ENV) and not settings.get("codex_bin"):
        return None
    try:
        codex = resolve_codex_bin(settings.get("codex_bin"), origin)
    except Exception:  # ConfigError: the CLI reports it
        return None
    if codex != argv[0]:
        return None
    return _serve(resolved, argv, "codex on PATH" if origin.kind == "default" else str(origin))


def resolve_planned(given: dict[str, Any]) -> Resolved:
    """The settings for ``given`` (the command line's, ``config_file``
    included), the variables and the config file, as the CLI resolves them."""
    return resolve_given(given, os.environ)


def _claim_stdout() -> int:
    """Keep stdout for protocol frames: return a private descriptor of it and
    point fd 1 (and ``sys.stdout``) at stderr, so a ``print`` in an engine or
    a library lands in the log instead of in the client's JSON-RPC stream."""
    sys.stdout.flush()
    protocol = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def _serve(resolved: Resolved, argv: list[str], child_from: str) -> int:
    """Relay ``argv``'s child; ``child_from`` says where its path came from."""
    settings = resolved.values
    protocol_out = _claim_stdout()
    setup_logging(settings["log_format"], settings["log_level"])
    env = child_env()
    # Codex takes ~0.2 s to start: the entry point started it before the
    # sidecar's imports if it could tell which child this is (sidecar.launch);
    # else it starts now, and the rest of the sidecar is imported and the
    # engine loaded while it does.
    early = adopt(argv, env)
    if early is not None:
        popen, previous = early
    else:
        try:
            popen = start_process(argv, env)
        except OSError as exc:
            log.error(start_failure(argv[0], exc), extra={"fields": {"command": argv[0], "from": child_from}})
            return 127 if isinstance(exc, FileNotFoundError) else 126
        previous = forward_signals_to(popen)
    try:
        return _serve_started(resolved, argv, protocol_out, popen, child_from)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if popen.poll() is None:
            # Only when the sidecar gave up before relaying (e.g. a recording
            # it cannot open); a relay that ran has seen codex exit.
            popen.kill()
            popen.wait()


def start_failure(command: str, exc: OSError) -> str:
    """One line for a child that could not be started (``docs/errors.md``)."""
    import errno

    if isinstance(exc, FileNotFoundError):
        return "cannot start child: not found"
    if isinstance(exc, PermissionError):
        return "cannot start child: permission denied"
    if exc.errno == errno.ENOEXEC:
        return (
            f"cannot start child: {command} is not a program this machine can run "
            "(exec format error: a script without a '#!' line, or a binary for another architecture)"
        )
    return f"cannot start child: {exc.strerror or exc}"


def _serve_started(resolved: Resolved, argv: list[str], protocol_out: int, popen: Any, child_from: str) -> int:
    from .trio_import import import_trio

    trio = import_trio()

    from . import methods, rows
    from .child import Child
    from .relay import Proxy, ProxyOptions
    from .session.options import LifecycleOptions
    from .store.usable import state_dir_problem

    settings = resolved.values
    recorder = None
    if settings.get("record"):
        from .record import Recorder

        try:
            recorder = Recorder(settings["record"], redact=settings["record_redact"])
        except OSError as exc:
            import click

            raise click.ClickException(
                f"cannot open recording {settings['record']}: {exc.strerror} (set by {resolved.origins['record']}; {resolved.origins['record'].fix()})"
            ) from None
    state_dir = settings.get("state_dir") or str(default_state_dir())
    # Fail open on state too: a state dir the sidecar cannot use costs the
    # engine (and, unreadable, the history part), never the client's relay.
    # Nothing is created here: the engine's bind creates the state dir, so an
    # engine that fails to load leaves none behind.
    wanted = settings["engine"] != "legacy"
    problem = state_dir_problem(state_dir, create=False, missing_ok=not wanted)
    if problem is not None:
        log.error(
            problem.message(),
            extra={
                "fields": {
                    "path": str(problem.path),
                    "stateDir": state_dir,
                    "setting": str(resolved.origins["state_dir"]),
                    "running": "history only, no engine" if problem.readable else "pure relay",
                    "code": problem.code,
                }
            },
        )
    options = ProxyOptions(
        max_line=settings["max_line_bytes"],
        eof_grace=settings["eof_grace"],
        kill_grace=settings["kill_grace"],
        busy_poll=settings["busy_poll_us"] / 1e6,
        # An engine needs codex's experimental API and some notifications,
        # whatever the client negotiated (sidecar/relay/negotiation.py).
        engine_reads=rows.notifications_read(methods.METHODS) if wanted and problem is None else None,
    )
    lifecycle_options = LifecycleOptions(
        engine_deadline=settings["engine_deadline"],
        token_budget=settings.get("token_budget"),
        token_reserve=settings["token_reserve"],
        citations_mode=settings.get("citations_mode"),
        session_key_template=settings["session_key"],
        projection_mode=settings["projection_mode"],
        stale_slack=settings["stale_slack"],
        rebuild=settings["rebuild"],
    )
    # The history's edge (the client's threads and the Codex threads behind
    # them) is the relay's from its first line: built here, with the relay,
    # whatever engine loads later; none for a pure relay (a state dir that
    # cannot be read, or none and no engine to make one).
    edge = None
    if (problem is None or problem.readable) and (wanted or os.path.isdir(state_dir)):
        from .history.backing import BackingThreads

        # the table (every job imported) on first use; a client's thread list
        # waits at most the engine deadline for the sidecar's own thread starts
        edge = BackingThreads(state_dir, lambda: rows.thread_id_keys(methods.METHODS), list_wait=settings["engine_deadline"])
    in_effect = {**resolved.shown(), "codex_bin": {"value": argv[0], "source": child_from}, "state_dir": {"value": state_dir, "source": str(resolved.origins["state_dir"])}}

    async def serve() -> int:
        # FdStreams belong to the trio run that uses them: make them inside it.
        proxy = Proxy(
            Child(popen),
            trio.StapledStream(trio.lowlevel.FdStream(protocol_out), trio.lowlevel.FdStream(os.dup(0))),
            options=options,
            edge=edge,
            recorder=recorder,
        )
        proxy.add_status_provider("settings", lambda: in_effect)
        if problem is not None:
            proxy.add_status_provider("stateDir", lambda: {"usable": False, "path": str(problem.path), "problem": problem.message(), "code": problem.code})
        # The relay runs at once and passes the client's initialize to codex.
        # Once it is on its way (codex is still starting: start-up is paid on
        # every OpenClaw turn), the lifecycle is imported and the engine
        # loaded, off the event loop, while codex boots; it starts earlier if
        # the client sends anything else first (or ends), since that waits
        # until the engine is bound and the lifecycle's hooks are in.
        # (Waiting for codex's answer instead answers initialize ~30 ms
        # sooner but the client's next request, thread/start, ~20-35 ms
        # later: a turn would be slower, so the load overlaps codex's boot.)
        go = trio.Event()
        proxy.hold_client(on_held=go.set)

        def initialize_forwarded(_msg: Any) -> None:
            go.set()

        proxy.router.hooks.on_client_request("initialize", initialize_forwarded)
        lifecycle: Any = None

        async def set_up() -> None:
            nonlocal lifecycle
            await go.wait()
            try:
                engine, lifecycle_cls = await trio.to_thread.run_sync(
                    _load_lifecycle, resolved, problem, state_dir, argv[0], child_from, abandon_on_cancel=True
                )
                if (problem is not None and not problem.readable) or (engine is None and not os.path.isdir(state_dir)):
                    # A pure relay: the state dir cannot be read, or there is none
                    # and no engine to make one (no thread was ever rebuilt here).
                    return
                # The engine's host, bound before the client's held lines go on;
                # an engine whose bind fails runs as legacy.
                bound, host = await _bind(engine, state_dir, lifecycle_options.engine_deadline, proxy)
                # With no engine (legacy, or one that failed to load or bind) the
                # lifecycle keeps only the history earlier rebuilds moved: the thread stays whole.
                lifecycle = lifecycle_cls(proxy, bound, state_dir, lifecycle_options, host=host)
                lifecycle.install(proxy.router.hooks, methods.METHODS)
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


def _load_lifecycle(resolved: Resolved, problem: Any, state_dir: str, codex: str, codex_from: str) -> tuple[Any, Any]:
    """In a worker thread while the relay runs: the lifecycle's modules, the
    engine (None for legacy, or when the state dir is unusable), then the
    start-up heap frozen."""
    settings = resolved.values
    if problem is None and settings["engine"] != "legacy":
        # An engine counts tokens: the o200k tokenizer first, while the
        # process is at its smallest (its build needs ~68 MB on top of what
        # the process holds; see sidecar.tokenizer), then engines.tokens
        # takes it and releases the pages it no longer needs.
        from .tokenizer import build

        build()
        from engines.tokens import load_tokenizer

        load_tokenizer()
    from .lifecycle import Lifecycle

    if settings.get("record"):
        from engines.scrub import compile_rules

        compile_rules()  # the secret scanner's rules (~0.4 s), here rather than on a frame's path
    engine = _load_engine(settings, resolved.engines, resolved.origins) if problem is None else None
    if engine is not None:
        _log_loaded(engine, resolved, state_dir, codex, codex_from)
    freeze_startup_heap()
    return engine, Lifecycle


async def _bind(engine: Any, state_dir: str, deadline: float, proxy: Any) -> tuple[Any, Any]:
    """(the engine, its host) once bound; (None, None) when there is no
    engine or it could not be bound (logged: the sidecar runs legacy). The
    host is built whole: its completions run through ``proxy``, their
    threads hidden by its edge."""
    if engine is None:
        return None, None
    from .host import Completions, SidecarHost, bind_engine, engine_state_dir
    from .store.usable import _from_error

    try:
        folder = engine_state_dir(state_dir, engine.info.id)
    except OSError as exc:
        problem = _from_error(Path(exc.filename or state_dir), exc, readable=True)
        log.error(problem.message(), extra={"fields": {"engineId": engine.info.id, "path": str(problem.path), "running": "legacy", "code": problem.code}})
        return None, None
    host = SidecarHost(str(folder), Completions(proxy, proxy.router.edge, deadline))
    if not await bind_engine(engine, host, deadline):
        return None, None
    return engine, host


def freeze_startup_heap() -> int:
    """Move what start-up built out of the collector's way; the number frozen.

    Modules, the engine and whatever it loaded live as long as the process.
    Left in the oldest generation, each full collection walks all of them, and
    one comes some turns in, in the middle of a turn: 23-32 ms with the bench
    engines on the benchmark machine, ~1 ms after this.

    Nothing is collected first: start-up leaves ~2,200 unreachable objects
    (~0.5 MB: the classes attrs replaces when it adds slots, import-time
    cycles), and finding them takes ~10 ms on the path of the client's
    second request; they are frozen with the rest. (So is any cycle a
    third-party engine's factory left behind: an object in it never runs its
    finaliser, say a file it left open, which the process's exit closes.)
    """
    gc.freeze()
    gc.enable()  # the entry point turned it off for start-up (sidecar.launch)
    return gc.get_freeze_count()


def _load_engine(settings: dict[str, Any], engines_config: dict[str, Any], origins: dict[str, Origin] | None = None) -> Any:
    """The selected engine, or None for legacy (the lifecycle does not run).

    An engine that fails to load leaves the sidecar running as legacy, loudly.
    """
    from engines import is_legacy, list_engines, load_engine_or_legacy

    engine_id = settings["engine"]
    if engine_id == "legacy":
        return None  # nothing to find: the lifecycle keeps only the history
    allow = settings.get("engine_allowlist")
    engine = load_engine_or_legacy(engine_id, engines_config.get(engine_id, {}), allowlist=allow)
    if is_legacy(engine):
        installed = [e.id for e in list_engines()]
        if engine_id != "legacy" and engine_id not in installed:
            origin = (origins or {}).get("engine", DEFAULT)
            log.error(
                f"engine {engine_id!r} is not installed{did_you_mean(engine_id, installed)}",
                extra={"fields": {"setting": str(origin), "fix": origin.fix()}},
            )
        return None
    return engine


def _log_loaded(engine: Any, resolved: Resolved, state_dir: str, codex: str, codex_from: str) -> None:
    """The start-up line: the engine and the settings in effect, each with its source."""
    settings, origin = resolved.values, resolved.origins
    log.info(
        "context engine loaded",
        extra={
            "fields": {
                "engineId": engine.info.id,
                "version": engine.info.version,
                "engineFrom": str(origin["engine"]),
                "tokenBudget": settings.get("token_budget") or "model context window",
                "tokenBudgetFrom": str(origin["token_budget"]),
                "stateDir": state_dir,
                "stateDirFrom": str(origin["state_dir"]),
                "codexBin": codex,
                "codexBinFrom": codex_from,
                "projectionMode": settings["projection_mode"],
                "rebuild": settings["rebuild"],
                "configFile": str(resolved.config_file) if resolved.config_file else "none",
            }
        },
    )
