"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway: config.py (light, read by the
registry at import), client.py (REST and WebSocket), executor.py (one kernel as a REPL),
routing.py (gateway or local REPL per language). Nothing is imported here, so that httpx and
websockets load only for a workspace that uses a gateway."""
