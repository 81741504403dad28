-- `lakecurate history` and `lakecurate diff`. `log_commits` is the Delta log as rows
-- (lakecurate.history.log_rows); `documents` is version B, `documents_a` version A.

-- name: history
SELECT l.version, l.timestamp, l.operation, l.seq, l.chunk_keys, l.rows_added, l.rows_removed,
       l.files_added, l.files_removed, l.run_id,
       coalesce(l.config_hash, nullif(r.config_hash, '')) AS config_hash,
       r.command, l.detail
FROM log_commits AS l
LEFT JOIN runs AS r USING (run_id)
ORDER BY l.version;

-- name: diff_pairs
-- One row per input record present in A, in B, or in both.
CREATE TEMP VIEW diff_pairs AS
SELECT coalesce(b.chunk_key, a.chunk_key) AS chunk_key,
       coalesce(b.source_line, a.source_line) AS source_line,
       coalesce(b.id, a.id) AS id,
       CASE WHEN a.chunk_key IS NULL THEN 'added'
            WHEN b.chunk_key IS NULL THEN 'removed'
            WHEN a.kept IS DISTINCT FROM b.kept OR a.reason IS DISTINCT FROM b.reason
                THEN 'changed'
            ELSE 'same' END AS change,
       a.kept AS kept_a, a.reason AS reason_a, b.kept AS kept_b, b.reason AS reason_b,
       a.content_hash AS content_hash_a, b.content_hash AS content_hash_b
FROM (SELECT chunk_key, source_line, id, kept, reason, content_hash FROM documents_a) AS a
FULL OUTER JOIN (SELECT chunk_key, source_line, id, kept, reason, content_hash FROM documents) AS b
    USING (chunk_key, source_line);

-- name: diff_summary
WITH kinds(change, ord) AS (VALUES ('added', 1), ('removed', 2), ('changed', 3))
SELECT k.change, count(p.change) AS rows,
       count(*) FILTER (WHERE p.kept_a) AS kept_a,
       count(*) FILTER (WHERE p.kept_b) AS kept_b,
       count(DISTINCT p.chunk_key) AS chunks
FROM kinds AS k
LEFT JOIN diff_pairs AS p USING (change)
GROUP BY k.change, k.ord
ORDER BY k.ord;

-- name: diff_rows
SELECT change, chunk_key, source_line, id, kept_a, reason_a, kept_b, reason_b
FROM diff_pairs
WHERE change <> 'same'
ORDER BY chunk_key, source_line
LIMIT coalesce($limit, 9223372036854775807);

-- name: explain
-- Every row of the document in this version (an id can occur more than once: the same record
-- in overlapping snapshots), with its chunk's state, the run that committed it and the commit.
SELECT h.id, h.kept, h.reason, h.detail, h.error, h.dup_of, h.cluster_id, h.lang,
       h.lang_score, h.content_hash, h.source_path, h.source_line, h.chunk_key,
       h.input_sha256, h.run_id, h.config_hash,
       c.status AS chunk_status, c.commit_seq, c.delta_version AS committed_in_version,
       c.attempts AS chunk_attempts, c.worker, c.finished_at AS chunk_finished_at,
       r.command AS run_command, r.started_at AS run_started_at, r.outcome AS run_outcome,
       r.lakecurate_version, length(h.text) AS text_chars, h.meta,
       left(h.text, 160) AS text_start
FROM documents AS h
LEFT JOIN chunks AS c ON c.chunk_key = h.chunk_key
LEFT JOIN runs AS r ON r.run_id = h.run_id
WHERE h.id = $id
ORDER BY h.chunk_key, h.source_line;

-- name: explain_original
SELECT 'original' AS relation, id, kept, reason, cluster_id, chunk_key, source_line
FROM documents
WHERE id = $id AND kept;

-- name: explain_duplicates
SELECT 'duplicate' AS relation, id, kept, reason, cluster_id, chunk_key, source_line
FROM documents
WHERE dup_of = $id
ORDER BY chunk_key, source_line;

-- name: explain_cluster
SELECT 'same cluster' AS relation, id, kept, reason, cluster_id, chunk_key, source_line
FROM documents
WHERE cluster_id = $cluster AND id <> $id
ORDER BY chunk_key, source_line;
