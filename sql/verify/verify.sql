-- Consistency checks of `lakecurate verify`.

-- name: success_chunks
SELECT chunk_key, delta_version FROM chunks WHERE status = 'SUCCESS';

-- name: open_intents
SELECT seq FROM commits WHERE status = 'INTENT' ORDER BY seq;

-- name: max_done_seq
SELECT coalesce(max(seq), 0) FROM commits WHERE status = 'DONE';

-- name: drop_intents
-- Before a resync from the table: the log's commits are re-recorded as DONE from the log itself.
DELETE FROM commits WHERE status = 'INTENT';

-- name: drop_commits_beyond
-- Commits the state calls done but the Delta log does not hold (its last entry was lost or set
-- aside as torn): forgotten, so the state's last commit is the log's watermark again.
DELETE FROM commits WHERE seq > $watermark RETURNING seq;

-- name: text_hash_mismatches
-- `verify --deep`, one data file at a time (`file_rows`): a document's content_hash is md5 of
-- its final text (sql/worker/decide.sql), so a mismatch is damage the Parquet reader missed.
SELECT count(*) FROM file_rows WHERE content_hash IS NOT NULL AND md5(text) <> content_hash;

-- name: kept_ids_twice
-- A document id kept more than once (ids are unique among kept documents: given ones through
-- the duplicate-id check, derived ones by their path and line).
SELECT id, count(*) AS n FROM table_rows WHERE kept GROUP BY id HAVING count(*) > 1
ORDER BY id LIMIT 20;

-- name: stale_band_docs
-- Band-index documents of commits no SUCCESS chunk has (doc_seq = commit seq << 32 | row).
SELECT count(*) FROM minhash_docs
WHERE doc_seq >> 32 NOT IN (SELECT commit_seq FROM chunks WHERE status = 'SUCCESS'
                            AND commit_seq IS NOT NULL);

-- name: band_docs_without_signature
-- Band-index documents whose signature (or band hashes) is in no signature (band) file
-- (`signed_docs`: every doc_seq the files hold): verification would have nothing to compare
-- them with, or the band cache nothing to load.
SELECT count(*) FROM minhash_docs ANTI JOIN signed_docs USING (doc_seq);

-- name: band_docs_not_in_table
-- Band-index documents whose id the chunk committed with that seq does not hold.
SELECT count(*) FROM minhash_docs d
JOIN chunks c ON c.commit_seq = d.doc_seq >> 32 AND c.status = 'SUCCESS'
ANTI JOIN table_rows t ON t.chunk_key = c.chunk_key AND t.id = d.doc_id;
