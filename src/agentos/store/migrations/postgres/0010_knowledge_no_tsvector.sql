-- The chunks' full-text vectors of 0006 (`tsv`, generated from `text`, under a GIN index) are
-- read by nothing: the service searches an in-memory BM25 index (agentos.knowledge.text_index)
-- built from `text`. Every chunk insert computed the vector and updated the GIN index for no
-- reader, so both go. Dropping a column rewrites no rows (the space is reclaimed as rows are
-- rewritten or by VACUUM FULL); dropping the index frees its pages at once.
DROP INDEX IF EXISTS knowledge_chunks_tsv;
ALTER TABLE knowledge_chunks DROP COLUMN IF EXISTS tsv;
