-- Tier 2 of the membership index (authoritative): 128-bit keys of every document id and of the
-- content of every kept document and near duplicate in the lake (a near duplicate under the id
-- of the kept document it is near: `recovery.content_rows`), tagged with the commit seq that
-- added them: a Bloom file that covers seq <= W is topped up with seq > W, and a chunk's rows
-- leave by its seq.

-- Keys travel to Python as two UBIGINT halves (Arrow has no 128-bit integer).

-- name: content_keys
-- `candidates(content_hash)`: md5 hex strings -> the two 64-bit halves of the 128-bit key.
SELECT content_hash, (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM (SELECT content_hash, ('0x' || content_hash)::UHUGEINT AS k FROM candidates);

-- name: id_keys
-- `candidates(id)`: document ids -> the two 64-bit halves of md5_number(id).
SELECT id, (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM (SELECT id, md5_number(id) AS k FROM candidates);

-- name: insert_content
-- `index_rows(content_hash, id)`: the kept rows of a decided chunk (index.py `add`).
INSERT INTO content_hashes (hash, doc_id, seq)
SELECT ('0x' || content_hash)::UHUGEINT, id, $seq FROM index_rows;

-- name: insert_ids
-- `index_rows(id)`: every row whose id came from the source; an id repeated within a chunk is
-- one row, as in rebuild.
INSERT INTO doc_ids (hash, seq)
SELECT DISTINCT md5_number(id), $seq FROM index_rows;

-- name: content_of_committed_chunks
-- `index_rows(content_hash, id, chunk_key)` of the committed chunks `$keys` replace their rows
-- (`recovery.index_near_duplicates`, after `remove_content_of_commits`), each with its
-- chunk's commit seq.
INSERT INTO content_hashes (hash, doc_id, seq)
SELECT ('0x' || i.content_hash)::UHUGEINT, i.id, c.commit_seq
FROM index_rows i JOIN chunks c ON c.chunk_key = i.chunk_key AND c.status = 'SUCCESS';

-- name: remove_content_of_commits
-- A chunk's rows carry its commit seq (`chunks.commit_seq`): they go by it.
DELETE FROM content_hashes WHERE seq IN (SELECT unnest($seqs::BIGINT[]));

-- name: remove_ids_of_commits
DELETE FROM doc_ids WHERE seq IN (SELECT unnest($seqs::BIGINT[]));

-- name: content_since
-- Keys added after a Bloom file's watermark (all of them when $since is -1).
SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM content_hashes WHERE seq > $since;

-- name: ids_since
SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM doc_ids WHERE seq > $since;

-- name: counts
SELECT (SELECT count(*) FROM content_hashes) AS content, (SELECT count(*) FROM doc_ids) AS ids,
       (SELECT coalesce(max(seq), 0) FROM commits WHERE status = 'DONE') AS watermark;

-- name: tier2_sizes
SELECT (SELECT count(*) FROM content_hashes) AS content, (SELECT count(*) FROM doc_ids) AS ids;

-- name: content_entries
-- Every content key with the commit seq and the document id it stands for: what the key cache
-- (store.key_cache) holds, read once per run when a lookup first needs it.
SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT AS lo,
       seq, doc_id
FROM content_hashes;

-- name: content_fingerprint
-- What the key cache checks before it answers (row-group statistics, and deletion counts where
-- rows were deleted: no key is read).
SELECT count(*), coalesce(max(seq), -1) FROM content_hashes;

-- name: ids_fingerprint
SELECT count(*), coalesce(max(seq), -1) FROM doc_ids;
