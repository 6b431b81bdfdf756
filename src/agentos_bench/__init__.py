"""The bench kit: a client of the Agent OS server, one package per tool; no module imports
another in a cycle (tests/bench/test_layout.py). Installed with the server (`pip install -e .`),
run as `agentos bench ...`; `agentos` imports it only when `bench` is the command.

It imports only what the server documents as public:

- `agentos.client`: the typed HTTP client;
- `agentos.config`: settings, to write and read the profiles the bench starts servers with;
- `agentos.errors`: the error tree (`ConfigError` for a bad flag or profile);
- `agentos.waiting`: `wait_event`, a timed wait that never swallows a cancel;
- `agentos.mock`: the mock OpenAI-compatible provider every run points the server at;
- `agentos.providers.sse_parser`: the incremental SSE parser the clients read streams with.

Everything else of the server it reaches over HTTP, as a user would. The one exception is
`micro`: in-process microbenchmarks that by nature time one internal component (full-text
search, the auth middleware, the knowledge storage and index), and so import it. The
`[tool.importlinter]` contracts in pyproject.toml hold both rules (and that `agentos` never
imports `agentos_bench`).

- `load`: the closed-loop load generator and `agentos bench sweep` (`peers`: other agent servers on the same mock).
- `memory`: `agentos bench memory`, the per-item memory staircase (idle sessions, sessions with a
  turn, runs waiting for a human, ready sandboxes) with the server's heap beside RSS.
- `runs`: `agentos bench runs`, concurrent agent runs and runs waiting for a human.
- `arrival`, `authcost`, `faults`, `knowledge`, `overload`: `agentos bench load|auth-cost|faults|knowledge|overload`.
- `micro`: the in-process microbenchmarks (see above).
- `report`: report files, plots, statistics, the machine header, `agentos bench compare`.
- `common`: what several tools use: /proc sampling, child processes (the mock's too), the HTTP client.
- `profiles`: the server configurations a run starts with (`--profile NAME`), package data.

`cli` and `cli_bench` wire the tools into the `agentos` command line.
"""
