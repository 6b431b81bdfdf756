"""The knowledge metrics, read at scrape time from the indexer's counters and the index cache.

The backlog is the count the indexer's ticker last read from the store (every 1-16 s): a
scrape never waits on the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentos.knowledge.indexer import IndexerStats


class KnowledgeCollector(Collector):
    def __init__(self, stats: IndexerStats, index_bytes: Callable[[], int]) -> None:
        self._stats = stats
        self._index_bytes = index_bytes

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        yield GaugeMetricFamily(
            "agentos_knowledge_backlog", "Documents queued or being indexed (every tenant's, every node's)", s.backlog
        )
        yield GaugeMetricFamily(
            "agentos_knowledge_index_bytes",
            "Memory of this node's in-memory indexes (vectors and full text)",
            self._index_bytes(),
        )
        yield CounterMetricFamily(
            "agentos_knowledge_documents_indexed", "Documents this node indexed (ready)", s.documents_indexed
        )
        yield CounterMetricFamily(
            "agentos_knowledge_documents_failed", "Documents this node marked failed", s.documents_failed
        )
        yield CounterMetricFamily("agentos_knowledge_chunks_indexed", "Chunks this node indexed", s.chunks_indexed)
