"""The `search_knowledge` tool: the run's tenant's collections searched, the hits given to the
model as numbered excerpts it can cite.

Usage::

    content = await search_knowledge(service.knowledge, "acme", spec, {"query": "refunds", "top_k": 5})

The tenant is always the run's: the spec only names collections, and the knowledge service
resolves names within that tenant (another tenant's collection of the same name is not found).
Anything that goes wrong (a collection deleted since the agent was defined, the embedding
provider down) becomes an `error: ...` result the model reads, never a failed run: a search
only reads, so the model may simply try again or answer without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentos.config.agents import AgentSpec
from agentos.errors import AgentOSError

if TYPE_CHECKING:
    from agentos.knowledge.service import KnowledgeService

DEFAULT_TOP_K = 5
MAX_TOP_K = 20
MAX_QUERY_CHARS = 2000  # a query is embedded whole: a page of text is already more than a question
MAX_EXCERPT_CHARS = 1200  # per hit: 20 hits stay a bounded part of the model's context
CITE_INSTRUCTION = "Cite the excerpts you use by their number, as [1]."


async def search_knowledge(
    knowledge: KnowledgeService | None, tenant_id: str, spec: AgentSpec, arguments: Mapping[str, Any]
) -> str:
    """The tool's result text: numbered excerpts and how to cite them, or `error: <why>`."""
    if knowledge is None:
        return "error: knowledge search is not available on this server"
    try:
        query, top_k = parse_arguments(arguments)
    except ValueError as exc:
        return f"error: {exc}"
    try:
        hits = await knowledge.search(tenant_id, spec.knowledge, query, top_k)
    except AgentOSError as exc:  # not found, provider down, storage unavailable: the model is told
        return f"error: {getattr(exc, 'code', None) or type(exc).__name__}: {exc}"
    return format_hits(hits)


def parse_arguments(arguments: Mapping[str, Any]) -> tuple[str, int]:
    """(query, top_k) from the model's arguments.

    Raises:
        ValueError: the message says what the model sent wrong.
    """
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("search_knowledge needs a non-empty string `query`")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"`query` is {len(query)} characters; at most {MAX_QUERY_CHARS}")
    top_k = arguments.get("top_k")
    if top_k is None:
        top_k = DEFAULT_TOP_K
    # bool is an int in Python; `true` is not a count
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"`top_k` must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return query.strip(), top_k


def format_hits(hits: list[dict[str, Any]]) -> str:
    """`[n] <collection>/<document_id> "<title>" (chunk <ordinal>): <text>` per hit, then the
    instruction to cite; a message saying nothing matched when there are no hits."""
    if not hits:
        return "No excerpts matched the query."
    lines = [_excerpt(n, hit) for n, hit in enumerate(hits, 1)]
    return "\n\n".join([*lines, CITE_INSTRUCTION])


def _excerpt(n: int, hit: Mapping[str, Any]) -> str:
    text = " ".join(str(hit.get("text", "")).split())  # one line per excerpt: citations stay easy to spot
    if len(text) > MAX_EXCERPT_CHARS:
        text = text[:MAX_EXCERPT_CHARS].rstrip() + " ..."
    title = str(hit.get("title") or "").replace('"', "'")
    source = f"{hit.get('collection', '')}/{hit.get('document_id', '')}"
    return f'[{n}] {source} "{title}" (chunk {hit.get("ordinal", 0)}): {text}'
