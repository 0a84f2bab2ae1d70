"""Build throwaway OpenClaw homes and drive the real OpenClaw agent in them.

`make` installs openclaw (on a pinned Node 24) and a *template* state folder
with OpenClaw's Codex plugin installed from npm and its plugin registry built
(a plugin loaded from a path is untrusted and does not register the codex
agent harness).  Installing the plugin takes ~50 s, so each home copies the
template's small SQLite state instead; the registry in it names the plugin's
files inside the template by absolute path, which OpenClaw loads from there.

A home is isolated by `HOME`, `OPENCLAW_STATE_DIR` and `OPENCLAW_CONFIG_PATH`;
its config points the Codex harness at an app-server command (the real codex
or the sidecar) and the openai provider at the codex runtime.  Codex itself
reads the fake model's address from OpenClaw's per-agent `CODEX_HOME`
(`<state>/agents/main/agent/codex-home/config.toml`, `openai_base_url`):
`OPENAI_BASE_URL` makes OpenClaw refuse the route.  OpenClaw takes
`OPENAI_API_KEY` from its own environment and logs codex in with
`account/login/start {type: "apiKey"}`, so a fake key is enough.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV_OPENCLAW_BIN = "CODEX_SIDECAR_TEST_OPENCLAW_BIN"
ENV_OPENCLAW_TEMPLATE = "CODEX_SIDECAR_TEST_OPENCLAW_TEMPLATE"
OPENCLAW_VERSION = "2026.9.6"
#: A fake key: it only has to look like one.  Tests search recordings for it.
FAKE_API_KEY = "sk-test-openclaw-0123456789abcdefghijklmnop"
MODEL = "openai/gpt-5.5"
GATEWAY_TOKEN = "test-gateway-token-0123456789"


class OpenClawMissing(RuntimeError):
    """`make` said OpenClaw is installed (the env vars are set) but it is not."""


def find_openclaw() -> tuple[str, Path] | None:
    """(openclaw executable, template state folder) from the env `make` exports.

    None when the variables are absent (pytest run by hand, outside make), so
    tests may skip; when they are set, a missing install is an error, so a
    broken `make setup` fails the suite instead of skipping it.
    """
    bin_ = os.environ.get(ENV_OPENCLAW_BIN)
    template = os.environ.get(ENV_OPENCLAW_TEMPLATE)
    if not bin_ and not template:
        return None
    problems = []
    if not bin_ or not (os.path.isfile(bin_) and os.access(bin_, os.X_OK)):
        problems.append(f"{ENV_OPENCLAW_BIN}={bin_!r} is not an executable")
    if not template or not (Path(template) / ".installed").is_file():
        problems.append(f"{ENV_OPENCLAW_TEMPLATE}={template!r} is not an installed template (no .installed)")
    if problems:
        raise OpenClawMissing("; ".join(problems) + ": run `make setup`")
    return bin_, Path(template)  # type: ignore[arg-type]


def sidecar_command() -> str:
    """The `codex-sidecar` console script of the running interpreter's venv.

    OpenClaw wants a bare executable for `appServer.command` (inline
    arguments are rejected), so the sidecar's settings travel as
    `CODEX_SIDECAR_*` variables in OpenClaw's environment.
    """
    path = Path(sys.executable).parent / "codex-sidecar"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: install the project (pip install -e .)")
    return str(path)


@dataclasses.dataclass
class OpenClawHome:
    root: Path
    openclaw_bin: str
    home: Path
    state: Path
    config_path: Path
    workspace: Path
    codex_home: Path
    env: dict[str, str]

    # ---- turns

    def agent(self, session_id: str, message: str, *, local: bool = True, timeout: float = 1200.0, session_key: str | None = None) -> dict:
        """One `openclaw agent` turn; its `--json` result.  Raises with the
        tail of OpenClaw's stderr when the command fails.  With `session_key`
        the session is named by its key (`--session-key`; the gateway resets
        a session on `/new` and `/reset` only when it has one) instead of
        `session_id`."""
        argv = [self.openclaw_bin, "agent", *(["--local"] if local else []), "--agent", "main"]
        argv += ["--session-key", session_key] if session_key is not None else ["--session-id", session_id]
        argv += ["--message", message, "--json"]
        proc = subprocess.run(
            argv, env=self.env, cwd=self.workspace, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise AgentFailed(argv, proc.returncode, proc.stderr, proc.stdout)
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise AgentFailed(argv, proc.returncode, proc.stderr, proc.stdout) from None

    def start_gateway(self, port: int, log_path: Path) -> Gateway:
        """`openclaw gateway run` on loopback without auth; returns once it
        accepts connections on `port`."""
        self.env["OPENCLAW_GATEWAY_PORT"] = str(port)
        # `--auth none` still leaves `openclaw agent` refusing to connect
        # without credentials (seen with 2026.9.6): a token both sides read.
        self.env["OPENCLAW_GATEWAY_TOKEN"] = GATEWAY_TOKEN
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            [self.openclaw_bin, "gateway", "run", "--port", str(port), "--bind", "loopback", "--auth", "token"],
            env=self.env,
            cwd=self.workspace,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        gateway = Gateway(proc, port, log_path)
        gateway.wait_ready()
        return gateway


class AgentFailed(RuntimeError):
    def __init__(self, argv: list[str], code: int, stderr: str, stdout: str) -> None:
        tail = "\n".join((stderr or "").splitlines()[-60:])
        super().__init__(f"{' '.join(argv[1:3])} exited {code}; stderr tail:\n{tail}\nstdout head: {stdout[:500]!r}")


@dataclasses.dataclass
class Gateway:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def wait_ready(self, timeout: float = 240.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.25)
        raise TimeoutError(f"gateway not listening on {self.port}: {self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the gateway's process group, SIGKILL what lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def copy_template_state(template: Path, state: Path) -> None:
    """The template's state minus the installed plugin packages (`npm/`),
    which the copied registry still finds in the template."""
    src = template / "state"
    state.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name == "npm":
            continue
        if entry.is_dir():
            shutil.copytree(entry, state / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, state / entry.name)


#: Workspace bootstrap files.  With them OpenClaw wraps each prompt in its
#: runtime context (one text input ``OpenClaw runtime context for this turn:
#: ... Current user request:\n<prompt>``) while its own transcript keeps the
#: bare prompt: the shape the sidecar's mirror must reduce to the same text.
BOOTSTRAP_FILES = {
    "AGENTS.md": "# Agents\n\nAnswer briefly. This workspace is a test fixture.\n",
    "BOOTSTRAP.md": "# Bootstrap\n\nNothing to set up: this workspace is a test fixture.\n",
}
RUNTIME_CONTEXT_HEADER = "OpenClaw runtime context for this turn:"


def write_bootstrap_files(workspace: Path) -> None:
    for name, text in BOOTSTRAP_FILES.items():
        (workspace / name).write_text(text)


def openclaw_config(app_server_command: str, workspace: Path) -> dict[str, Any]:
    """OpenClaw's config (JSON is valid JSON5) routing the agent through codex."""
    return {
        "plugins": {
            # Only what the run needs: fewer plugins to load at every start.
            "allow": ["codex", "openai"],
            "entries": {
                "codex": {
                    "enabled": True,
                    # requestTimeoutMs: OpenClaw's 60 s default is short on a
                    # loaded 2-core test machine (seen: a resume timing out).
                    "config": {"appServer": {"command": app_server_command, "requestTimeoutMs": 300_000}},
                }
            },
        },
        "models": {"providers": {"openai": {"agentRuntime": {"id": "codex"}}}},
        "agents": {"defaults": {"model": MODEL, "workspace": str(workspace), "skipBootstrap": True}},
        # `openclaw gateway run` refuses a config without a gateway mode.
        "gateway": {"mode": "local"},
    }


