"""What the sidecar keeps under its state directory, one file kind a module.

``mirror`` (a thread's history as an OpenClaw session file: the file and
what its entries mean), ``archive`` (turns rebuilds took out of Codex), ``reads`` (splicing
them back into the client's reads), ``ledger`` (what each Codex thread
holds), ``injected`` (what the client injected outside turns), ``inspect``
(per-turn records), ``private`` (0700 folders), ``usable`` (whether the
state dir can be used at start-up, and what is wrong when not); ``lossless_view`` reads the
lossless engine's store for ``codex-sidecar engines lossless status``.

Nothing is imported here: each user imports the module it needs.
"""
