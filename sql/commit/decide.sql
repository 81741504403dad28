-- Driver-side decisions for a batch of staged chunks, made in chunk-key order (first seen
-- wins). The worker already dropped malformed records and filtered documents; here every
-- remaining candidate is checked against the whole lake: a document id seen before (an
-- overlapping snapshot) is skipped as `duplicate_id`, then content seen before, or earlier in
-- this batch, is an `exact_dup` of the first document that had it. A batch decided at once is
-- decided as its chunks one after the other: `_batch` is each row's chunk, in commit order, and
-- what an earlier chunk of the batch kept is what the lake would hold after its commit.

-- name: apply_lake_decisions
-- `staged`: the workers' rows, `_batch` their chunk's place in the batch; `seen_ids(id)`:
-- given ids already in the lake; `seen_content(content_hash, doc_id)`: contents already in the
-- lake, each with the kept document it stands for (itself, or the one a near duplicate is
-- near).
WITH flagged AS (
    SELECT *,
        (reason IS NULL OR reason = 'exact_dup') AS candidate,
        (reason IS NULL OR reason NOT LIKE 'malformed:%') AND id_given AS id_checked
    FROM staged
), id_ranked AS (
    SELECT *,
        candidate AND id_checked AND (
            id IN (SELECT id FROM seen_ids)
            OR row_number() OVER (PARTITION BY CASE WHEN id_checked THEN id END
                                  ORDER BY _batch, source_line) > 1
        ) AS id_dup
    FROM flagged
), content_ranked AS (
    SELECT r.*, sc.doc_id AS lake_doc,
        row_number() OVER w AS content_rank,
        first_value(r.id) OVER w AS content_first
    FROM id_ranked r
    LEFT JOIN seen_content sc
        ON $exact AND r.candidate AND NOT r.id_dup AND sc.content_hash = r.content_hash
    WINDOW w AS (PARTITION BY CASE WHEN r.candidate AND NOT r.id_dup THEN r.content_hash END
                 ORDER BY r._batch, r.source_line)
)
SELECT * EXCLUDE (candidate, id_checked, id_dup, lake_doc, content_rank, content_first) REPLACE (
    CASE WHEN NOT candidate THEN kept
         WHEN id_dup THEN false
         WHEN NOT $exact THEN true
         ELSE lake_doc IS NULL AND content_rank = 1 END AS kept,
    CASE WHEN NOT candidate THEN reason
         WHEN id_dup THEN 'duplicate_id'
         WHEN NOT $exact THEN NULL
         WHEN lake_doc IS NOT NULL OR content_rank > 1 THEN 'exact_dup' END AS reason,
    CASE WHEN NOT candidate THEN dup_of
         WHEN id_dup THEN id
         WHEN NOT $exact THEN NULL
         WHEN lake_doc IS NOT NULL THEN lake_doc
         WHEN content_rank > 1 THEN content_first END AS dup_of
)
FROM content_ranked
ORDER BY _batch, source_line;
