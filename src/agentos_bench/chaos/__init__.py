"""The cluster chaos campaign (`agentos bench faults --cluster`, issue #26): see `agentos_bench.chaos.bench`."""
