-- `lakecurate export`: the kept documents of one version, in input order (reproducible shards).

-- name: kept_rows
-- $columns is replaced by the quoted column list (identifiers, not values).
SELECT $columns FROM docs ORDER BY chunk_key, source_line;

-- name: config_hashes
SELECT DISTINCT config_hash FROM docs ORDER BY config_hash;
