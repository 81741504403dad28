-- Within-chunk decisions, run by a worker over the Arrow table `records` of one chunk.
-- Normalise (newlines, NFC, outer whitespace), filter (sql/filters/, chained by
-- lakecurate.filters), hash, drop empties, keep the first of each
-- exact-duplicate group in line order. Lake-wide dedup happens later, in the driver.
-- Outer whitespace is Python's str.isspace() set: RE2's \s is ASCII only, so without \p{Z} etc. a
-- text of no-break or ideographic spaces would be kept as a non-empty document.

-- name: normalise
SELECT *,
    CASE WHEN kind IS NULL THEN regexp_replace(
        nfc_normalize(replace(replace(text, chr(13) || chr(10), chr(10)), chr(13), chr(10))),
        '^[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+|[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+$', '', 'g')
    END AS norm
FROM records;

-- name: decide
-- Reads `filtered`: the normalised records after the filter pipeline (lakecurate.filters), with
-- the final text `t` (after C4 line edits and PII redaction), the filter's verdict (`f_reason`,
-- `f_detail`, `f_step`) and `lang`/`lang_score`. The empty check and the content hash apply to
-- the final text, so an edit that empties a document drops it and dedup sees redacted text.
WITH survivors AS (
    SELECT *, kind IS NULL AND f_reason IS NULL AND t <> '' AS alive FROM filtered
), hashed AS (
    SELECT *, CASE WHEN alive THEN md5(t) END AS chash FROM survivors
), ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY chash ORDER BY source_line) AS dup_rank,
        first_value(id) OVER (PARTITION BY chash ORDER BY source_line) AS first_id
    FROM hashed
)
SELECT
    id,
    id_given,
    t AS text,
    meta,
    raw,
    (alive AND (dup_rank = 1 OR NOT $exact)) AS kept,
    CASE
        WHEN kind IS NOT NULL THEN 'malformed:' || kind
        WHEN f_reason IS NOT NULL THEN f_reason
        WHEN t = '' THEN 'filter:empty'
        WHEN $exact AND dup_rank > 1 THEN 'exact_dup'
    END AS reason,
    f_detail AS detail,
    error,
    CASE WHEN alive AND $exact AND dup_rank > 1 THEN first_id END AS dup_of,
    NULL::BIGINT AS cluster_id,
    lang,
    lang_score,
    chash AS content_hash,
    $chunk_key AS chunk_key,
    $source_path AS source_path,
    source_line,
    $input_sha256 AS input_sha256,
    $run_id AS run_id,
    $config_hash AS config_hash,
    f_step AS filter_step,
    pii_n
FROM ranked
ORDER BY source_line;

-- name: funnel
-- The per-step funnel of one decided chunk: (step, docs_in, docs_dropped), in pipeline order.
WITH c AS (
    SELECT
        count(*) AS n,
        count(*) FILTER (WHERE reason LIKE 'malformed:%') AS malformed,
        count(*) FILTER (WHERE reason = 'filter:empty') AS empty,
        count(*) FILTER (WHERE reason = 'exact_dup') AS dups
    FROM decided
)
SELECT 'parse' AS step, n AS docs_in, malformed AS docs_dropped FROM c
UNION ALL SELECT 'filter:empty', n - malformed, empty FROM c
UNION ALL SELECT 'exact_dup:chunk', n - malformed - empty, dups FROM c;
