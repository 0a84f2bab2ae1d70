"""``codex-sidecar doctor``: is this installation ready for OpenClaw?

Each check is a function returning :class:`Finding` values; nothing here
prints or exits, so every check is tested by breaking it once. The click
command in :mod:`sidecar.cli` prints the findings, then the OpenClaw config
snippet for the paths found, and exits non-zero on any problem.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import msgspec

from .config import DEFAULT, ConfigError, Origin, Resolved, default_config_path, did_you_mean, load_config_file, resolve_codex_bin

MIN_CODEX = (0, 151, 0)
"""The oldest codex the sidecar serves as it serves the pinned one: 0.151.0
added ``thread/revert`` (an engine's rebuilds in place), ``thread/turns/list``
and ``thread/items/list`` (the sidecar's reads of a thread's turns, and
OpenClaw's own). Against 0.149.0 and 0.150.0 the conformance suite's
rebuilding engine never rebuilt (docs/testing.md, "Codex versions").
OpenClaw's Codex plugin itself refuses an app-server older than 0.149.0."""


class Finding(msgspec.Struct, frozen=True):
    check: str
    ok: bool
    message: str


def parse_codex_version(text: str) -> tuple[int, int, int] | None:
    """``"codex-cli 0.169.0"`` -> ``(0, 169, 0)``."""
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _run_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return (out.stdout or "") + (out.stderr or "")


def check_codex(
    configured: str | None, run_version: Callable[[str], str] = _run_version, origin: Origin = DEFAULT
) -> tuple[Finding, str | None]:
    """The real codex is found and new enough; also returns its path."""
    try:
        path = resolve_codex_bin(configured, origin)
    except ConfigError as exc:
        return Finding("codex", False, str(exc.message) + demo_codex_hint()), None
    try:
        text = run_version(path)
    except (OSError, subprocess.SubprocessError) as exc:
        return Finding("codex", False, f"{path}: cannot run --version: {exc}"), path
    if text.strip().startswith("codex-sidecar"):  # a wrapper script around the sidecar (on PATH, or named)
        fix = f"point {origin} at the real codex" if origin.kind != "default" else "set codex_bin (or CODEX_SIDECAR_CODEX_BIN) to the real codex"
        return Finding("codex", False, f"{path} is the sidecar itself, not the codex binary (its --version prints {text.strip()!r}); {fix}{demo_codex_hint()}"), path
    version = parse_codex_version(text)
    if version is None:
        return Finding("codex", False, f"{path}: --version printed no version ({text.strip()[:80]!r})"), path
    shown = ".".join(map(str, version))
    minimum = ".".join(map(str, MIN_CODEX))
    if version < MIN_CODEX:
        return Finding("codex", False, f"{path} is codex {shown}; the sidecar needs at least {minimum}"), path
    return Finding("codex", True, f"{path} (codex {shown})"), path


def demo_codex_hint(root: Path | None = None) -> str:
    """``; make demo installed one: --codex-bin PATH`` when this checkout's
    ``.tools/`` holds the codex ``make demo`` installed (the Makefile's
    ``CODEX_VER``, else the newest there), else ``""``."""
    root = Path(__file__).resolve().parents[1] if root is None else root
    found = [p for p in root.glob(".tools/codex-*/node_modules/.bin/codex") if os.access(p, os.X_OK)]
    if not found:
        return ""
    try:
        pinned = re.search(r"^CODEX_VER\s*:=\s*(\S+)", (root / "Makefile").read_text(), re.M)
    except OSError:
        pinned = None
    found.sort(key=lambda p: (pinned is not None and p.parts[-4] == f"codex-{pinned[1]}", parse_codex_version(p.parts[-4]) or (0, 0, 0)), reverse=True)
    return f"; make demo installed one: --codex-bin {found[0]} (or CODEX_SIDECAR_CODEX_BIN)"


def can_write(directory: Path) -> bool:
    """Whether this user can create a file in ``directory``: tried for real
    (a temporary file, removed at once), since permission bits say nothing
    for root, on a read-only mount or under an ACL."""
    try:
        fd, name = tempfile.mkstemp(prefix=".codex-sidecar-doctor-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return True


def _cannot_create_in(p: Path) -> str | None:
    """Why a folder cannot be made where the missing state dir ``p`` would
    go, tried for real (a temporary folder in its nearest existing parent,
    removed at once): permission bits and ``access`` say yes for root, on
    ``/proc`` or a full inode table; None when one can."""
    ancestor = next((a for a in p.parents if a.exists()), None)
    if ancestor is None:
        return None
    try:
        probe = tempfile.mkdtemp(prefix=".codex-sidecar-doctor-", dir=ancestor)
    except OSError as exc:
        return f"{ancestor} refuses new folders: {exc.strerror or exc}"
    with contextlib.suppress(OSError):
        os.rmdir(probe)
    return None


def check_state_dir(path: str | os.PathLike[str]) -> Finding:
    """Usable (the check the sidecar makes at start-up, which decides whether
    it runs an engine, the history part or a pure relay), and private (0700):
    it holds every mirrored prompt."""
    from .store.usable import state_dir_problem as usable

    p = Path(path)
    problem = usable(p, create=False)
    if problem is not None:
        return Finding("state dir", False, problem.message())
    if not p.exists():
        refused = _cannot_create_in(p)
        if refused is not None:
            return Finding("state dir", False, f"state dir unusable: {p} cannot be created ({refused}); fix: create it (mkdir -m 700 {p}), or set state_dir elsewhere")
        return Finding("state dir", True, f"{p} (does not exist yet; will be created 0700)")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        return Finding("state dir", False, f"{p} is mode {mode:04o}; it holds prompts: chmod 700 {p}")
    return Finding("state dir", True, f"{p} (0700, writable)")


def _impostors(installed: list[Any]) -> str:
    """The distributions that register a built-in engine id, which sessions
    ignore without reading them (engines.loader): said here, or nowhere."""
    builtin_ids = {e.id for e in installed if e.builtin}
    shadows = sorted({f"{e.distribution or '?'} ({e.id!r})" for e in installed if not e.builtin and e.id in builtin_ids})
    return f"; ignored, as built-in ids cannot be replaced: {', '.join(shadows)}" if shadows else ""


def check_engine(engine_id: str, allowlist: Collection[str] | None, config: Mapping[str, Any]) -> Finding:
    """The selected engine loads, and comes from a trusted distribution."""
    from engines import EngineLoadError, list_engines, load_engine

    installed = list_engines()
    ignored = _impostors(installed)
    if not engine_id or engine_id == "legacy":
        return Finding("engine", True, f"legacy (pass-through: no context engine){ignored}")
    entries = [e for e in installed if e.id == engine_id]
    if not entries:
        ids = sorted({e.id for e in installed} | {"legacy"})
        return Finding(
            "engine",
            False,
            f"engine {engine_id!r} is not installed{did_you_mean(engine_id, ids)}; installed: {', '.join(ids)} "
            "(set engine, CODEX_SIDECAR_ENGINE or --engine to one of them, or install its distribution)",
        )
    builtin = any(e.builtin for e in entries)
    if allowlist is None and not builtin:
        return Finding(
            "engine",
            False,
            f"{engine_id!r} is not a built-in and no engine allowlist is set: set CODEX_SIDECAR_ENGINE_ALLOWLIST "
            f"(or engine_allowlist) to the distribution that provides it ({', '.join(sorted({e.distribution or '?' for e in entries})) or 'none installed'})",
        )
    try:
        engine = load_engine(engine_id, config, allowlist)
    except EngineLoadError as exc:
        return Finding("engine", False, str(exc))
    info = engine.info
    refused = bind_on_a_throwaway_host(engine)
    if refused is not None:
        return Finding("engine", False, f"{engine_id} loads, but cannot start: {refused} (the sidecar would run legacy)")
    return Finding("engine", True, f"{engine_id} ({info.name} {info.version}){' built-in' if builtin else ''}{ignored}")


def bind_on_a_throwaway_host(engine: Any, deadline: float = 20.0) -> str | None:
    """Bind ``engine`` as a session would, to a host whose state dir is a
    temporary folder (removed after): a store it cannot open (PostgreSQL
    unreachable, its extra not installed) fails here, not in the first
    session. The engine's own message, a URL's password masked; None when
    the bind went through (the engine is disposed of after)."""
    import trio

    from engines import optional_method

    from .host.binding import SidecarHost, bind_failure

    async def attempt() -> str | None:
        with tempfile.TemporaryDirectory(prefix="codex-sidecar-doctor-") as folder:
            bind = optional_method(engine, "bind")
            try:
                if bind is not None:
                    with trio.fail_after(deadline):
                        await bind(SidecarHost(folder))
            except Exception as exc:  # the engine's reason, whatever its type
                return bind_failure(exc)
            finally:
                dispose = optional_method(engine, "dispose")
                if dispose is not None:
                    with contextlib.suppress(Exception), trio.move_on_after(deadline):
                        await dispose()
        return None

    return trio.run(attempt)


def check_tokenizer(name: Callable[[], str] | None = None) -> Finding:
    """Exact o200k counts need bpe-openai: engines' budgets are in its tokens."""
    if name is None:
        from engines.tokens import tokenizer_name

        name = tokenizer_name
    try:
        which = name()
    except Exception as exc:  # TokenizerUnavailable, or a broken wheel
        return Finding("tokenizer", False, f"{exc}")
    if which == "o200k_base":
        return Finding("tokenizer", True, "o200k_base (bpe-openai): exact token counts")
    return Finding("tokenizer", False, f"{which}: not the o200k_base tokenizer; reinstall bpe-openai (pip install 'bpe-openai>=0.1.4')")


def check_config_file(path: str | os.PathLike[str] | None) -> Finding:
    """The sidecar's TOML config parses and has only known keys."""
    shown = Path(path) if path is not None else default_config_path()
    if path is None and not shown.exists():
        return Finding("config file", True, f"none ({shown} absent: defaults and CODEX_SIDECAR_* apply)")
    try:
        load_config_file(path)
    except ConfigError as exc:
        return Finding("config file", False, str(exc.message))
    return Finding("config file", True, str(shown))


def sidecar_executable(argv0: str | None = None) -> str:
    """How OpenClaw should start this sidecar: the ``codex-sidecar`` script
    this doctor runs as (its path as typed or found on PATH, so pipx's
    ``~/.local/bin`` link stays a link), else the one beside this Python
    (``python -m sidecar doctor``), else the one on PATH."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0
    if argv0 and os.path.basename(argv0) == "codex-sidecar":
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and os.path.isfile(found):
            return os.path.abspath(found)
    beside = Path(sys.executable).parent / "codex-sidecar"
    if beside.is_file():
        return str(beside)
    found = shutil.which("codex-sidecar")
    return os.path.abspath(found) if found else "codex-sidecar"


def openclaw_snippet(sidecar: str, codex: str | None, engine_id: str, state_dir: str) -> str:
    """OpenClaw's config (JSON5) routing its Codex harness through the sidecar,
    and the environment the gateway service needs."""
    lines = [
        "// OpenClaw's Codex harness through the sidecar (the README's snippet). Install the plugin",
        "// from npm first (openclaw plugins install @openclaw/codex), save this as codex-sidecar.json5",
        "// and merge it: openclaw config patch --file codex-sidecar.json5",
        "{",
        "  plugins: {",
        "    entries: {",
        "      codex: {",
        "        enabled: true,",
        "        config: {",
        "          appServer: {",
        f"            command: {json.dumps(sidecar)},",
        "            // OpenClaw gives each app-server request 60 s (requestTimeoutMs' default):",
        "            // short on a slow or busy host, where codex's start and the engine's first",
        "            // turn can take longer (a thread/resume timed out on a loaded 2-core machine).",
        "            requestTimeoutMs: 300000,",
        "          },",
        "        },",
        "      },",
        "    },",
        "  },",
        '  models: { providers: { openai: { agentRuntime: { id: "codex" } } } },',
        "}",
        "// In the environment of the OpenClaw gateway service itself (appServer.command takes no arguments):",
        f"//   CODEX_SIDECAR_CODEX_BIN={codex or '/path/to/codex'}",
        f"//   CODEX_SIDECAR_ENGINE={engine_id}",
        f"//   CODEX_SIDECAR_STATE_DIR={state_dir}",
        "// OPENCLAW_CODEX_APP_SERVER_BIN only applies when appServer.command is unset.",
    ]
    return "\n".join(lines)


def check_record(path: str | None, origin: Origin = DEFAULT) -> list[Finding]:
    """The recording file ``record`` names can be opened, as serving opens
    it (appending, created 0600): the check creates nothing, so that a
    doctor run as another user leaves no file the sidecar cannot write."""
    if not path:
        return []
    p = Path(path)
    if p.is_dir():
        why = os.strerror(errno.EISDIR)
    elif p.exists():
        why = "" if os.access(p, os.W_OK) else os.strerror(errno.EACCES)
    elif not p.parent.is_dir():
        why = os.strerror(errno.ENOENT)
    else:
        why = "" if can_write(p.parent) else os.strerror(errno.EACCES)
    if why:
        return [Finding("record", False, f"cannot open recording {path}: {why} (set by {origin}; {origin.fix()})")]
    return [Finding("record", True, f"{path} (appended to, 0600)")]


def check_settings(resolved: Resolved) -> list[Finding]:
    """The config file (read, only known keys), then each value that could
    not be used (each names its flag, variable or file key)."""
    file_problems = [Finding("config file", False, p.message) for p in resolved.problems if p.setting is None]
    if not file_problems:
        shown = resolved.config_file or default_config_path()
        ok = str(shown) if resolved.config_file else f"none ({shown} absent: defaults and CODEX_SIDECAR_* apply)"
        file_problems = [Finding("config file", True, ok)]
    return [*file_problems, *(Finding("setting", False, p.message) for p in resolved.problems if p.setting is not None)]


def settings_lines(resolved: Resolved, state_dir: str, codex: str | None = None) -> list[str]:
    """``name = value  (source)`` for every setting, as the sidecar would run
    (the state dir and codex as found when left to their defaults)."""
    shown = resolved.shown()
    shown["state_dir"] = {"value": state_dir, "source": shown["state_dir"]["source"]}
    if codex and not resolved.values.get("codex_bin"):
        shown["codex_bin"] = {"value": codex, "source": "codex on PATH"}
    width = max(len(k) for k in shown)
    return [f"{name:<{width}} = {row['value']!s:<24} ({row['source']})" for name, row in shown.items()]


def run_checks(
    resolved: Resolved,
    state_dir: str,
    *,
    run_version: Callable[[str], str] = _run_version,
) -> tuple[list[Finding], str | None]:
    settings = resolved.values
    codex, codex_path = check_codex(settings.get("codex_bin"), run_version, resolved.origins.get("codex_bin", DEFAULT))
    engine_id = settings.get("engine") or "legacy"
    findings = [
        codex,
        check_state_dir(state_dir),
        check_engine(engine_id, settings.get("engine_allowlist"), resolved.engines.get(engine_id, {})),
        check_tokenizer(),
        *check_record(settings.get("record"), resolved.origins.get("record", DEFAULT)),
        *check_settings(resolved),
    ]
    return findings, codex_path
