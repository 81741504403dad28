-- `ingest`: the input files whose committed records are mostly malformed (issue 16), from the
-- chunk ledger alone; only these files' rejected rows are then read from the table.

-- name: mostly_malformed
SELECT source_path, sum(rows_in) AS rows_in, list(chunk_key ORDER BY chunk_key) AS chunk_keys
FROM chunks
WHERE status = 'SUCCESS' AND source_path IN (SELECT unnest($paths::VARCHAR[]))
GROUP BY source_path
HAVING sum(rows_malformed) > $share * sum(rows_in)
ORDER BY source_path;
