"""In-process microbenchmarks: each times one internal component of the server, so each imports it.

This is the one part of the bench kit allowed to import the server's internals (the rest talks
to a running `agentos serve` over HTTP and imports only the documented public modules; see
`agentos_bench` and the `[tool.importlinter]` contracts in pyproject.toml).

- `fts`: full-text and vector search over the knowledge storage (`python -m agentos_bench.micro.fts`).
- `fts_relevance`: recall@10 of those rankings against SQLite's exhaustive bm25.
- `auth`: the authentication and rate-limit middleware alone (`agentos bench auth-cost`'s in-process part).
- `knowledge_fill`, `knowledge_measure`: `agentos bench knowledge`'s in-process fill of a
  collection through the server's storage, and the exact answers its queries are judged against.
"""
