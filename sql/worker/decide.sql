-- Within-chunk decisions, run by a worker over the Arrow table `records` of one chunk.
-- Normalise (newlines, control characters, NFC, outer whitespace), filter (sql/filters/, chained
-- by lakecurate.filters), hash, drop empties (decide), then keep the first of each
-- exact-duplicate group in line order (exact_dups). Lake-wide dedup happens later, in the driver.
-- Outer whitespace is Python's str.isspace() set: RE2's \s is ASCII only, so without \p{Z} etc. a
-- text of no-break or ideographic spaces would be kept as a non-empty document.

-- name: normalise
-- $normalisation is the lake's rule version (lakecurate.config.NORMALISATION_VERSION). From 2 on,
-- control characters are extraction noise, not text, so they are dealt with here rather than the
-- whole document being dropped by `utf8` (issue 17): escape sequences are removed whole
-- (OSC/DCS/SOS/PM/APC strings up to their terminator, CSI `\x1b[...m`, other ESC sequences, a
-- lone ESC), overstrike pairs keep their last character (`_\bW` -> `W`), every other C0 control
-- but tab and LF is removed, and the ones Python's splitlines() breaks lines at (\v \f
-- \x1c-\x1e) become LF so that words do not run together. C1 code points (U+0080-U+009F) are, in
-- real text, Windows-1252 bytes decoded as Latin-1 (`yesterday\x92s`), so they become their
-- Windows-1252 characters (’ “ ” – — € ...; as ftfy's fix_c1_controls) and the five it leaves
-- undefined are removed. `n_stripped` counts the characters removed or replaced (reported in
-- `detail`, decide below).
WITH lf AS (
    SELECT *, replace(replace(text, chr(13) || chr(10), chr(10)), chr(13), chr(10)) AS lf_text
    FROM records
), removed AS (
    SELECT *,
        CASE WHEN $normalisation >= 2 AND kind IS NULL
                  AND regexp_matches(lf_text, '[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x{9f}]')
            THEN regexp_replace(lf_text,
                '\x1b[\]P^_X][^\x07\x1b\n]*(?:\x07|\x1b\\)'
                || '|\x1b\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]'
                || '|\x1b[\x20-\x2f]*[\x30-\x7e]?'
                || '|[^\x00-\x1f\x7f]\x08'
                || '|[\x00-\x08\x0e-\x1b\x1f\x7f\x{81}\x{8d}\x{8f}\x{90}\x{9d}]', '', 'g')
        END AS rm_text
    FROM lf
)
SELECT * EXCLUDE (lf_text, rm_text),
    CASE WHEN kind IS NULL THEN regexp_replace(nfc_normalize(coalesce(translate(
            regexp_replace(rm_text, '[\x0b\x0c\x1c-\x1e]', chr(10), 'g'),
            array_to_string(list_transform([128, 130, 131, 132, 133, 134, 135, 136, 137, 138,
                139, 140, 142, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 158,
                159], lambda c: chr(c)), ''),
            '€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ'), lf_text)),
        '^[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+|[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+$', '', 'g')
    END AS norm,
    -- removed characters, plus the ones replaced (line breaks -> LF, C1 -> Windows-1252)
    coalesce(length(lf_text)
             - length(regexp_replace(rm_text, '[\x0b\x0c\x1c-\x1e\x{80}-\x{9f}]', '', 'g')), 0)
        AS n_stripped
FROM removed;

-- name: decide
-- Reads `filtered`: the normalised records after the filter pipeline (lakecurate.filters), with
-- the final text `t` (after C4 line edits and PII redaction), the filter's verdict (`f_reason`,
-- `f_detail`, `f_step`) and `lang`/`lang_score`. The empty check and the content hash apply to
-- the final text, so an edit that empties a document drops it and dedup sees redacted text.
-- Row by row, in line order (no window, no sort: the chunk streams through once, so DuckDB
-- never holds a copy of its text); the exact duplicates among the survivors are `exact_dups`'s.
-- `records` may hold several small chunks (a worker's bundle): `chunk_no` says whose a row is
-- (from 1), and picks its chunk's key, path and digest from the lists bound.
WITH survivors AS (
    SELECT *, kind IS NULL AND f_reason IS NULL AND t <> '' AS alive FROM filtered
)
SELECT
    id,
    id_given,
    t AS text,
    meta,
    raw,
    alive AS kept,
    CASE
        WHEN kind IS NOT NULL THEN 'malformed:' || kind
        WHEN f_reason IS NOT NULL THEN f_reason
        WHEN t = '' THEN 'filter:empty'
    END AS reason,
    -- a filter's failing value; else what normalisation stripped (docs/filters.md)
    coalesce(f_detail, CASE WHEN n_stripped > 0 THEN 'normalise.stripped=' || n_stripped END)
        AS detail,
    error,
    NULL::VARCHAR AS dup_of,
    NULL::BIGINT AS cluster_id,
    lang,
    lang_score,
    CASE WHEN alive THEN md5(t) END AS content_hash,
    $chunk_keys[chunk_no] AS chunk_key,
    $source_paths[chunk_no] AS source_path,
    source_line,
    $input_sha256s[chunk_no] AS input_sha256,
    $run_id AS run_id,
    $config_hash AS config_hash,
    f_step AS filter_step,
    pii_n,
    chunk_no
FROM survivors;

-- name: exact_dups
-- Within-chunk exact dedup over the decided rows (`decided`, keys only): every surviving
-- document but the first (in line order) of its content hash, with the id of that first one.
SELECT source_line, first_id
FROM (
    SELECT source_line,
        row_number() OVER (PARTITION BY content_hash ORDER BY source_line) AS dup_rank,
        first_value(id) OVER (PARTITION BY content_hash ORDER BY source_line) AS first_id
    FROM decided
    WHERE kept
)
WHERE dup_rank > 1;
