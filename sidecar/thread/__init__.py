"""A thread's state and its one owner: the ground floor of the context half.

What the sidecar knows of one client thread in this process is a handful of
records (:mod:`.state`: the session, its turns, its revert noise, with the
turn slot's transitions as their methods, and the learned-facts machine,
whose vocabulary is :mod:`.learned`), and only this package writes them:
:mod:`.holdings` (what the Codex thread holds: the ledger's view, and the
one place its record is built), :mod:`.opening` (identity, opening, release,
learned facts, client reverts and injections). Every change goes
through the thread's machine, ``state.handle(session, event)``: frozen
events in, action records out (:mod:`.events`, :mod:`.session_events`),
one rule per event (the rules of a turn's start in :mod:`.state`, the
others of a turn in :mod:`.machine`, the session half's in
:mod:`.session_rules`). The lifecycle's jobs do the I/O (locks, files,
engine calls, the relay): they build the events and carry the actions out
(``sidecar/host`` keeps an engine tool's call record through a transition,
``opening.engine_tool_called``, directly); rules and transitions are pure,
tested without processes (``tests/thread/``). No trio and no relay at run time, and nothing
of ``sidecar.store`` at all: the thread's trio primitives and open files are
handles the lifecycle gives it, its files named by Protocols of its own
(:mod:`.files`) that the store's classes satisfy. ``tests/docs/test_thread_state_owner.py`` counts the
writes to the records from outside the package (none) and the ledger states
built by hand (none).
"""
