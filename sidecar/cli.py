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
import sys
from typing import Any

import click

from .config import ACTIVE_ENV, DEFAULT, SETTINGS, ConfigError, Origin, Resolved, default_state_dir, did_you_mean, resolve_codex_bin, resolve_settings
from .early import discard, serves_app_server
from .serve import _load_engine, _serve, freeze_startup_heap, start_failure

__all__ = ["_load_engine", "cli", "freeze_startup_heap", "main", "serves_app_server"]

log = logging.getLogger("codex_sidecar.cli")

SUBCOMMANDS = ("proxy", "version", "engines", "inspect", "doctor", "view")
_DROP_IN = "_codex"


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    ctx.meta["config_file"] = value
    source = ctx.get_parameter_source("config_file")
    if source is click.core.ParameterSource.COMMANDLINE:
        ctx.meta["config_origin"] = Origin("flag", "--config-file")
    elif source is click.core.ParameterSource.ENVIRONMENT:
        ctx.meta["config_origin"] = Origin("env", "CODEX_SIDECAR_CONFIG")
    else:
        ctx.meta["config_origin"] = DEFAULT
    return value


def _print_version(ctx: click.Context, value: bool) -> None:
    """``--version``, as click's version option prints it; the version is
    read only then (``importlib.metadata`` is not on the start-up path)."""
    if not value or ctx.resilient_parsing:
        return
    from . import __version__

    click.echo(f"codex-sidecar {__version__}")
    ctx.exit()


def _setting_options(fn: Any) -> Any:
    """One option a :data:`SETTINGS` row. Values are taken raw here and
    converted by :func:`resolve_settings`, with the variable and the file, so
    every source is checked alike and a bad value names its true source."""
    for s in reversed(SETTINGS):
        where = f"[env var: {s.envvar}; file key: {s.name}" + (f"; default: {s.default}]" if s.default is not None else "]")
        if s.type is bool:
            opt = click.option(f"{s.flag}/--no-{s.flag[2:]}", s.name, default=None, help=f"{s.help} {where}")
        else:
            choices = getattr(s.type, "choices", None)
            metavar = s.metavar or ("[" + "|".join(choices) + "]" if choices else None)
            opt = click.option(s.flag, s.name, type=click.UNPROCESSED, default=None, metavar=metavar or "VALUE", help=f"{s.help} {where}")
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
def cli(ctx: click.Context, **flags: Any) -> None:
    """Sits in place of `codex app-server` and relays its JSON-RPC both ways.

    \b
    Drop-in (what OpenClaw runs):
      codex-sidecar [OPTIONS] [-c key=value]... app-server --listen stdio:// [ARGS]...
    The real codex is spawned with exactly the arguments after the sidecar's
    own options. Any other child:
      codex-sidecar [OPTIONS] proxy -- COMMAND [ARGS]...

    Settings come from flags, then CODEX_SIDECAR_* variables, then the config
    file. Options may come before or after doctor, engines, inspect and
    version. Logs go to stderr; stdout carries protocol frames only.
    """
    if ctx.invoked_subcommand not in ("proxy", _DROP_IN):
        gc.enable()  # off for start-up (sidecar.launch); only a session's start-up ends in freeze_startup_heap
    given = {k: v for k, v in flags.items() if ctx.get_parameter_source(k) is click.core.ParameterSource.COMMANDLINE}
    resolved = resolve_settings(given, os.environ, ctx.meta.get("config_file"), ctx.meta.get("config_origin", DEFAULT))
    ctx.meta["resolved"] = resolved
    ctx.meta["engines_config"] = resolved.engines
    ctx.obj = resolved.values


def _settings(ctx: click.Context, needs: tuple[str, ...] | None) -> dict[str, Any]:
    """The settings, once the problems that concern this command (``needs``:
    the settings it uses; None: all of them, and a clean config file) are
    ruled out; other problems are a warning on stderr."""
    resolved: Resolved = ctx.find_root().meta["resolved"]
    stopping = resolved.problems_for(needs)
    if stopping:
        raise ConfigError("\n  ".join(p.message for p in stopping))
    for p in resolved.problems:
        click.echo(f"warning: {p.message}", err=True)
    return resolved.values


@cli.command("proxy", context_settings={"ignore_unknown_options": True})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def proxy_cmd(ctx: click.Context, command: tuple[str, ...]) -> None:
    """Relay for any child command (e.g. a test double of the app-server)."""
    _settings(ctx, None)
    sys.exit(_serve(ctx.find_root().meta["resolved"], list(command), "the proxy command"))


