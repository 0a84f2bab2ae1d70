"""What the sidecar keeps under its state directory, one file kind a module.

``mirror`` (a thread's history as an OpenClaw session file: the file and
what its entries mean), ``ledger`` (what each Codex thread holds),
``bindings`` (each thread's session), ``learned`` (the journal of learned
facts, by session), ``injected`` (what the client injected outside turns),
``inspect`` (per-turn records), ``private`` (0700 folders), ``usable``
(whether the state dir can be used at start-up, and what is wrong when
not); ``lossless_view`` finds the lossless engine's store (SQLite or
PostgreSQL) for ``codex-sidecar engines lossless status``, ``doctor`` and
``backup``. The turns rebuilds took out of Codex and the backing-thread map
live in the history wing (``sidecar.history``).

Nothing is imported here: each user imports the module it needs.
"""
