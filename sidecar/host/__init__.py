"""The engine's host: what the sidecar gives an engine beyond the turn lifecycle.

The contract's additions (``docs/ENGINE_API.md``, "Additions: engine tools
and the host"), one concept a module:

* :mod:`.tools` -- pure decisions about engine tools: merging them into a
  client's ``dynamicTools``, which calls and items are the engine's, the
  answer Codex expects, removing those items from what the client reads;
* :mod:`.offered` -- which engine tools each client thread was given
  (a small file per thread, so a restart keeps answering them);
* :mod:`.engine_tools` -- the hooks: tools offered on ``thread/start``, calls
  answered through ``call_tool``, their frames and items kept from the client;
* :mod:`.completion` -- ``host.complete``: one model call on a Codex thread
  the sidecar owns, hidden at the child's edge;
* :mod:`.binding` -- the :class:`~engines.api.EngineHost` itself and ``bind``.

See ``docs/host.md``.
"""

from .binding import SidecarHost, bind_engine, engine_state_dir
from .completion import Completions
from .engine_tools import EngineTools

__all__ = ["Completions", "EngineTools", "SidecarHost", "bind_engine", "engine_state_dir"]
