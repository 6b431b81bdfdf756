"""The bench kit: mock provider, load generator, memory benchmark, reports."""
