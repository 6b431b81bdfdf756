"""`agentos bench memory`: the per-session memory staircase of the server."""
