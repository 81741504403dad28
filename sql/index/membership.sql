-- Tier 2 of the membership index (authoritative): 128-bit keys of every document id and of the
-- content of every kept document and near duplicate in the lake (a near duplicate under the id
-- of the kept document it is near: `recovery.content_rows`), tagged with the commit seq that
-- added them: a Bloom file that covers seq <= W is topped up with seq > W, and a chunk's rows
-- leave by its seq. The keys are in Parquet files under index/keys (`store.key_files`); the
-- `index_files` table says which seqs of which file are in the index.

-- Keys travel to Python as two UBIGINT halves (Arrow has no 128-bit integer).

-- name: content_keys
-- `candidates(content_hash)`: md5 hex strings -> the two 64-bit halves of the 128-bit key.
SELECT content_hash, (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM (SELECT content_hash, ('0x' || content_hash)::UHUGEINT AS k FROM candidates);

-- name: id_keys
-- `candidates(id)`: document ids -> the two 64-bit halves of md5_number(id).
SELECT id, (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo
FROM (SELECT id, md5_number(id) AS k FROM candidates);

-- name: database_path
SELECT path FROM duckdb_databases() WHERE database_name = current_database();

-- name: register_file
-- `key_file_rows(seq, rows)`: a key file's rows per commit seq, in the caller's transaction.
INSERT INTO index_files (space, file, seq, rows)
SELECT $space, $file, seq, rows FROM key_file_rows;

-- name: forget_seqs
-- A chunk's keys leave with its commit seq (`chunks.commit_seq`); its file stays until swept.
DELETE FROM index_files WHERE space = $space AND seq IN (SELECT unnest($seqs::BIGINT[]));

-- name: forget_space
DELETE FROM index_files WHERE space = $space;

-- name: files_fingerprint
-- What the key cache checks before it answers: keys and largest seq, from the registry alone.
SELECT coalesce(sum(rows), 0), coalesce(max(seq), -1) FROM index_files WHERE space = $space;

-- name: registered_files
-- Each file holding keys of `$space` above seq `$since`, with those seqs, oldest file first.
SELECT file, list(seq ORDER BY seq) FROM index_files
WHERE space = $space AND seq > $since
GROUP BY file ORDER BY min(seq), file;

-- name: file_rows
-- Each file of `$space` with its registered keys, oldest file first (`registered_files`'s order).
SELECT file, sum(rows) FROM index_files WHERE space = $space
GROUP BY file ORDER BY min(seq), file;

-- name: unregister_files
-- A compaction's merged files leave the registry (their keys are registered under the new file
-- in the same transaction); `sweep` deletes them.
DELETE FROM index_files WHERE space = $space AND file IN (SELECT unnest($files::VARCHAR[]));

-- name: named_files
SELECT DISTINCT file FROM index_files;

-- name: counts
SELECT (SELECT coalesce(sum(rows), 0) FROM index_files WHERE space = 'content') AS content,
       (SELECT coalesce(sum(rows), 0) FROM index_files WHERE space = 'ids') AS ids,
       (SELECT coalesce(max(seq), 0) FROM commits WHERE status = 'DONE') AS watermark;

-- name: tier2_sizes
SELECT (SELECT coalesce(sum(rows), 0) FROM index_files WHERE space = 'content') AS content,
       (SELECT coalesce(sum(rows), 0) FROM index_files WHERE space = 'ids') AS ids;

-- name: has_key_tables
-- (`key_files.move_out`: the layout before kept the keys in DuckDB tables.)
SELECT count(*) FROM information_schema.tables
WHERE table_name = 'content_hashes' AND table_type = 'BASE TABLE';

-- name: old_content
SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT AS lo,
       seq, doc_id
FROM content_hashes ORDER BY seq;

-- name: old_ids
SELECT (hash >> 64)::UBIGINT AS hi, (hash & 18446744073709551615::UHUGEINT)::UBIGINT AS lo, seq
FROM doc_ids ORDER BY seq;

-- name: drop_key_tables
DROP TABLE content_hashes;
DROP TABLE doc_ids;

-- name: content_of_committed_chunks
-- `index_rows(content_hash, id, chunk_key)` of committed chunks, each with its chunk's commit
-- seq (`recovery.index_near_duplicates` indexes them again).
SELECT i.content_hash, i.id, c.commit_seq AS seq
FROM index_rows i JOIN chunks c ON c.chunk_key = i.chunk_key AND c.status = 'SUCCESS';
