-- Re-deriving the state from the Delta table (restore, verify --repair). `present` is the table's
-- current (chunk_key, rows, kept) per chunk; `records` the commit metadata of those chunks
-- (chunk_key, seq, delta_version, rows_in, rows_kept, rows_malformed, worker, spec fields).

-- name: chunks_absent_from_table
-- Chunks the state calls committed but the table no longer holds: back to PENDING, so the next
-- ingest of their input processes them again.
SELECT chunk_key FROM chunks
WHERE status IN ('SUCCESS', 'COMMITTING') AND chunk_key NOT IN (SELECT chunk_key FROM present);

-- name: chunks_back_in_table
-- Chunks the table holds but the state does not call SUCCESS (restored, or a lost state file).
SELECT r.chunk_key FROM records r LEFT JOIN chunks c USING (chunk_key)
WHERE c.chunk_key IS NULL OR c.status <> 'SUCCESS';

-- name: requeue_absent
-- Back to PENDING as a chunk never processed: no counts, gates, redactions, worker or funnel of
-- the commit that is no longer in the table (status and sql would add them up otherwise).
UPDATE chunks SET status = 'PENDING', attempts = 0, commit_seq = NULL, delta_version = NULL,
    rows_in = NULL, rows_kept = NULL, rows_dropped = NULL, rows_malformed = NULL,
    gate_violations = NULL, redactions = NULL, worker = NULL, started_at = NULL,
    finished_at = NULL, heartbeat_at = NULL, last_error = NULL, traceback = NULL
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: clear_funnel_of_absent
DELETE FROM filter_stats WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: upsert_present
INSERT INTO chunks (chunk_key, source_path, source_sha256, format, chunk_index, byte_start,
    byte_end, row_group_start, row_group_end, first_line, input_sha256, input_bytes, status,
    attempts, worker, finished_at, rows_in, rows_kept, rows_dropped, rows_malformed, commit_seq,
    delta_version, run_id, created_at, gate_violations, redactions)
SELECT chunk_key, source_path, source_sha256, format, chunk_index, byte_start, byte_end,
    row_group_start, row_group_end, first_line, input_sha256, input_bytes, 'SUCCESS', 1, worker,
    now(), rows_in, rows_kept, rows_in - rows_kept - rows_malformed, rows_malformed, seq,
    delta_version, run_id, now(), gate_violations, redactions
FROM records
ON CONFLICT (chunk_key) DO UPDATE SET status = 'SUCCESS', commit_seq = excluded.commit_seq,
    delta_version = excluded.delta_version, rows_in = excluded.rows_in,
    rows_kept = excluded.rows_kept, rows_dropped = excluded.rows_dropped,
    rows_malformed = excluded.rows_malformed, worker = excluded.worker,
    gate_violations = excluded.gate_violations, redactions = excluded.redactions,
    run_id = excluded.run_id, last_error = NULL, traceback = NULL;

-- name: committed_seqs
-- Each committed chunk's commit seq: what `rebuild.rewrite_index` joins the table's rows with.
SELECT chunk_key, commit_seq AS seq FROM chunks WHERE status = 'SUCCESS';

-- name: content_from_table
-- As `recovery.content_rows` indexes a decided chunk: kept documents, and near duplicates
-- under the id of the kept document they are near (keys as halves, for `store.key_files`).
SELECT (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo, seq, doc_id
FROM (
    SELECT ('0x' || d.content_hash)::UHUGEINT AS k, r.seq,
           CASE WHEN d.kept THEN d.id ELSE d.dup_of END AS doc_id
    FROM table_rows d JOIN records r USING (chunk_key)
    WHERE d.kept OR (d.reason = 'near_dup' AND d.dup_of IS NOT NULL)
)
ORDER BY seq;

-- name: ids_from_table
SELECT (k >> 64)::UBIGINT AS hi, (k & 18446744073709551615::UHUGEINT)::UBIGINT AS lo, seq
FROM (
    SELECT DISTINCT md5_number(d.id) AS k, r.seq
    FROM table_rows d JOIN records r USING (chunk_key)
    WHERE d.id_given AND (d.reason IS NULL OR d.reason NOT LIKE 'malformed:%')
)
ORDER BY seq;

-- name: clear_stat_cache
-- Forget the stat cache: the next ingest re-hashes its inputs once and finds its chunks by key.
DELETE FROM sources;

-- name: clear_funnel_of_present
DELETE FROM filter_stats WHERE chunk_key IN (SELECT chunk_key FROM records);

-- name: insert_missing_commits
INSERT INTO commits (seq, kind, chunk_keys, status, run_id, intent_ns, delta_version, finished_at)
SELECT seq, kind, chunk_keys, 'DONE', run_id, 0, delta_version, now()
FROM log_commits WHERE seq NOT IN (SELECT seq FROM commits);

-- name: count_commits
SELECT count(*) FROM commits;

-- name: has_near_index
SELECT count(*) FROM information_schema.tables WHERE table_name = 'minhash_docs';

-- name: near_forget_absent_docs
-- Near-dedup index documents of chunks the table no longer holds (doc_seq = commit seq << 32 | row).
DELETE FROM minhash_docs WHERE (doc_seq >> 32) NOT IN (SELECT seq FROM records);

-- name: dangling_chunks
-- Chunks holding a duplicate whose original the table no longer has: an exact or near
-- duplicate whose `dup_of` names no kept row, or a repeated id that is now the only row with
-- that id. A restore to a version between a supersede and the new decisions it queued leaves
-- them; they are queued to be decided again.
SELECT DISTINCT d.chunk_key FROM table_rows d
WHERE d.reason IN ('exact_dup', 'near_dup')
  AND d.dup_of NOT IN (SELECT id FROM table_rows WHERE kept)
UNION
SELECT d.chunk_key FROM table_rows d
WHERE d.reason = 'duplicate_id'
  AND (SELECT count(*) FROM table_rows x WHERE x.id = d.id) < 2
ORDER BY 1;
