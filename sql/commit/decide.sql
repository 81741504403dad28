-- Driver-side decisions for one staged chunk, applied in chunk-key order (first seen wins).

-- name: apply_lake_dups
-- `staged`: the worker's rows; `seen`: (content_hash, doc_id) of kept rows whose content is
-- already in the lake. Those rows become exact duplicates of the earlier document, and the
-- chunk's own duplicates of them point at that earlier document too.
SELECT s.* REPLACE (
    (s.kept AND d.doc_id IS NULL) AS kept,
    CASE WHEN s.kept AND d.doc_id IS NOT NULL THEN 'exact_dup' ELSE s.reason END AS reason,
    CASE WHEN d.doc_id IS NOT NULL AND (s.kept OR s.reason = 'exact_dup') THEN d.doc_id
         ELSE s.dup_of END AS dup_of
)
FROM staged s
LEFT JOIN seen d ON d.content_hash = s.content_hash
ORDER BY s.source_line;