@cli.command(_DROP_IN, hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("codex_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def drop_in_cmd(ctx: click.Context, codex_args: tuple[str, ...]) -> None:
    _refuse_near_miss(ctx, codex_args)
    settings = _settings(ctx, None)
    resolved: Resolved = ctx.find_root().meta["resolved"]
    if os.environ.get(ACTIVE_ENV) and not settings.get("codex_bin"):
        raise ConfigError(
            f"started by another codex-sidecar (pid {os.environ[ACTIVE_ENV]}), so `codex` on PATH "
            "leads back to the sidecar; set --codex-bin or CODEX_SIDECAR_CODEX_BIN to the real codex"
        )
    codex = resolve_codex_bin(settings.get("codex_bin"), resolved.origins["codex_bin"])
    if not serves_app_server(codex_args):
        # `app-server --help`, `--version`, or another codex command: not a
        # JSON-RPC session; codex answers it itself.
        discard()
        try:
            os.execv(codex, [codex, *codex_args])
        except OSError as exc:
            raise click.ClickException(start_failure(codex, exc)) from None
    origin = resolved.origins["codex_bin"]
    sys.exit(_serve(resolved, [codex, *codex_args], "codex on PATH" if origin.kind == "default" else str(origin)))


CODEX_COMMANDS = frozenset(
    "agents exec e review login logout mcp plugin app-server remote-control completion update doctor sandbox debug "
    "apply a resume queue archive delete migrate-rollouts migrate-nfs-db unarchive fork cloud exec-server features help".split()
)
"""codex 0.169.0's own commands (``codex --help``): a word that is one goes to codex."""


def _refuse_near_miss(ctx: click.Context, codex_args: tuple[str, ...]) -> None:
    """A first word that is no codex command but a near miss of the
    sidecar's own (``docter``) is a typo, not a prompt for codex's
    interactive screen: say so and start nothing."""
    head = codex_args[0] if codex_args else ""
    if not head or head.startswith("-") or head in CODEX_COMMANDS:
        return
    root = ctx.find_root().command
    assert isinstance(root, click.Group)
    ours = [name for name in root.list_commands(ctx) if not name.startswith("_") and not getattr(root.commands.get(name), "hidden", False)]
    hint = did_you_mean(head, ours)
    if hint:
        raise click.UsageError(f"no such command {head!r}{hint}", ctx=ctx.find_root())


@cli.group("engines", invoke_without_command=True)
@click.pass_context
def engines_cmd(ctx: click.Context) -> None:
    """List the context engines installed, where they come from, and which is selected.

    \b
    Per-engine views:
      codex-sidecar engines lossless status [THREAD] [--json]
      codex-sidecar engines lossless doctor [--json]
      codex-sidecar engines lossless backup PATH
      codex-sidecar engines lossless import [PATHS]... [--dry-run]
      codex-sidecar engines lossless prune [--dry-run] [--retention-days N] [--session-max-messages N] [--json]
    """
    if ctx.invoked_subcommand is not None:
        return
    from engines import list_engines

    settings = _settings(ctx, ("engine", "engine_allowlist"))
    allow = settings.get("engine_allowlist")
    rows = list_engines()
    table: list[tuple[str, ...]] = [("", "ENGINE", "DISTRIBUTION", "VERSION", "ENTRY POINT", "")]
    builtin_ids = {e.id for e in rows if e.builtin}
    for e in rows:
        trusted = e.builtin or allow is None or _normalise(e.distribution) in {_normalise(a) for a in allow}
        mark = "*" if e.id == settings["engine"] and (e.builtin or e.id not in builtin_ids) else " "
        note = "(ignored: a built-in id)" if not e.builtin and e.id in builtin_ids else "" if trusted else "(not in allowlist)"
        table.append((mark, e.id, e.distribution or "-", e.version or "-", e.value, note))
    for line in _columns(table):
        click.echo(line)
    click.echo("(* = selected)")
    if not any(e.id == settings["engine"] for e in rows):
        hint = did_you_mean(settings["engine"], [e.id for e in rows])
        click.echo(f"selected engine {settings['engine']!r} is not installed{hint}; the sidecar would run legacy", err=True)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as left-aligned columns as wide as their widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [" ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


@engines_cmd.group("lossless")
def lossless_cmd() -> None:
    """The built-in lossless engine's store."""


@lossless_cmd.command("status")
@click.argument("thread", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object a session instead of a table.")
@click.pass_context
def lossless_status_cmd(ctx: click.Context, thread: str | None, as_json: bool) -> None:
    """Per session (THREAD: that one only): stored messages and tokens,
    summaries per depth, extractive summaries pending, the last compaction,
    what the last assembly held, the engine's own model calls (by model, and
    those refused by summary_max_calls_per_hour) and the messages it left
    out (heartbeats, cron turns, ignored sessions).

    Reads the store the config names: the PostgreSQL database of
    [engines.lossless] database_url, else the SQLite file under the state
    directory (read-only, never created), so it works while the sidecar
    runs or after.
    """
    from .store.lossless_view import StoreMissing, lossless_rows, render_lossless

    cfg = _lossless_config(ctx)
    settings = _settings(ctx, ("state_dir",))
    state_dir = settings.get("state_dir") or str(default_state_dir())
    try:
        rows = lossless_rows(state_dir, thread, cfg.database_url)
    except StoreMissing as exc:
        raise click.ClickException(str(exc)) from None
    if not rows:
        where = _redacted(cfg.database_url) if cfg.database_url else f"under {state_dir}"
        raise click.ClickException(f"the lossless store {where} holds no session{' ' + thread if thread else ''}")
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=True))
        return
    for line in render_lossless(rows):
        click.echo(line)


def _lossless_config(ctx: click.Context) -> Any:
    """The ``[engines.lossless]`` table of the config, parsed."""
    from engines.lossless import parse_config

    try:
        return parse_config(ctx.meta.get("engines_config", {}).get("lossless"))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _redacted(url: str) -> str:
    from engines.lossless.backends import redact_url

    return redact_url(url)


def _open_lossless_store(ctx: click.Context) -> Any:
    """The lossless store the sidecar's config names (``database_url``) or the
    SQLite file under the state directory, which must exist (nothing is created)."""
    from .store.lossless_view import StoreMissing, open_store

    cfg = _lossless_config(ctx)
    settings = _settings(ctx, ("state_dir", "engine"))
    try:
        return open_store(settings.get("state_dir") or str(default_state_dir()), cfg.database_url), int(cfg.max_store_mb * 2**20)
    except StoreMissing as exc:
        raise click.ClickException(str(exc)) from None


@lossless_cmd.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
@click.pass_context
def lossless_doctor_cmd(ctx: click.Context, as_json: bool) -> None:
    """Check the lossless store: database integrity, the search index against
    the messages and summaries, orphan summaries, gaps, and its size against
    max_store_mb. Exits 1 when a problem is found."""
    store, max_bytes = _open_lossless_store(ctx)
    try:
        report = store.doctor(max_bytes)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        limit = f" of {report['maxBytes'] / 2**20:.1f} MiB allowed" if report["maxBytes"] else " (no size limit)"
        click.echo(f"store      {report['backend']} {report['where']} (schema {report['schemaVersion']})")
        click.echo(f"size       {report['sizeBytes'] / 2**20:.2f} MiB{limit}")
        click.echo(
            f"contents   {report['sessions']} sessions, {report['messages']} messages "
            f"({report['prunedMessages']} pruned), {report['summaries']} summaries"
        )
        for w in report["warnings"]:
            click.echo(f"warning    {w}")
        for p in report["problems"]:
            click.echo(f"PROBLEM    {p}")
        click.echo("ok" if not report["problems"] else f"{len(report['problems'])} problem(s)")
    if report["problems"]:
        ctx.exit(1)


@lossless_cmd.command("backup")
@click.argument("path", type=click.Path(dir_okay=False))
@click.pass_context
def lossless_backup_cmd(ctx: click.Context, path: str) -> None:
    """Copy the lossless store to PATH (a new SQLite file), consistently,
    while the sidecar keeps writing: SQLite's online backup, or a logical
    copy of a PostgreSQL store's rows (pg_dump backs up the whole database)."""
    from engines.lossless import StoreError

    store, _ = _open_lossless_store(ctx)
    try:
        store.backup(path)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    click.echo(f"backed up {store.where} to {path}")
    if store.path is None:  # PostgreSQL
        click.echo(
            f"{path} is a SQLite copy of the store's rows (a state folder's lossless.sqlite3); "
            f"for a backup PostgreSQL restores: pg_dump --format=custom --file FILE '<database_url>'"
        )


@lossless_cmd.command("import")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--dry-run", is_flag=True, help="Read everything and count what would be imported; write nothing.")
@click.option("--progress/--no-progress", default=None, help="A progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a session, then the totals.")
@click.pass_context
def lossless_import_cmd(ctx: click.Context, paths: tuple[str, ...], dry_run: bool, progress: bool | None, as_json: bool) -> None:
    """Import existing history into the lossless store, each conversation
    as a session: Codex rollouts (rollout-*.jsonl) and OpenClaw session
    transcripts (an OpenClaw state dir's agents/*/sessions/*.jsonl and
    agents/*/agent/openclaw-agent.sqlite). PATHS are files or folders;
    without any, $CODEX_HOME/sessions (~/.codex/sessions) and
    $OPENCLAW_STATE_DIR (~/.openclaw). Messages the store holds already are
    skipped, so importing again adds nothing; so are the rollouts and
    transcripts of the threads and sessions the sidecar served (its state
    dir's), which it stored itself. Creates the store if needed.
    """
    import sqlite3
    from pathlib import Path

    from engines.lossless import DB_NAME, Store, StoreError
    from engines.lossless.importer import SKIP_REASONS, default_paths, default_places, discover, import_transcript, progress_text, read_source, sidecar_copy, skipped_text

    from .history.backing import backing_ids
    from .store.bindings import served
    from .store.lossless_view import store_dir

    given = [Path(p) for p in paths] or default_paths(dict(os.environ), Path.home())
    sources = discover(given)
    if not sources:
        looked = given or default_places(dict(os.environ), Path.home())
        hint = "" if paths else " (none given: pass the folders or files that hold them)"
        raise click.ClickException(f"no Codex rollout or OpenClaw transcript under {' or '.join(map(str, looked))}{hint}")
    cfg = _lossless_config(ctx)
    state_dir = _settings(ctx, ("state_dir",)).get("state_dir") or str(default_state_dir())
    folder = store_dir(state_dir)
    # The sidecar's own threads and sessions: their rollouts and transcripts are second copies.
    known = {thread: "backing" for thread in backing_ids(state_dir)} | {k: "served" if why == "session" else why for k, why in served(state_dir).items()}
    store: Any = None
    where = _redacted(cfg.database_url) if cfg.database_url else str(folder / DB_NAME)
    if not dry_run or cfg.database_url or (folder / DB_NAME).is_file():  # a dry run creates no SQLite file
        try:
            store = Store.open_configured(cfg.database_url, folder, DB_NAME)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None
        where = store.where
    bar = sys.stderr.isatty() if progress is None else progress
    tty = sys.stderr.isatty()
    sessions = new = unreadable = 0
    skipped: dict[str, int] = {}
    seen: dict[str, set[str]] = {}
    try:
        for done, source in enumerate(sources, 1):
            try:
                transcripts = read_source(source)
            except (OSError, ValueError, sqlite3.Error) as exc:
                click.echo(f"skipped {source.path}: {exc}", err=True)
                transcripts = []
            for t in transcripts:
                why = sidecar_copy(t, known)
                if why is not None:
                    skipped[why] = skipped.get(why, 0) + 1
                    if as_json:
                        click.echo(json.dumps({"source": t.source, "kind": t.kind, "sessionId": t.session_id, "sessionKey": t.session_key, "agent": t.agent, "messages": len(t.messages), "new": 0, "skipped": why}))
                    elif dry_run:
                        click.echo(f"skip {t.source}: {SKIP_REASONS[why]} ({t.session_id})")
                    continue
                result = import_transcript(store, t, dry_run=dry_run, seen=seen, redact=cfg.redact_secrets)
                sessions += 1
                new += result.new
                unreadable += t.unreadable
                if as_json:
                    click.echo(json.dumps({"source": t.source, "kind": t.kind, "sessionId": t.session_id, "sessionKey": t.session_key, "agent": t.agent, "messages": result.messages, "new": result.new}))
            if bar:
                click.echo(("\r" if tty else "") + progress_text(done, len(sources), sessions, new), err=True, nl=not tty)
        if bar and tty:
            click.echo("", err=True)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    verb = "would import" if dry_run else "imported"
    summary = {"files": len(sources), "sessions": sessions, "newMessages": new, "skipped": dict(sorted(skipped.items())), "unreadableEntries": unreadable, "dryRun": dry_run, "store": where}
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(f"{verb} {new} new message(s) from {sessions} session(s) in {len(sources)} file(s) into {where}{skipped_text(skipped)}")
    if unreadable:
        click.echo(f"{unreadable} entr{'y' if unreadable == 1 else 'ies'} could not be read and were left out", err=True)
@lossless_cmd.command("prune")
@click.option("--dry-run", is_flag=True, help="Report what would be dropped and change nothing.")
@click.option("--retention-days", type=click.FloatRange(min=0), default=None, help="Drop sessions idle this many days (default: [engines.lossless] retention_days; 0: none).")
@click.option(
    "--session-max-messages", type=click.IntRange(min=0), default=None, help="Raw text kept for each session's newest N messages (default: [engines.lossless] session_max_messages; 0: all)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
@click.pass_context
def lossless_prune_cmd(ctx: click.Context, dry_run: bool, retention_days: float | None, session_max_messages: int | None, as_json: bool) -> None:
    """Apply the retention rules to the lossless store: delete sessions idle
    past retention_days, drop the raw text of a session's messages past
    session_max_messages where condensed summaries hold what they said, and
    delete orphan rows. Never drops what a live session's summaries need."""
    from engines.lossless.retention import policy, prune

    from .store.lossless_view import render_prune

    cfg = _lossless_config(ctx)
    store, _ = _open_lossless_store(ctx)
    try:
        report = prune(store, policy(cfg, retention_days=retention_days, session_max_messages=session_max_messages), dry_run=dry_run)
    finally:
        store.close()
    for line in [json.dumps(report, sort_keys=True)] if as_json else render_prune(report):
        click.echo(line)


def _normalise(name: str | None) -> str:
    return (name or "").lower().replace("_", "-").replace(".", "-")


@cli.command("inspect")
@click.argument("thread")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a turn instead of a table.")
@click.pass_context
def inspect_cmd(ctx: click.Context, thread: str, as_json: bool) -> None:
    """Per turn of the session THREAD belongs to (THREAD: a Codex thread id
    or a session id), thread by thread: what the engine assembled, how it
    was projected, sizes.

    Reads the state directory, so it works while the sidecar runs or after.
    """
    from .store.bindings import session_threads
    from .store.inspect import InspectLog, inspect_path

    settings = _settings(ctx, ("state_dir",))
    state_dir = settings.get("state_dir") or str(default_state_dir())
    try:
        session_id, threads = session_threads(state_dir, thread)
        per_thread = [(b, InspectLog(inspect_path(state_dir, b.thread)).records()) for b in threads]
    except ValueError:
        raise click.ClickException(f"{thread!r} is not a thread id (the id thread/start answered: letters, digits, '.', '_', '-')") from None
    if not any(records for _, records in per_thread):
        raise click.ClickException(f"no turns recorded for {thread} under {state_dir} (is the state dir the sidecar's? set --state-dir)")
    if as_json:
        for b, records in per_thread:
            for r in records:
                click.echo(json.dumps({"sessionId": session_id, "threadId": b.thread, **r}, sort_keys=True))
        return
    # A thread that is a session of its own shows as it always did; a
    # session of several threads (or an OpenClaw session) says so.
    grouped = len(per_thread) != 1 or per_thread[0][0].thread != session_id
    if grouped:
        click.echo(f"session {session_id}: {len(per_thread)} Codex thread{'s' if len(per_thread) != 1 else ''}")
    lines = inspect_table([r for _, records in per_thread for r in records])
    click.echo(lines[0])
    rows = iter(lines[1:])
    for b, records in per_thread:
        if grouped:
            mark = "  <" if b.thread == thread else ""
            click.echo(f"thread {b.thread} ({b.via}, {len(records)} turn{'s' if len(records) != 1 else ''}){mark}")
        for _ in records:
            click.echo(next(rows))


def inspect_table(records: list[dict[str, Any]]) -> list[str]:
    """The ``inspect`` table: one row a turn, columns as wide as their cells."""
    table = [("#", "status", "mode", "epoch", "assembled", "est.tok", "channels", "input chars", "codex in tok", "hold ms", "rebuild")]
    for n, r in enumerate(records, 1):
        a, inj, size = r.get("assembled") or {}, r.get("injected") or {}, r.get("turnInputChars") or {}
        channels = ",".join(inj.get("channels") or []) or (f"none ({r['fallback']})" if r.get("fallback") else "none")
        table.append(
            (
                str(n),
                str(r.get("status")),
                str(r.get("mode")),
                str(r.get("epoch") or "-"),
                str(a.get("count")),
                str(a.get("estimatedTokens")),
                channels,
                f"{size.get('original', 0)} -> {size.get('sent', 0)}",
                str(r.get("codexInputTokens")),
                _ms(r.get("holdMs")),
                _rebuild_cell(r),
            )
        )
    right = {0, 4, 5, 8, 9}
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [" ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in table]


def _ms(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def _rebuild_cell(record: dict[str, Any]) -> str:
    """``revert 52 ms`` for a turn that rebuilt the thread's history in
    place, ``switch 40 ms`` for one that moved it onto a fresh Codex thread."""
    if not record.get("rebuilt"):
        return "-"
    how = "switch" if record.get("switched") else "revert"
    took = record.get("revertMs")
    return f"{how} {took:.0f} ms" if isinstance(took, (int, float)) else "yes"


@cli.command("view")
@click.argument("session")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="Where to write the page (default: codex-sidecar-view-SESSION.html here).")
@click.option("--redact", is_flag=True, help="Sizes only: no text of the session in the page.")
@click.pass_context
def view_cmd(ctx: click.Context, session: str, output: str | None, redact: bool) -> None:
    """Write one self-contained HTML page (0600) for the OpenClaw session
    SESSION (a session id or one of its Codex thread ids): the timeline of
    its turns and threads, what the engine assembled beside what Codex was
    given, plots over the turns, and the lossless summaries. Reads the state
    directory (and the lossless store), so it works after the sidecar exited."""
    from .view import gather, render, write_page

    settings = _settings(ctx, ("state_dir",))
    state_dir = settings.get("state_dir") or str(default_state_dir())
    try:
        database_url = _lossless_config(ctx).database_url
    except click.ClickException:
        database_url = None  # a bad [engines.lossless] table: the SQLite store, if any
    out = output or f"codex-sidecar-view-{session}.html"
    try:
        report = gather(state_dir, session, redact=redact, database_url=database_url)
    except ValueError:
        raise click.ClickException(f"{session!r} is not a session or thread id (letters, digits, '.', '_', '-')") from None
    if not report.turns:
        raise click.ClickException(f"no turns recorded for {session} under {state_dir} (is the state dir the sidecar's? set --state-dir)")
    try:
        write_page(out, render(report))
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror or exc}") from None
    click.echo(os.path.abspath(out))


@cli.command("doctor")
@click.pass_context
def doctor_cmd(ctx: click.Context) -> None:
    """Check codex, the state dir, the engine, the tokenizer and the config
    file; print the OpenClaw config for what was found. Exits 1 on a problem."""
    from .doctor import openclaw_snippet, run_checks, settings_lines, sidecar_executable

    resolved: Resolved = ctx.find_root().meta["resolved"]
    settings = resolved.values
    state_dir = settings.get("state_dir") or str(default_state_dir())
    findings, codex = run_checks(resolved, state_dir)
    for f in findings:
        click.echo(f"{'ok  ' if f.ok else 'FAIL'} {f.check:<12} {f.message}")
    click.echo("\nSettings in effect (value, and where it came from):")
    for line in settings_lines(resolved, state_dir, codex):
        click.echo(f"  {line}")
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


_HOISTED = ("doctor", "engines", "inspect", "version", "view")


def hoist_settings(args: list[str]) -> list[str]:
    """Move the sidecar's own options written after ``doctor``, ``engines``,
    ``inspect`` or ``version`` (``inspect THREAD --state-dir DIR``) before
    it, where click reads them. Other commands' arguments are left alone."""
    takes_value = {"--config-file"} | {s.flag for s in SETTINGS if s.type is not bool}
    flags = {f for s in SETTINGS if s.type is bool for f in (s.flag, "--no-" + s.flag[2:])}
    at = next((i for i, tok in enumerate(args) if tok in _HOISTED), None)
    if at is None or any(not (t.startswith("-") or (j > 0 and args[j - 1] in takes_value)) for j, t in enumerate(args[:at])):
        return args
    moved: list[str] = []
    rest: list[str] = []
    i = at + 1
    while i < len(args):
        tok = args[i]
        if tok == "--":
            rest.extend(args[i:])
            break
        name = tok.split("=", 1)[0]
        if name in takes_value:
            step = 1 if "=" in tok else 2
            moved.extend(args[i : i + step])
            i += step
        elif tok in flags:
            moved.append(tok)
            i += 1
        else:
            rest.append(tok)
            i += 1
    return [*args[:at], *moved, args[at], *rest]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    cli.main(hoist_settings(split_drop_in(args)), prog_name="codex-sidecar")


if __name__ == "__main__":
    main()
