-- Consistency checks of `lakecurate verify`.

-- name: success_chunks
SELECT chunk_key, delta_version FROM chunks WHERE status = 'SUCCESS';

-- name: open_intents
SELECT seq FROM commits WHERE status = 'INTENT' ORDER BY seq;

-- name: max_done_seq
SELECT coalesce(max(seq), 0) FROM commits WHERE status = 'DONE';

-- name: index_size
SELECT count(*) FROM content_hashes;

-- name: drop_intents
-- Before a resync from the table: the log's commits are re-recorded as DONE from the log itself.
DELETE FROM commits WHERE status = 'INTENT';
