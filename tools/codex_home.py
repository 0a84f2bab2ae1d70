"""Locate the real codex binary and build throwaway CODEX_HOME folders.

Tests must never touch a developer's real ~/.codex, and Codex only runs
offline when its config names a loopback provider with retries off (a retry
against a scripted fake would consume the next scripted reply).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENV_CODEX_BIN = "CODEX_SIDECAR_TEST_CODEX_BIN"
CODEX_VERSION = "0.169.0"
_PROJECT_ROOT = Path(__file__).resolve().parent.parent
_LOCAL_BIN = _PROJECT_ROOT / ".tools" / f"codex-{CODEX_VERSION}" / "node_modules" / ".bin" / "codex"


def find_codex_bin() -> str | None:
    """The codex executable to test against, or None when none is installed.

    The env var wins so `make` and CI can point at any build; the
    project-local install is the fallback for running pytest by hand.
    """
    env = os.environ.get(ENV_CODEX_BIN)
    if env:
        p = Path(env)
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    if _LOCAL_BIN.is_file() and os.access(_LOCAL_BIN, os.X_OK):
        return str(_LOCAL_BIN)
    return None


def _toml_value(value: object) -> str:
    # JSON string/number/bool literals are valid TOML for the simple values we write.
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def make_codex_home(
    dir: str | os.PathLike,  # noqa: A002 - mirrors the documented signature
    base_url: str,
    approval_policy: str = "never",
    sandbox_mode: str = "read-only",
    extra: str = "",
    *,
    offline: bool = True,
) -> Path:
    """Write `config.toml` pointing Codex at the fake model; return the folder.

    `extra` is raw TOML: its root keys are placed with the other root keys
    and its tables after the provider table, so callers need not care about
    TOML's ordering rules.

    `offline` turns off the `plugins` feature, whose startup sync otherwise
    contacts github.com and chatgpt.com (seen with 0.169.0); it does not
    change what the model is sent.  It is skipped when `extra` configures
    `features` itself, since TOML forbids defining that table twice.
    """
    home = Path(dir)
    home.mkdir(parents=True, exist_ok=True)
    top = [
        'model = "mock-model"',
        'model_provider = "mock"',
        f"approval_policy = {_toml_value(approval_policy)}",
        f"sandbox_mode = {_toml_value(sandbox_mode)}",
    ]
    extra = extra.strip("\n")
    # Keys in `extra` before its first table header belong to the root table,
    # so they must be written before [model_providers.mock].
    extra_top, extra_tables = _split_toml(extra)
    text = "\n".join(top + extra_top) + "\n\n"
    text += (
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f"base_url = {_toml_value(base_url)}\n"
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    if extra_tables:
        text += "\n" + "\n".join(extra_tables) + "\n"
    if offline and "features" not in extra:
        text += "\n[features]\nplugins = false\n"
    (home / "config.toml").write_text(text)
    return home


def _split_toml(extra: str) -> tuple[list[str], list[str]]:
    lines = extra.splitlines() if extra else []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            return lines[:i], lines[i:]
    return lines, []


def codex_env(codex_home: str | os.PathLike, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a codex child that cannot reach a real account.

    Drops OpenAI credentials and proxies inherited from the parent so a
    misconfigured test fails instead of talking to the internet.  Other
    variables (e.g. the sidecar's own CODEX_SIDECAR_*) pass through, because
    the same env may start the proxy in front of codex.
    """
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key.startswith("OPENAI_") or key in ("CODEX_API_KEY", "CODEX_HOME"):
            env.pop(key)
        elif key.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            env.pop(key)
    env["CODEX_HOME"] = str(codex_home)
    env.setdefault("RUST_LOG", "warn")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env
