-- `lakecurate report --html`: what the page shows, for the version bound to `documents`.

-- name: summary
SELECT count(*) AS rows, count(*) FILTER (WHERE kept) AS kept,
       count(*) FILTER (WHERE NOT kept) AS dropped,
       count(*) FILTER (WHERE reason LIKE 'malformed:%') AS malformed,
       count(DISTINCT chunk_key) AS chunks, count(DISTINCT source_path) AS sources,
       coalesce(sum(length(text)) FILTER (WHERE kept), 0) AS kept_chars,
       string_agg(DISTINCT config_hash, ', ') AS config_hashes
FROM documents;

-- name: funnel
-- Every pipeline step with the rows of this version it dropped, in pipeline order (the state's
-- step numbers, steps that dropped nothing included); a malformed record is dropped by `parse`,
-- a document a PII type dropped (`filter:pii`, detail `pii.<type>=n`) by `pii:<type>`; reasons
-- with no step of their own come last.
WITH steps AS (SELECT step, min(step_no) AS step_no FROM filter_stats GROUP BY step),
dropped AS (
    SELECT CASE WHEN reason LIKE 'malformed:%' THEN 'parse'
                WHEN reason = 'filter:pii' AND detail LIKE 'pii.%=%'
                    THEN 'pii:' || split_part(split_part(detail, '=', 1), '.', 2)
                ELSE coalesce(reason, '?') END AS step,
           count(*) AS n
    FROM documents WHERE NOT kept GROUP BY ALL
)
SELECT step, coalesce(d.n, 0) AS n
FROM steps AS s FULL OUTER JOIN dropped AS d USING (step)
ORDER BY coalesce(s.step_no, 1000000), step;

-- name: reasons
-- Dropped rows by reason and by the rule that failed (the name before '=' in `detail`), with
-- the range of the measured values (numeric ones) or a few of them (the others).
WITH r AS (
    SELECT reason, CASE WHEN detail LIKE '%=%' THEN split_part(detail, '=', 1) END AS rule,
           CASE WHEN detail LIKE '%=%' THEN substr(detail, strpos(detail, '=') + 1) END AS value
    FROM documents WHERE NOT kept
)
SELECT reason, rule, count(*) AS docs, min(TRY_CAST(value AS DOUBLE)) AS lo,
       max(TRY_CAST(value AS DOUBLE)) AS hi,
       list_sort(list_distinct(list(value) FILTER (WHERE TRY_CAST(value AS DOUBLE) IS NULL
                                                   AND value IS NOT NULL)))[1:5] AS words
FROM r GROUP BY ALL ORDER BY docs DESC, reason, rule NULLS FIRST LIMIT 60;

-- name: redactions
-- PII matches replaced per type in the chunks of this version (`chunks.redactions`, counted by
-- the worker over the documents it kept), and the documents a `drop` strategy dropped.
WITH c AS (
    SELECT chunk_key, redactions FROM chunks
    WHERE redactions IS NOT NULL AND chunk_key IN (SELECT DISTINCT chunk_key FROM documents)
),
per AS (
    SELECT kind, TRY_CAST(json_extract_string(redactions, kind) AS BIGINT) AS n
    FROM (SELECT unnest(json_keys(redactions)) AS kind, redactions FROM c)
),
matched AS (
    SELECT kind, coalesce(sum(n), 0) AS matches, count(*) FILTER (WHERE n > 0) AS chunks
    FROM per GROUP BY kind
),
dropped AS (
    SELECT split_part(split_part(detail, '=', 1), '.', 2) AS kind, count(*) AS docs
    FROM documents WHERE reason = 'filter:pii' AND detail LIKE 'pii.%=%' GROUP BY kind
)
SELECT kind, coalesce(m.matches, 0) AS matches, coalesce(m.chunks, 0) AS chunks,
       coalesce(d.docs, 0) AS dropped
FROM matched AS m FULL OUTER JOIN dropped AS d USING (kind) ORDER BY kind;

