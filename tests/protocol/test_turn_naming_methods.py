"""The Codex methods a retried turn is renamed in (``sidecar/session/overflow.py``)
against codex's own schema (``generate-json-schema --experimental``): a
message codex adds that names a turn must join the lists, or a retry's would
reach the client under its own turn id."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sidecar.session.overflow import TURN_CLIENT_REQUESTS, TURN_NOTIFICATIONS, TURN_SERVER_REQUESTS
from tests.support.codex import CODEX_BIN, needs_codex

pytestmark = needs_codex


def _turn_naming(schema: Path, union: str) -> set[str]:
    doc = json.loads((schema / union).read_text())
    defs = doc.get("definitions", {})
    names = set()
    for variant in doc["oneOf"]:
        method = variant["properties"]["method"]["enum"][0]
        params = variant["properties"].get("params")
        if not params:
            continue
        spec = defs[params["$ref"].rsplit("/", 1)[-1]] if "$ref" in params else params
        if {"turnId", "turn", "sourceTurnId"} & set(spec.get("properties", {})):
            names.add(method)
    return names


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> Path:
    assert CODEX_BIN is not None
    out = tmp_path_factory.mktemp("codex-schema")
    proc = subprocess.run([CODEX_BIN, "app-server", "generate-json-schema", "--experimental", "--out", str(out)], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return out


def test_every_codex_message_that_names_a_turn_is_renamed_for_a_retry(schema):
    """A notification or server request codex adds that names a turn must
    join the lists, or a retry's would reach the client under its own id."""
    assert _turn_naming(schema, "ServerNotification.json") == set(TURN_NOTIFICATIONS)
    assert _turn_naming(schema, "ServerRequest.json") == set(TURN_SERVER_REQUESTS)


def test_the_client_requests_that_name_a_running_turn_carry_the_members_the_rules_say(schema):
    doc = json.loads((schema / "ClientRequest.json").read_text())
    defs = doc.get("definitions", {})
    members = {}
    for variant in doc["oneOf"]:
        method = variant["properties"]["method"]["enum"][0]
        if method in TURN_CLIENT_REQUESTS:
            ref = variant["properties"]["params"]["$ref"].rsplit("/", 1)[-1]
            members[method] = set(defs[ref]["properties"])
    assert set(members) == set(TURN_CLIENT_REQUESTS)
    for method, member in TURN_CLIENT_REQUESTS.items():
        assert member in members[method]
