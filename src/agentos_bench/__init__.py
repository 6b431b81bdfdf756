"""The bench kit, one package per tool; no module imports another in a cycle (tests/bench/test_layout.py).

- `mock`: the mock OpenAI-compatible provider (`agentos mock-llm`) and its contract check.
- `load`: the closed-loop load generator and `agentos bench sweep`.
- `memory`: `agentos bench memory`, the per-session memory staircase.
- `runs`: `agentos bench runs`, concurrent agent runs and runs waiting for a human.
- `report`: report files, plots, statistics, the machine header, `agentos bench compare`.
- `common`: what several tools use: /proc sampling, child processes, SSE parsing, the HTTP client.

`cli` and `cli_bench` wire the tools into the `agentos` command line.
"""