-- name: flagged
-- Chunks of this version outside a quality gate (a step's drop rate out of its bounds).
SELECT chunk_key, gate_violations, count(*) OVER () AS total FROM chunks
WHERE gate_violations IS NOT NULL AND chunk_key IN (SELECT DISTINCT chunk_key FROM documents)
ORDER BY chunk_key LIMIT 50;

-- name: lengths
-- Documents by length in characters, in powers of two: every parsed document, and the kept.
SELECT CAST(floor(log2(greatest(length(text), 1))) AS INTEGER) AS bin,
       count(*) AS before, count(*) FILTER (WHERE kept) AS after
FROM documents WHERE text IS NOT NULL
GROUP BY bin ORDER BY bin;

-- name: by_language
-- Documents by the language language id found, with how many were kept (`status` shows it too,
-- over the latest version). A document dropped before language id ran (a filter listed before
-- it, or malformed) has no language: all of them are one row, named so and listed last, never
-- counted as a language of their own. $limit rows, the most documents first.
WITH d AS (SELECT lang, kept FROM documents)
SELECT coalesce(lang, '(not identified: dropped earlier)') AS lang,
       count(*) AS docs, count(*) FILTER (WHERE kept) AS kept,
       round(100 * count(*) FILTER (WHERE kept) / count(*), 1) AS kept_pct
FROM d GROUP BY d.lang
ORDER BY d.lang IS NULL, docs DESC, d.lang LIMIT $limit;

-- name: by_file
-- Documents by input file, the lowest share kept first (a file a step wiped out is on top),
-- with the reason most of its dropped documents carry. $limit rows.
SELECT source_path AS file, count(*) AS docs, count(*) FILTER (WHERE kept) AS kept,
       round(100 * count(*) FILTER (WHERE kept) / count(*), 1) AS kept_pct,
       mode(reason) FILTER (WHERE NOT kept) AS top_drop_reason
FROM documents GROUP BY source_path
ORDER BY kept_pct, docs DESC, file LIMIT $limit;

-- name: clusters
-- Duplicate groups by size: an exact group is a kept document and its `exact_dup` copies; a
-- near group is one `cluster_id` (a document near nothing else is a cluster of one: not a
-- duplicate group, left out).
WITH groups AS (
    SELECT 'exact' AS kind, count(*) + 1 AS size
    FROM documents WHERE reason = 'exact_dup' AND dup_of IS NOT NULL GROUP BY dup_of
    UNION ALL
    SELECT 'near', count(*) FROM documents WHERE cluster_id IS NOT NULL GROUP BY cluster_id
)
SELECT kind, size, count(*) AS groups FROM groups WHERE size >= 2 GROUP BY ALL
ORDER BY kind, size;

-- name: failures
SELECT chunk_key, status, attempts, left(coalesce(last_error, ''), 160) AS last_error
FROM chunks WHERE status IN ('FAILED', 'DEAD') ORDER BY status, chunk_key LIMIT 20;

-- name: failure_events
SELECT count(*) FILTER (WHERE to_status = 'FAILED') AS failed_attempts,
       count(*) FILTER (WHERE to_status = 'DEAD') AS went_dead
FROM chunk_events;

-- name: files_view
-- `status`'s `documents`: the live data files as DuckDB reads them (no Arrow loaded); `kept` is
-- the partition, from each file's path.
CREATE TEMP VIEW documents AS SELECT * REPLACE (kept::VARCHAR = 'true' AS kept) FROM documents_files;

-- name: footers_view
-- `status`'s `file_footers`: the column chunks of the live data files, from their footers (a
-- table, read now: a view cannot take the file list as a parameter).
CREATE TEMP TABLE file_footers AS
SELECT file_name, path_in_schema, num_values, total_compressed_size FROM parquet_metadata($files);

-- name: allow_folder
-- The folders a reader may still read once external access is off (`status`: the table's).
SET allowed_directories = $folders;
