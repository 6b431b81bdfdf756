"""Knowledge: per-tenant collections of documents, indexed in the background, queried by
hybrid retrieval (vector nearest neighbours + full text, fused by reciprocal rank).

    records.py     the rows: Collection, DocumentRow, ChunkRow, Hit
    storage.py     the `KnowledgeStorage` protocol; sqlite_storage.py (knowledge.db) and
                   pg_storage.py (store.backend = "postgres") implement it
    extract.py     text out of plain text, Markdown, HTML and PDF
    chunking.py    token-aware chunks with overlap
    embeddings.py  the provider's /v1/embeddings, in batches, with retries and provider permits
    index.py       the in-memory vector index of a collection (numpy) and rank fusion
    indexer.py     the background worker: queued document -> chunks -> embeddings -> ready
    service.py     `KnowledgeService`: what the HTTP routes and the `search_knowledge` tool call
"""
