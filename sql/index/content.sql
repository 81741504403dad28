-- Tier 2 of the membership index: the content hashes of every kept document in the lake.

-- name: seen
-- Which of the candidate hashes (`candidates`, a table of md5 hex strings) are already in the lake,
-- and under which document id.
SELECT c.content_hash, h.doc_id
FROM candidates c
JOIN content_hashes h ON h.hash = ('0x' || c.content_hash)::UHUGEINT;

-- name: add
INSERT INTO content_hashes
SELECT ('0x' || content_hash)::UHUGEINT, id, chunk_key FROM new_hashes;

-- name: remove_chunks
DELETE FROM content_hashes WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));
