"""Per-thread state, the settings that shape it, and the pure decisions made
from it (no I/O): a message's identity for the ledger and the plan for a turn."""
