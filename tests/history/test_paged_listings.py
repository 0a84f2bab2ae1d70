"""A page of a thread's archived turns reads those turns alone
(``sidecar.history.listings`` over ``HiddenTurns``, without processes): the
hidden turns are ids and places in the archive file, and a page reads back
only what it shows (counted through ``HiddenTurns._read``, the one place a
turn is read back), with the same bytes as when every turn was read.

Paging itself, over the fake app-server: test_reads.py, test_cursors.py."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from protocol import parse
from sidecar.history.archive import HiddenTurns, TurnArchive, archive_path, wrap_cursor
from sidecar.history.reads import ArchivedTurns
from sidecar.relay import HANDLED, Message, PendingRequest

X = "01a20000-0000-7000-8000-000000000001"
TURNS = 120


def items(k: int) -> list[dict[str, Any]]:
    return [
        {"type": "userMessage", "id": f"u{k}", "content": [{"type": "text", "text": f"prompt {k}"}]},
        {"type": "commandExecution", "id": f"c{k}", "command": "ls", "aggregatedOutput": "x" * 50},
        {"type": "agentMessage", "id": f"a{k}", "text": f"reply {k}"},
    ]


class Router:
    def __init__(self) -> None:
        self.answers: list[bytes] = []
        self.observed = SimpleNamespace(codex_version=None)

    def answer_client_request(self, _id: Any, line: bytes) -> None:
        self.answers.append(line)


class Proxy:
    def __init__(self) -> None:
        self.router = Router()

    def spawn(self, fn, *args) -> None:
        pass


class ReadWhole(ArchivedTurns):
    """Every archived turn read back up front (as before pages read their own)."""

    def hidden_for(self, thread_id: str):
        return list(super().hidden_for(thread_id))


@pytest.fixture
def archived(tmp_path):
    archive = TurnArchive(archive_path(tmp_path, X))
    for k in range(TURNS):
        archive.append_turn({"id": f"t{k}", "status": "completed", "items": items(k)})
    archive.mark_dropped([f"t{k}" for k in range(TURNS)])
    return tmp_path


@pytest.fixture
def reads_counted(monkeypatch):
    """How many archived turns were read back, one entry a read."""
    counts: list[int] = []
    read = HiddenTurns._read

    def counting(self, spans):
        counts.append(len(spans))
        return read(self, spans)

    monkeypatch.setattr(HiddenTurns, "_read", counting)
    return counts


def listing(reads: ArchivedTurns, method: str, params: dict[str, Any], codex_page: dict[str, Any] | None = None) -> bytes:
    """The client's answer: the sidecar's own, or Codex's ``codex_page`` as the hooks leave it."""
    line = json.dumps({"id": 7, "method": method, "params": {"threadId": X, **params}}).encode()
    pending = PendingRequest(7, method, 7)
    msg = Message(parse(line), line, request=pending)
    hook = reads.on_turns_list if method == "thread/turns/list" else reads.on_items_list
    if hook(msg) is HANDLED:
        [answer] = reads.proxy.router.answers  # type: ignore[attr-defined]
        return answer
    assert codex_page is not None, "the sidecar answered nothing: Codex's page is needed"
    line = json.dumps({"id": 7, "result": codex_page}).encode()
    answer = Message(parse(line), line)
    reads.on_list_response(answer, pending)
    return answer.wire()


CODEX_PAGE = {"data": [{"id": "live1", "items": [], "status": "completed"}], "nextCursor": None, "backwardsCursor": None}

PAGES = [
    ("thread/turns/list", {"cursor": "codex-sidecar:turns:desc:80", "limit": 10}, None, 10),
    ("thread/turns/list", {"cursor": "codex-sidecar:turns:asc:50", "limit": 7, "sortDirection": "asc", "itemsView": "full"}, None, 7),
    ("thread/turns/list", {"sortDirection": "asc", "limit": 10, "itemsView": "notLoaded"}, None, 10),
    ("thread/turns/list", {"cursor": wrap_cursor("codex", "t40", False), "limit": 5}, None, 5),
    ("thread/turns/list", {"limit": 10}, CODEX_PAGE, 9),  # Codex's one turn, then 9 archived ones
    ("thread/items/list", {"turnId": "t33", "limit": 2}, None, 1),
]


KINDS = ["desc-from-a-cursor", "asc-from-a-cursor-full", "asc-first-page-notLoaded", "wrapped-cursor", "desc-after-codex-s-own", "items-of-one-turn"]


@pytest.mark.parametrize(("method", "params", "codex_page", "read"), PAGES, ids=KINDS)
def test_a_page_of_archived_turns_reads_back_only_its_own_turns(archived, reads_counted, method, params, codex_page, read):
    reads = ArchivedTurns(Proxy(), archived)  # type: ignore[arg-type]
    reads.hidden_for(X)  # the ids and places, as a session's opening loads them
    answer = json.loads(listing(reads, method, params, codex_page))
    assert answer["result"]["data"], "a page of archived units"
    assert sum(reads_counted) == read


@pytest.mark.parametrize(("method", "params", "codex_page", "read"), PAGES, ids=KINDS)
def test_a_page_read_as_it_goes_is_the_page_read_whole_byte_for_byte(archived, method, params, codex_page, read):
    lazy = listing(ArchivedTurns(Proxy(), archived), method, params, codex_page)  # type: ignore[arg-type]
    whole = listing(ReadWhole(Proxy(), archived), method, params, codex_page)  # type: ignore[arg-type]
    assert lazy == whole
