"""The mock OpenAI-compatible provider: what `agentos serve` starts when no provider is configured
(`builtin`), `agentos mock-llm` (`main`), and the fake every load test and bench points at.

- `server`: the aiohttp app (chat completions streamed or whole, embeddings, models, metrics).
- `scenario`, `settings`, `wire`, `embeddings`: its answer scripts, knobs and faults, SSE frames, vectors.
- `check`, `chat_stream`: the contract check of a running mock (`agentos mock-llm check`), a client.
- `loop`: how a mock (or bench) process runs its event loop and raises its open-files limit.

It sits beside `providers/` and imports only `agentos.errors`, `agentos.config` and the pure
`agentos.providers.sse_parser` (the check's parser) of the product, never the runtime, the API
or the stores (an import-linter contract in pyproject.toml). The bench kit (`agentos_bench`)
uses it from here.
"""
