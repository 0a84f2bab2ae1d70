"""The history wing: what keeps the client's history whole, whatever the engine.

``backing`` (the client's threads and the Codex threads behind them, mapped
at the child's edge), ``archive`` (the turns rebuilds took out of Codex) and
``reads`` (splicing them back into the client's reads). Their hooks are the
``HISTORY`` rows of :data:`sidecar.methods.METHODS`, installed with any
engine, with none, and with either rebuild setting.
"""
