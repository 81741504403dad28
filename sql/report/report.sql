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
-- Rows dropped per pipeline step, in pipeline order (the state's step numbers); a malformed
-- record is dropped by `parse`; reasons with no step of their own come last.
WITH steps AS (SELECT step, min(step_no) AS step_no FROM filter_stats GROUP BY step),
dropped AS (
    SELECT CASE WHEN reason LIKE 'malformed:%' THEN 'parse' ELSE coalesce(reason, '?') END
               AS step,
           count(*) AS n
    FROM documents WHERE NOT kept GROUP BY ALL
)
SELECT d.step, d.n FROM dropped AS d LEFT JOIN steps AS s USING (step)
ORDER BY coalesce(s.step_no, 1000000), d.step;

-- name: lengths
-- Documents by length in characters, in powers of two: every parsed document, and the kept.
SELECT CAST(floor(log2(greatest(length(text), 1))) AS INTEGER) AS bin,
       count(*) AS before, count(*) FILTER (WHERE kept) AS after
FROM documents WHERE text IS NOT NULL
GROUP BY bin ORDER BY bin;

-- name: languages
SELECT coalesce(lang, 'unknown') AS lang, count(*) FILTER (WHERE kept) AS kept,
       count(*) AS rows
FROM documents WHERE text IS NOT NULL
GROUP BY ALL ORDER BY kept DESC, rows DESC, lang LIMIT 12;

-- name: clusters
-- Duplicate groups by size: an exact group is a kept document and its `exact_dup` copies; a
-- near group is one `cluster_id`.
WITH groups AS (
    SELECT 'exact' AS kind, count(*) + 1 AS size
    FROM documents WHERE reason = 'exact_dup' AND dup_of IS NOT NULL GROUP BY dup_of
    UNION ALL
    SELECT 'near', count(*) FROM documents WHERE cluster_id IS NOT NULL GROUP BY cluster_id
)
SELECT kind, size, count(*) AS groups FROM groups GROUP BY ALL ORDER BY kind, size;

-- name: failures
SELECT chunk_key, status, attempts, left(coalesce(last_error, ''), 160) AS last_error
FROM chunks WHERE status IN ('FAILED', 'DEAD') ORDER BY status, chunk_key LIMIT 20;

-- name: failure_events
SELECT count(*) FILTER (WHERE to_status = 'FAILED') AS failed_attempts,
       count(*) FILTER (WHERE to_status = 'DEAD') AS went_dead
FROM chunk_events;
