"""The transcript mirror: a thread's history as an OpenClaw session file.

The file itself (its layout, the keyed append-only log, idempotency,
durability, permissions) is :mod:`sidecar.store.sessionfile`'s
:class:`SessionFile`. :class:`TranscriptMirror` adds what the entries mean
to a model: the message view OpenClaw builds from the path to the leaf (kept
cached across this mirror's own appends), and the appends of messages,
compactions, custom entries and translated records. Entries written by other
tools (``model_change``, ``custom_message``, ...) are skipped by the context
view. A rewind makes a ``custom`` entry under an earlier entry the leaf, so
what it takes off stays in the file on a side branch.

Nothing here logs entry contents; logs carry paths, ids, counts and errnos.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from engines.api import AGENT_MESSAGE_ROLES, AgentMessage, CompactionSummaryMessage, from_openclaw, to_openclaw

from ..translate import MirrorMessage, NativeCompaction, Translated
from .sessionfile import (
    SESSION_VERSION,
    EntryBuilder,
    MirrorError,
    SessionFile,
    Writer,
    entry_id_for_key,
    iso_timestamp,
    now_ms,
    session_path,
)

log = logging.getLogger("codex_sidecar.mirror")

__all__ = [
    "SESSION_VERSION",
    "EntryBuilder",
    "MirrorError",
    "SessionFile",
    "TranscriptMirror",
    "Writer",
    "entry_id_for_key",
    "iso_timestamp",
    "now_ms",
    "session_path",
]


# -- the transcript mirror: what the entries mean -------------------------------


def _ms(iso: Any, default: int = 0) -> int:
    if isinstance(iso, (int, float)) and not isinstance(iso, bool):
        return int(iso)
    if not isinstance(iso, str):
        return default
    try:
        text = iso[:-1] + "+00:00" if iso.endswith("Z") else iso
        moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        return default
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return int(round(moment.timestamp() * 1000))


def _of_turn(key: str, turn_prefix: str, turn_id: str | None) -> bool:
    """``key`` starts with ``turn_prefix``, or (``turn_id`` given) is a key of
    that turn under any thread (a fork's mirror keeps its parent's keys for
    the turns it inherited)."""
    if key.startswith(turn_prefix):
        return True
    parts = key.split(":", 3)
    return turn_id is not None and len(parts) == 4 and parts[2] == turn_id


def _custom_builder(custom_type: str, data: Any, timestamp: int | None) -> EntryBuilder:
    when = now_ms() if timestamp is None else timestamp

    def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
        return {
            "type": "custom",
            "id": entry_id,
            "parentId": parent_id,
            "timestamp": iso_timestamp(when),
            "customType": custom_type,
            "data": data,
        }

    return build


class _View(NamedTuple):
    """What :meth:`TranscriptMirror.messages` returned for a leaf and file size."""

    leaf: str | None
    size: int
    ident: tuple[int, int]
    messages: list[AgentMessage]
    compacted: bool


class TranscriptMirror(SessionFile):
    """One thread's OpenClaw session file: its context view and its appends.

    Create with :meth:`open` (or :meth:`fork`); use as a context manager or
    call :meth:`close`. Methods are synchronous and do blocking file I/O:
    from trio, call them through ``trio.to_thread.run_sync``.
    """

    def _reset_index(self) -> None:
        super()._reset_index()
        self._messages: dict[str, AgentMessage | None] = {}
        self._view: _View | None = None

    def _append_locked(self, key: str, build: EntryBuilder, parent_id: str | None) -> bool:
        view, size_before, leaf_before = self._view, self._size, self._leaf_id
        if not super()._append_locked(key, build, parent_id):
            return False
        assert self._leaf_id is not None
        self._follow_view(view, size_before, leaf_before, self._by_id[self._leaf_id], parent_id)
        return True

    # ------------------------------------------------------------------
    # the context view

    def _entry_message(self, entry: dict[str, Any]) -> AgentMessage | None:
        """The entry's message, decoded once: the decoded message is kept
        and the entry's JSON body (and timestamp) dropped from the index, so
        a mirror holds each message once (:meth:`entries` and a fork read
        whole entries from the file)."""
        entry_id = entry["id"]
        if entry_id in self._messages:
            return self._messages[entry_id]
        message: AgentMessage | None = None
        raw = entry.pop("message", None)
        entry.pop("timestamp", None)  # the message's own is what the view uses
        role = raw.get("role") if isinstance(raw, dict) else None
        if role in AGENT_MESSAGE_ROLES:
            try:
                message = from_openclaw(raw)
            except msgspec.ValidationError as exc:
                log.warning(
                    "mirror message entry has a bad shape; skipped",
                    extra={"fields": {"path": str(self.path), "entryId": entry_id, "error": str(exc)[:200]}},
                )
        else:
            log.debug("mirror message role outside the contract; skipped", extra={"fields": {"role": str(role)[:64]}})
        self._messages[entry_id] = message
        return message

    def messages(self) -> list[AgentMessage]:
        """The session context along the leaf path, as OpenClaw builds it.

        Message entries become their AgentMessage; ``custom`` and other
        non-message entries are not context. After the latest ``compaction``
        entry on the path, the view is a ``CompactionSummaryMessage``, then
        the messages from ``firstKeptEntryId`` up to the compaction, then
        the messages after it.
        """
        with self._thread_lock:
            self.refresh()
            view = self._view
            if view is not None and view.leaf == self._leaf_id and view.size == self._size:
                return list(view.messages)
            out = self._extended(view) if view is not None else None
            compacted = False
            if out is None:
                out, compacted = self._compute_messages()
            self._view = _View(self._leaf_id, self._size, self._ident, out, compacted)
            return list(out)

    def cached_messages(self) -> list[AgentMessage] | None:
        """What :meth:`messages` returned last, if the file is still the same
        file and size (one ``stat`` and one ``fstat``; no lock, no read), else
        None. Lets the event loop skip a worker thread when nothing was
        written since, whoever the writer."""
        view, fd = self._view, self._fd
        if view is None or fd is None or view.leaf != self._leaf_id:
            return None
        try:
            st = os.fstat(fd)
            named = os.stat(self.path)
        except OSError:
            return None
        # The identities compared inline: this check is on every turn's path,
        # the session file's helpers are not.
        if st.st_size != view.size or (named.st_dev, named.st_ino) != view.ident or (st.st_dev, st.st_ino) != view.ident:
            return None
        return list(view.messages)

    def _extended(self, view: _View) -> list[AgentMessage] | None:
        """The last view plus the message entries appended after its leaf, when
        the new leaf descends from it through new entries only, none of them a
        compaction (the common case: a turn appended); else None."""
        if view.compacted or view.ident != self._ident or view.size > self._size:
            return None
        added: list[dict[str, Any]] = []
        current = self._by_id.get(self._leaf_id) if self._leaf_id else None
        budget = len(self._entries)
        while current is not None and current["id"] != view.leaf and budget > 0:
            if current.get("type") == "compaction":
                return None
            added.append(current)
            parent = current.get("parentId")
            current = self._by_id.get(parent) if isinstance(parent, str) else None
            budget -= 1
        if current is None and view.leaf is not None:
            return None  # not a descendant of the last view's leaf (a rewind, a branch)
        if current is not None and current["id"] != view.leaf:
            return None
        out = list(view.messages)
        for entry in reversed(added):
            if entry.get("type") == "message":
                message = self._entry_message(entry)
                if message is not None:
                    out.append(message)
        return out

    def _compute_messages(self) -> tuple[list[AgentMessage], bool]:
        """The whole path's view, and whether a compaction shaped it."""
        path = self._path_to_leaf()
        compaction_at = None
        for i in range(len(path) - 1, -1, -1):
            if path[i].get("type") == "compaction":
                compaction_at = i
                break
        out: list[AgentMessage] = []

        def add(entry: dict[str, Any]) -> None:
            if entry.get("type") == "message":
                message = self._entry_message(entry)
                if message is not None:
                    out.append(message)

        if compaction_at is None:
            for entry in path:
                add(entry)
            return out, False
        compaction = path[compaction_at]
        tokens_after = compaction.get("tokensAfter")
        out.append(
            CompactionSummaryMessage(
                summary=str(compaction.get("summary") or ""),
                tokens_before=int(compaction.get("tokensBefore") or 0),
                tokens_after=tokens_after if isinstance(tokens_after, int) else None,
                timestamp=_ms(compaction.get("timestamp")),
            )
        )
        first_kept = compaction.get("firstKeptEntryId")
        keeping = False
        for entry in path[:compaction_at]:
            keeping = keeping or entry["id"] == first_kept
            if keeping:
                add(entry)
        for entry in path[compaction_at + 1 :]:
            add(entry)
        return out, True

    def _follow_view(
        self, view: _View | None, size_before: int, leaf_before: str | None, entry: dict[str, Any], parent_id: str | None
    ) -> None:
        """Keep the cached view current across this mirror's own append of
        ``entry`` at the leaf (a message extends it, a custom entry leaves
        it as it is); anything else drops it."""
        self._view = None
        if view is None or view.size != size_before or view.leaf != leaf_before or parent_id != leaf_before:
            return
        kind = entry.get("type")
        if kind == "message":
            message = self._entry_message(entry)
            messages = [*view.messages, message] if message is not None else view.messages
        elif kind == "custom":
            messages = view.messages
        else:
            return
        self._view = view._replace(leaf=self._leaf_id, size=self._size, messages=messages)

    # ------------------------------------------------------------------
    # appending

    def append_message(self, message: AgentMessage, key: str) -> bool:
        """Append a ``message`` entry; False (nothing written) if ``key`` is present.

        The entry's timestamp is the message's own (ms).
        """
        body = to_openclaw(message)

        def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
            return {
                "type": "message",
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": iso_timestamp(message.timestamp),
                "message": body,
            }

        return self._append(key, build)

    def append_compaction(
        self,
        *,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        key: str,
        tokens_after: int | None = None,
        details: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
    ) -> bool:
        """Append a ``compaction`` entry (model context: the summary replaces history).

        ``first_kept_entry_id`` names the first entry still sent after the
        summary; it must be an entry of this file. ``None`` keeps nothing
        from before the compaction (written as the compaction's own id, which
        OpenClaw's reader treats the same way).
        """
        if first_kept_entry_id is not None and first_kept_entry_id not in self._by_id:
            self.refresh()
            if first_kept_entry_id not in self._by_id:
                raise ValueError("first_kept_entry_id is not an entry of this mirror")
        when = now_ms() if timestamp is None else timestamp

        def build(entry_id: str, parent_id: str | None) -> dict[str, Any]:
            entry: dict[str, Any] = {
                "type": "compaction",
                "id": entry_id,
                "parentId": parent_id,
                "timestamp": iso_timestamp(when),
                "summary": summary,
                "firstKeptEntryId": first_kept_entry_id or entry_id,
                "tokensBefore": tokens_before,
            }
            if tokens_after is not None:
                entry["tokensAfter"] = tokens_after
            if details is not None:
                entry["details"] = dict(details)
            return entry

        return self._append(key, build)

    def append_custom(self, custom_type: str, data: Any, key: str, *, timestamp: int | None = None) -> bool:
        """Append a ``custom`` entry (extension state; never model context)."""
        return self._append(key, _custom_builder(custom_type, data, timestamp))

    def rewind(
        self, turn_prefix: str, key: str, custom_type: str, data: Any, *, timestamp: int | None = None, turn_id: str | None = None
    ) -> bool:
        """Take the turn whose keys start with ``turn_prefix``, and every later
        one, off the session's context: a ``custom`` entry whose parent is the
        entry before that turn becomes the leaf, so the path to the leaf (what
        :meth:`messages` and OpenClaw read) skips them, and what comes next
        continues from there. The entries stay in the file (a branch, as
        OpenClaw's tree format allows). With ``turn_id``, that turn's keys
        under any thread id match too (a fork's inherited turns). False when
        ``key`` is present or the turn is not on the path."""
        with self._locked():
            if key in self._keys:
                return False
            path = self._path_to_leaf()
            at = next((i for i, e in enumerate(path) if _of_turn(str(e.get("idempotencyKey") or ""), turn_prefix, turn_id)), None)
            if at is None:
                return False
            parent = path[at - 1]["id"] if at > 0 else None
            return self._append_locked(key, _custom_builder(custom_type, data, timestamp), parent)

    def append_records(self, records: Iterable[Translated]) -> int:
        """Append translated records (``sidecar.translate``); returns how many were new.

        Stops at the first error (raised), so what came before it stays
        written and a retry with the same records appends only the rest.
        """
        added = 0
        for record in records:
            if isinstance(record, MirrorMessage):
                added += self.append_message(record.message, record.key)
            elif isinstance(record, NativeCompaction):
                added += self.append_custom(record.custom_type, record.data(), record.key, timestamp=record.timestamp)
            else:
                raise TypeError(f"not a mirror record: {type(record).__name__}")
        return added

    @classmethod
    def read_messages(cls, path: str | os.PathLike[str]) -> list[AgentMessage]:
        """The context view of the session file at ``path``, read under a
        shared lock without creating or writing anything (a file that does
        not exist or cannot be read raises ``MirrorError``)."""
        with cls._read_only(Path(path)) as file:
            return file.messages()