def openclaw_env(
    *, home: Path, state: Path, config_path: Path, api_key: str, extra: dict[str, str] | None, base: dict[str, str] | None
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key == "OPENCLAW_DEBUG":
            continue
        if key.startswith(("OPENAI_", "OPENCLAW_", "CODEX_SIDECAR_")) or key in ("CODEX_API_KEY", "CODEX_HOME"):
            env.pop(key)
        elif key.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            env.pop(key)
    env.update(
        {
            "HOME": str(home),
            "OPENCLAW_STATE_DIR": str(state),
            "OPENCLAW_CONFIG_PATH": str(config_path),
            "OPENAI_API_KEY": api_key,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "RUST_LOG": "warn",
            "NO_COLOR": "1",
        }
    )
    env.update(extra or {})
    return env


def make_openclaw_home(
    dir: str | os.PathLike,  # noqa: A002
    *,
    openclaw_bin: str,
    template: Path,
    app_server_command: str,
    base_url: str,
    env: dict[str, str] | None = None,
    api_key: str = FAKE_API_KEY,
    base_env: dict[str, str] | None = None,
) -> OpenClawHome:
    """An isolated OpenClaw home under `dir` whose agent runs codex through
    `app_server_command` against the model at `base_url`.

    `env` is added to OpenClaw's environment (e.g. `CODEX_SIDECAR_*`): OpenClaw
    passes its environment on to the app-server it launches, minus the API key.
    """
    root = Path(dir)
    home, state, workspace = root / "home", root / "state", root / "workspace"
    for d in (home, workspace):
        d.mkdir(parents=True, exist_ok=True)
    copy_template_state(template, state)
    write_bootstrap_files(workspace)
    config_path = state / "openclaw.json"
    config_path.write_text(json.dumps(openclaw_config(app_server_command, workspace), indent=2) + "\n")
    codex_home = state / "agents" / "main" / "agent" / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(f"openai_base_url = {json.dumps(base_url)}\n")
    full_env = openclaw_env(home=home, state=state, config_path=config_path, api_key=api_key, extra=env, base=base_env)
    return OpenClawHome(root, openclaw_bin, home, state, config_path, workspace, codex_home, full_env)


def transcript_user_texts(state: Path, session_id: str) -> list[str]:
    """The user messages of OpenClaw's own transcript of ``session_id`` (its
    per-agent SQLite database, ``transcript_events``), oldest first.

    OpenClaw stores large events zstd-compressed, which Python cannot read
    without a dependency; those are left out.  The prompts of these tests are
    far below that size, and tests compare the result with the prompts they
    sent, so a prompt left out would still fail them."""
    import sqlite3

    db = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    finally:
        conn.close()
    texts: list[str] = []
    for (event_json,) in rows:
        if event_json is None:
            continue
        event = json.loads(event_json)
        message = event.get("message") if event.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "user":
            texts.append(message_text(message.get("content")))
    return texts


def message_text(content: Any) -> str:
    """An OpenClaw message's content as text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    return ""
