-- `lakecurate status`: answered from the state tables alone (never scans the documents).

-- name: by_status
SELECT status, count(*) AS chunks, sum(input_bytes) AS input_bytes,
       coalesce(sum(rows_in), 0) AS rows_in, coalesce(sum(rows_kept), 0) AS rows_kept,
       coalesce(sum(rows_dropped), 0) AS rows_dropped,
       coalesce(sum(rows_malformed), 0) AS rows_malformed
FROM chunks GROUP BY status ORDER BY status;

-- name: flagged
-- Chunks outside a quality gate (a drop rate out of its configured bounds).
SELECT chunk_key, gate_violations FROM chunks
WHERE gate_violations IS NOT NULL AND status = 'SUCCESS' ORDER BY chunk_key LIMIT 20;

-- name: failures
SELECT chunk_key, status, attempts, last_error FROM chunks
WHERE status IN ('FAILED', 'DEAD') ORDER BY finished_at DESC NULLS LAST, chunk_key LIMIT 20;

-- name: funnel
-- Documents into and out of every step over the lake's SUCCESS chunks, in pipeline order. A
-- dropped row's `reason` is the step's name (`parse` writes `malformed:<kind>`, a `pii:<type>`
-- step that drops writes `filter:pii`); `redacted` is the number of PII matches a `pii:<type>`
-- step replaced in the documents it kept (NULL for the other steps).
SELECT f.step, sum(f.docs_in) AS docs_in, sum(f.docs_dropped) AS docs_dropped,
       sum(f.docs_in) - sum(f.docs_dropped) AS docs_out,
       round(100 * sum(f.docs_dropped) / nullif(sum(f.docs_in), 0), 2) AS drop_pct,
       CASE WHEN f.step LIKE 'pii:%' THEN coalesce(sum(TRY_CAST(json_extract_string(
           c.redactions, split_part(f.step, ':', 2)) AS BIGINT)), 0) END AS redacted
FROM filter_stats f JOIN chunks c USING (chunk_key)
WHERE c.status = 'SUCCESS'
GROUP BY f.step
ORDER BY min(f.step_no), f.step;

-- name: runs
-- Recent runs with their throughput (input MB/s and documents/s of the chunks they committed).
WITH r AS (
    SELECT r.run_id, r.command, r.started_at, r.finished_at, r.outcome, r.chunks_done,
           r.chunks_dead,
           (SELECT coalesce(sum(c.input_bytes), 0) FROM chunks c
            WHERE c.run_id = r.run_id AND c.status = 'SUCCESS') AS input_bytes,
           (SELECT coalesce(sum(c.rows_in), 0) FROM chunks c
            WHERE c.run_id = r.run_id AND c.status = 'SUCCESS') AS docs,
           epoch(coalesce(r.finished_at, now()::TIMESTAMP) - r.started_at) AS seconds
    FROM runs r
)
SELECT run_id, command, started_at, outcome, chunks_done, chunks_dead, docs,
       round(seconds, 2) AS seconds,
       round(input_bytes / nullif(seconds, 0) / 1e6, 2) AS mb_per_s,
       round(docs / nullif(seconds, 0)) AS docs_per_s
FROM r ORDER BY started_at DESC LIMIT $limit;

-- name: storage
-- What the latest version's data files hold, kept and dropped documents apart: rows, files,
-- bytes (compressed, as stored) and the bytes of the text column alone (what
-- `[output] keep_rejected_text = false` saves on the dropped side). Footers only: no page read.
SELECT CASE WHEN file_name LIKE '%kept=true%' THEN 'kept' ELSE 'dropped' END AS documents,
       sum(num_values) FILTER (WHERE path_in_schema = 'id') AS rows,
       count(DISTINCT file_name) AS files,
       format_bytes(sum(total_compressed_size)::BIGINT) AS stored,
       format_bytes(coalesce(sum(total_compressed_size)
                             FILTER (WHERE path_in_schema = 'text'), 0)::BIGINT) AS text
FROM file_footers
GROUP BY ALL
ORDER BY documents DESC;
