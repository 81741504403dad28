-- The index rows name their chunk by the commit seq they already carry (a chunk's rows carry
-- its `chunks.commit_seq`, as the band index's do): the chunk key on every row was half of the
-- bytes the driver wrote to the WAL per document (issue 14).
ALTER TABLE content_hashes DROP COLUMN chunk_key;
ALTER TABLE doc_ids DROP COLUMN chunk_key;
