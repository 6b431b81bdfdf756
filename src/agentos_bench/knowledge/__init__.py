"""`agentos bench knowledge`: ingest throughput, query latency at 10k and 100k chunks, recall@10
against exact search, and index memory, against a real `agentos serve` with the mock provider
(SQLite by default, `--backend postgres --postgres-url ...` for PostgreSQL).

    corpus.py   deterministic documents and queries
    client.py   the API calls, timed at the client
    metrics.py  the arithmetic (exact top k, recall, rates, percentiles), pure
    bench.py    the run: mock, server, phases
    report.py   JSON, Markdown, PNG (plot.py)
    cli.py      the command

The in-process parts live in `agentos_bench.micro` (they use the server's knowledge storage
and index directly): `knowledge_fill.py` (ingest through the server's storage, embedding
excluded) and `knowledge_measure.py` (a filled collection's exact answers, and the queries
judged against them).
"""
