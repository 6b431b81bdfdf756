"""What one `agentos bench knowledge` run measures, sized by `--scale`, and the server's config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos_bench.knowledge.metrics import scaled

TENANT = "default"  # the open loopback mode's tenant: the bench runs without keys
WORDS_PER_DOCUMENT = 195  # about 300 tokens by the chunker's estimate (made-up words count 1.5 each)
CHUNK_TOKENS = 64
CHUNK_OVERLAP = 8
TOP_K = 10
# The targets (issue 10): p95 at 100k chunks on the embedded backend, and recall@10.
TARGET_P95_MS = 20.0
TARGET_RECALL = 0.95
MAX_DOCUMENTS = 100_000  # per collection, in the server's config: the 100k-chunk one needs about 20 000
ONE_GROUP = {"group": "g3"}  # the filtered queries' filter: a tenth of the documents


@dataclass(frozen=True, kw_only=True)
class KnowledgePlan:
    scale: float = 1.0
    backend: str = "sqlite"  # or "postgres"
    postgres_url: str = ""
    dimensions: int = 256
    seed: int = 1
    command: str = ""
    budget_s: float = 60.0  # per query configuration: past it (and 20 queries) the rest is skipped
    api_concurrency: int = 4
    ingest_timeout_s: float = 600.0

    @property
    def api_documents(self) -> int:
        """Documents uploaded through the API (embedding included)."""
        return scaled(300, self.scale, 5)

    @property
    def sizes(self) -> tuple[int, int]:
        """The chunk counts queried: 10k and 100k at scale 1."""
        return scaled(10_000, self.scale, 50), scaled(100_000, self.scale, 200)

    @property
    def queries(self) -> int:
        """Measured queries per configuration (p95 needs at least 20)."""
        return scaled(200, self.scale, 20)

    @property
    def warmup_queries(self) -> int:
        return scaled(10, self.scale, 2)


def collection_name(chunks: int) -> str:
    return f"c{chunks}"


def server_config(plan: KnowledgePlan, schema: str) -> dict[str, Any]:
    """The server's settings tree (written as its TOML config, and read back in process by the
    fill, so both open the same storage)."""
    tree: dict[str, Any] = {"knowledge": {"max_documents": MAX_DOCUMENTS, "index_idle_s": 3600.0}}
    if plan.backend == "postgres":
        tree["store"] = {"backend": "postgres", "postgres_url": plan.postgres_url, "postgres_schema": schema}
    return tree


def toml_text(tree: dict[str, Any]) -> str:
    """A two-level settings tree as TOML (strings, numbers and booleans only)."""
    lines: list[str] = []
    for table, values in tree.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def write_config(plan: KnowledgePlan, work_dir: Path, schema: str) -> Path:
    path = work_dir / "agentos.toml"
    path.write_text(toml_text(server_config(plan, schema)))
    return path
