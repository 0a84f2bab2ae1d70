"""Codex's own list of app-server v2 client methods, and what the suite
leaves out.

The list comes from the codex binary under test (``codex app-server
generate-json-schema --out DIR``, the stable v2 bundle's ``ClientRequest``),
generated at test time and never kept in git, so a newer codex shows at once
which of its methods no scenario covers. :data:`NOT_COVERED` names every
method of codex 0.169.0 that no scenario sends, with the reason; a method
neither covered nor listed fails the coverage test, by name.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

BUNDLE = "codex_app_server_protocol.v2.schemas.json"

_ACCOUNT = "needs a signed-in OpenAI/ChatGPT account or its web flows (the suite runs offline, with no account)"
_NETWORK = "talks to OpenAI's plugin, app or marketplace services (offline here)"
_WRITES = "changes the user's Codex installation or config for every later scenario"
_PLATFORM = "another platform (Windows) or a service the fake model does not offer"
_LATER = "not yet covered: a scenario can be added (no reason it could not run here)"

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
            "experimentalFeature/enablement/set",
            "config/mcpServer/reload",
            "config/value/write",
            "config/batchWrite",
            "externalAgentConfig/import",
            "externalAgentConfig/import/recordHistory",
        ),
        _WRITES,
    ),
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
