"""Shared by several bench tools: /proc sampling, child processes, SSE parsing, the HTTP client, the loop."""
