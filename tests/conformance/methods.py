"""Codex's own list of app-server v2 client methods, and what the suite
leaves out.

The list comes from the codex binary under test (``codex app-server
generate-json-schema --out DIR``, the stable v2 bundle's ``ClientRequest``),
generated at test time and never kept in git, so a newer codex shows at once
which of its methods no scenario covers. :data:`NOT_COVERED` names every
method of the codex releases the matrix runs that no scenario sends, with the reason; a method
neither covered nor listed fails the coverage test, by name.

The suite runs against every codex of the matrix (``make
test-codex-matrix``): an older one lacks the methods added since, and had
one that a later one dropped. :data:`SINCE` and :data:`UNTIL` say which, so
that a name the suite uses is missing from a codex's schema only where the
table says (else it is a typo, or codex dropped it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from sidecar.doctor import parse_codex_version

BUNDLE = "codex_app_server_protocol.v2.schemas.json"

_ACCOUNT = "needs a signed-in OpenAI/ChatGPT account or its web flows (the suite runs offline, with no account)"
_NETWORK = "talks to OpenAI's plugin, app or marketplace services (offline here)"
_WRITES = "changes the user's Codex installation or config for every later scenario"
_PLATFORM = "another platform (Windows) or a service the fake model does not offer"
_LATER = "not yet covered: a scenario can be added (no reason it could not run here)"
_REPLACED = (
    "codex 0.155.0 and older only (thread/revert, 0.151.0, replaced it): the sidecar follows a client's thread/revert, "
    "not this (with an engine, its transcript keeps the turns rolled back)"
)

NOT_COVERED: dict[str, str] = {
    **dict.fromkeys(
        (
            "account/gatewayOAuth/read",
            "account/gatewayOAuth/login",
            "account/gatewayOAuth/cancel",
            "account/login/start",
            "account/login/cancel",
            "account/logout",
            "account/securitySetup/read",
            "account/rateLimitResetCredit/consume",
            "account/usage/read",
            "account/workspaceMessages/read",
            "account/sendAddCreditsNudgeEmail",
            "feedback/upload",
            "mcpServer/oauth/login",
        ),
        _ACCOUNT,
    ),
    **dict.fromkeys(
        (
            "marketplace/add",
            "marketplace/remove",
            "marketplace/upgrade",
            "plugin/list",
            "plugin/installed",
            "plugin/reconcile",
            "plugin/read",
            "plugin/skill/read",
            "plugin/share/save",
            "plugin/share/updateTargets",
            "plugin/share/list",
            "plugin/share/checkout",
            "plugin/share/delete",
            "plugin/install",
            "plugin/uninstall",
            "app/read",
            "app/list",
            "app/installed",
        ),
        _NETWORK,
    ),
    **dict.fromkeys(
        (
            "skills/extraRoots/set",
            "skills/config/write",
            "modelProvider/config/write",
            "modelProvider/default/set",
            "experimentalFeature/enablement/set",
            "config/mcpServer/reload",
            "config/value/write",
            "config/batchWrite",
            "externalAgentConfig/import",
            "externalAgentConfig/import/recordHistory",
        ),
        _WRITES,
    ),
    "thread/rollback": _REPLACED,
    **dict.fromkeys(("windowsSandbox/setupStart", "windowsSandbox/readiness", "mcpServer/resource/read", "mcpServer/tool/call"), _PLATFORM),
    **dict.fromkeys(
        (
            "thread/attachment/add",
            "thread/attachmentOwner/list",
            "thread/attachment/remove",
            "thread/section/move",
            "threadSection/create",
            "threadSection/update",
            "threadSection/delete",
            "thread/approveGuardianDeniedAction",
            "command/exec/write",
            "command/exec/terminate",
            "command/exec/resize",
            "feedback/save",
        ),
        _LATER,
    ),
}


SINCE: dict[str, tuple[int, int, int]] = {
    "plugin/reconcile": (0, 153, 0),
    "thread/attachment/add": (0, 155, 0),
    "thread/attachment/list": (0, 155, 0),
    "thread/attachment/remove": (0, 155, 0),
    "account/gatewayOAuth/read": (0, 157, 0),
    "account/gatewayOAuth/login": (0, 157, 0),
    "account/gatewayOAuth/cancel": (0, 157, 0),
    "thread/attachmentOwner/list": (0, 162, 0),
    "feedback/save": (0, 164, 0),
    "modelProvider/list": (0, 168, 0),
    "modelProvider/config/write": (0, 168, 0),
    "account/securitySetup/read": (0, 169, 0),
    "modelProvider/default/set": (0, 171, 0),
}
"""Methods the oldest promised codex (0.151.0) lacks, by the first release
whose schema has them (the schemas of 0.151.0 to 0.171.0, every x.y.0
release and 0.167.2, compared on 2026-12-02)."""

UNTIL: dict[str, tuple[int, int, int]] = {"thread/rollback": (0, 155, 0)}
"""Methods a later codex dropped, by the last release whose schema has them."""


def codex_version(codex_bin: str) -> tuple[int, int, int]:
    """``codex --version`` of the binary under test."""
    out = subprocess.run([codex_bin, "--version"], check=True, capture_output=True, text=True, timeout=60)
    version = parse_codex_version(out.stdout)
    assert version is not None, f"no version in {out.stdout!r}"
    return version


def absent_from(version: tuple[int, int, int]) -> set[str]:
    """The methods :data:`SINCE` and :data:`UNTIL` say this codex lacks."""
    return {m for m, since in SINCE.items() if version < since} | {m for m, until in UNTIL.items() if version > until}


def client_methods(codex_bin: str, out: Path) -> list[str]:
    """The client request methods of the stable v2 protocol, in the schema's order."""
    subprocess.run([codex_bin, "app-server", "generate-json-schema", "--out", str(out)], check=True, capture_output=True, timeout=60)
    bundle = json.loads((out / BUNDLE).read_text())
    variants = bundle["definitions"]["ClientRequest"]["oneOf"]
    return [v["properties"]["method"]["enum"][0] for v in variants]


def coverage_table(methods: Iterable[str], covered: set[str]) -> str:
    """The table the coverage test prints: every method, covered or why not."""
    methods = list(methods)
    lines = [f"Codex app-server v2 client methods: {len(methods)}, covered {sum(m in covered for m in methods)}", ""]
    lines += [f"  covered      {m}" for m in methods if m in covered]
    lines.append("")
    lines += [f"  not covered  {m}  ({NOT_COVERED.get(m, 'NEW: not in the known list')})" for m in methods if m not in covered]
    return "\n".join(lines)
