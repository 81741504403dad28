-- Lake-wide near dedup: the LSH band index and the per-chunk matching against it.
-- Order key: doc_seq = (chunk ordinal << 32) | row in chunk, so "first in chunk order, then line
-- order" is "smallest doc_seq". A document's cluster_id is the doc_seq of its cluster's kept
-- document; the kept document has cluster_id = its own doc_seq. See docs/near-dedup.md.
-- Inputs of the chunk statements: the Arrow table `nd_chunk(doc_seq BIGINT, doc_id VARCHAR,
-- bands UBIGINT[], signature UINTEGER[])`, registered by lakecurate.store.band_index (its
-- signature column is not read here), and, while a chunk is matched,
-- `nd_old_sigs(doc_seq BIGINT, signature UINTEGER[])`: the signatures of the earlier documents
-- the chunk's candidates need, read from the signature files (lakecurate.store.signatures: they
-- are not kept in this database), and `nd_chunk_sigs` of the same shape: those of the chunk's
-- own documents in a candidate pair (chunk_signatures_needed), read from the worker's sets file,
-- so the driver never reads a chunk's sets whole (issue 14).

-- name: create_docs
-- One row per indexed document: every document that has tokens, dropped or not, so a later
-- document still joins a cluster through a chain of dropped ones (as one batch run would).
-- Its band hashes are in LAKE/index/bands/ and the signatures verification compares in
-- LAKE/index/signatures/ (lakecurate.store.signatures), one file per commit seq each; an index
-- made before kept the signatures in a column `signature` here (see has_signature_column) and
-- the bands in a table `minhash_bands` (see has_bands_table).
CREATE TABLE IF NOT EXISTS minhash_docs (
    doc_seq BIGINT NOT NULL,
    doc_id VARCHAR NOT NULL,
    cluster_id BIGINT NOT NULL
);

-- name: has_signature_column
-- (NearDedupIndex._move_out: the layouts before kept signatures and bands in the database.)
SELECT count(*) FROM information_schema.columns
WHERE table_name = 'minhash_docs' AND column_name = 'signature';

-- name: old_signature_seqs
-- Commit seqs whose signatures an index of the old layout holds in minhash_docs.
SELECT DISTINCT doc_seq >> 32 AS seq FROM minhash_docs WHERE signature IS NOT NULL ORDER BY seq;

-- name: old_signatures_of_seq
SELECT doc_seq, signature FROM minhash_docs
WHERE doc_seq >> 32 = $seq AND signature IS NOT NULL
ORDER BY doc_seq;

-- name: drop_signature_column
ALTER TABLE minhash_docs DROP COLUMN signature;

-- name: has_bands_table
SELECT count(*) FROM information_schema.tables WHERE table_name = 'minhash_bands';

-- name: indexed_seqs
-- The commit seqs the index holds documents of: whose band files make up the band index.
SELECT DISTINCT doc_seq >> 32 AS seq FROM minhash_docs ORDER BY seq;

-- name: old_bands_of_seq
-- An indexed commit's documents' band hashes from the table of the layout before, as lists.
SELECT doc_seq, list(band_hash ORDER BY band) AS bands FROM minhash_bands
WHERE doc_seq >> 32 = $seq
GROUP BY doc_seq
ORDER BY doc_seq;

-- name: drop_bands_table
DROP TABLE minhash_bands;

-- name: create_macros
-- How many signature positions two documents share (estimated Jaccard = this / num_perm).
CREATE OR REPLACE TEMP MACRO nd_matches(a, b) AS
    len(list_filter(list_zip(a, b), lambda p: p[1] = p[2]));

-- name: create_near_macro
-- Whether two documents are near, in integers: with num = 0 (verify_on = "signature") at least
-- `need` equal signature positions; otherwise a and b are shingle sets (sorted, distinct) and
-- their exact Jaccard i / (|a| + |b| - i) is at least num / den, i.e. i * (den + num) >=
-- num * (|a| + |b|). The same test as steps.near.minhash.is_near.
-- nd_common is an Arrow UDF (store.band_index: one sort over a batch of pairs; DuckDB's
-- list_intersect took ~60 us a pair).
CREATE OR REPLACE TEMP MACRO nd_near(a, b, need, num, den) AS
    CASE WHEN num = 0 THEN nd_matches(a, b) >= need
         ELSE nd_common(a, b) * (den + num) >= num * (len(a) + len(b)) END;

-- name: has_common_udf
SELECT count(*) > 0 FROM duckdb_functions() WHERE function_name = 'nd_common';

-- name: create_meta
CREATE TABLE IF NOT EXISTS minhash_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);

-- name: get_meta
SELECT value FROM minhash_meta WHERE key = $key;

-- name: put_meta
INSERT OR REPLACE INTO minhash_meta VALUES ($key, $value);

-- name: chunk_bands
-- The chunk's buckets, one row per (document, band); documents without tokens have no bands.
CREATE OR REPLACE TEMP TABLE nd_chunk_bands AS
SELECT doc_seq,
       unnest(range(len(bands)))::UTINYINT AS band,
       unnest(bands) AS band_hash
FROM nd_chunk
WHERE bands IS NOT NULL;

-- name: chunk_candidates
-- Candidate pairs (src later than dst) sharing a bucket: against the lake's index (old) and
-- inside the chunk. The lake's pairs, `nd_old_cand(src, dst)`, come from the band cache
-- (lakecurate.store.band_cache: a keyed lookup of the band files, where a join with a band table
-- here scanned the whole table for every chunk), already limited to doc_seq < the chunk's first, so
-- matching stays idempotent when the index already holds this chunk (a retried commit). The
-- chunk's own pairs come from the join of its buckets, or, when decider processes found them in
-- its band file (store.band_shards: the driver did not read the bands), from `nd_new_cand`.
CREATE OR REPLACE TEMP TABLE nd_cand AS
SELECT DISTINCT src, dst, true AS old
FROM nd_old_cand
UNION
SELECT DISTINCT n.doc_seq, m.doc_seq, false
FROM nd_chunk_bands n
JOIN nd_chunk_bands m ON m.band = n.band AND m.band_hash = n.band_hash
WHERE m.doc_seq < n.doc_seq
UNION
SELECT DISTINCT src, dst, false
FROM nd_new_cand;

-- name: docs_entries
-- Every indexed document: what the document cache (store.doc_cache) holds, read once per run.
SELECT doc_seq, cluster_id, doc_id FROM minhash_docs;

-- name: bands_fingerprint
-- What the band cache checks before it answers: both are kept in DuckDB's row-group statistics,
-- so this reads no rows however large the index.
SELECT count(*), max(doc_seq) FROM minhash_docs;

-- name: old_signatures_needed
-- Rule `any`: the earlier documents whose signatures the chunk's matching compares, every
-- candidate in the lake.
SELECT DISTINCT dst AS doc_seq FROM nd_cand WHERE old ORDER BY 1;

-- name: kept_pairs
-- Rule `kept`: the chunk's lake candidates with the cluster (kept document) of each, when the
-- index still holds that kept document (a signature file may outlive its rows).
-- `nd_lake_docs(doc_seq, cluster_id, doc_id)`: the rows of minhash_docs of the chunk's lake
-- candidates and of their clusters' kept documents (store.doc_cache: a join with minhash_docs
-- itself read the whole table for each chunk).
CREATE OR REPLACE TEMP TABLE nd_old_pairs AS
SELECT c.src, c.dst, o.cluster_id AS rep
FROM nd_cand c
JOIN nd_lake_docs o ON o.doc_seq = c.dst
JOIN nd_lake_docs k ON k.doc_seq = o.cluster_id
WHERE c.old;

-- name: kept_groups
-- One row per (chunk document, lake cluster it has a candidate in). Rule `kept` asks of a group
-- that the document be near the cluster's kept document AND near at least one of its candidates
-- there; the first test settles most groups alone: when it passes and the kept document is
-- itself a candidate (has_rep), that candidate is the near one. So a document with k earlier
-- copies in one cluster costs one comparison, not k + 1 (issue 14: the driver's work per chunk
-- grew with how many earlier copies a document has).
CREATE OR REPLACE TEMP TABLE nd_groups AS
SELECT src, rep, bool_or(dst = rep) AS has_rep FROM nd_old_pairs GROUP BY src, rep;

-- name: kept_group_pairs
-- The (document, kept document) pair each group asks about, to test (asked_near).
CREATE OR REPLACE TEMP TABLE nd_asked AS SELECT src, rep AS dst FROM nd_groups;

-- name: kept_rep_check
-- The groups whose document is near their kept document (`nd_near_pairs`, the answers to
-- kept_group_pairs).
CREATE OR REPLACE TEMP TABLE nd_groups AS
SELECT g.src, g.rep, g.has_rep
FROM nd_groups g
SEMI JOIN nd_near_pairs n ON n.src = g.src AND n.dst = g.rep;

-- name: kept_edge_pairs
-- The candidates that settle the groups left (near the kept document, which is not itself a
-- candidate): the pairs the group's document must be near one of, to test (asked_near).
CREATE OR REPLACE TEMP TABLE nd_asked AS
SELECT DISTINCT p.src, p.dst
FROM nd_groups g
JOIN nd_old_pairs p ON p.src = g.src AND p.rep = g.rep
WHERE NOT g.has_rep;

-- name: asked_needed
-- The earlier documents whose signatures testing the pairs asked reads.
SELECT DISTINCT dst AS doc_seq FROM nd_asked ORDER BY 1;

-- name: asked_pairs
-- The pairs asked, for decider processes to test (they read the signatures themselves).
SELECT src, dst FROM nd_asked ORDER BY src, dst;

-- name: asked_near
-- The pairs asked that are near: a chunk document and an earlier one (in the lake, or in the
-- chunk: the label rounds), whose signatures `nd_chunk_sigs` and `nd_old_sigs` hold.
CREATE OR REPLACE TEMP TABLE nd_near_pairs AS
WITH sigs AS (
    SELECT doc_seq, signature FROM nd_chunk_sigs
    UNION ALL
    SELECT doc_seq, signature FROM nd_old_sigs
)
SELECT a.src, a.dst
FROM nd_asked a
JOIN nd_chunk_sigs s ON s.doc_seq = a.src
JOIN sigs d ON d.doc_seq = a.dst
WHERE nd_near(s.signature, d.signature, $min_matches, $num, $den);

-- name: asked_given
-- What asked_near makes, from the pairs decider processes found near (`nd_given`).
CREATE OR REPLACE TEMP TABLE nd_near_pairs AS SELECT src, dst FROM nd_given;

-- name: chunk_signatures_needed
-- The chunk's own documents whose signatures the matching compares: every one in a candidate
-- pair (a label of rule `kept` naming a document of the chunk names one of these too).
SELECT src AS doc_seq FROM nd_cand
UNION
SELECT dst FROM nd_cand WHERE NOT old
ORDER BY 1;

-- name: chunk_pairs_asked
-- Rule `kept` with decider processes: the chunk's own candidate pairs, for them to test.
SELECT src, dst FROM nd_cand WHERE NOT old ORDER BY src, dst;

-- name: edges_given
-- What chunk_edges makes for rule `kept` (no edges with the lake), from the chunk's own pairs
-- that decider processes found near (`nd_given`).
CREATE OR REPLACE TEMP TABLE nd_edges AS SELECT src, dst, false AS old FROM nd_given;

-- name: chunk_edges
-- The candidate pairs that are edges: with $verify, a pair stays only when it is near (nd_near:
-- an integer test on the signatures or the shingle sets, no float rounding decides). Pairs with
-- the lake only with $old_edges (rule `any`; rule `kept` settles them by cluster, kept_groups).
CREATE OR REPLACE TEMP TABLE nd_edges AS
WITH sigs AS (
    SELECT doc_seq, signature FROM nd_old_sigs WHERE $verify
    UNION ALL
    SELECT doc_seq, signature FROM nd_chunk_sigs WHERE $verify
)
SELECT c.src, c.dst, c.old
FROM nd_cand c
LEFT JOIN sigs a ON $verify AND a.doc_seq = c.src
LEFT JOIN sigs b ON $verify AND b.doc_seq = c.dst
WHERE ($old_edges OR NOT c.old)
  AND (NOT $verify OR nd_near(a.signature, b.signature, $min_matches, $num, $den));

-- name: init_labels
-- Start label: the smallest cluster among the document's earlier lake neighbours, or itself.
CREATE OR REPLACE TEMP TABLE nd_labels AS
SELECT c.doc_seq, least(c.doc_seq, min(o.cluster_id)) AS label
FROM nd_chunk c
LEFT JOIN nd_edges e ON e.src = c.doc_seq AND e.old
LEFT JOIN nd_lake_docs o ON o.doc_seq = e.dst
WHERE c.bands IS NOT NULL
GROUP BY c.doc_seq;

-- name: step_labels
-- One round of min-label propagation along edges from earlier to later documents of the chunk.
-- Labels only flow forward in order, so a document's label never depends on later documents.
CREATE OR REPLACE TEMP TABLE nd_labels_next AS
SELECT l.doc_seq, least(l.label, coalesce(min(p.label), l.label)) AS label
FROM nd_labels l
LEFT JOIN nd_edges e ON e.src = l.doc_seq AND NOT e.old
LEFT JOIN nd_labels p ON p.doc_seq = e.dst
GROUP BY l.doc_seq, l.label;

-- name: init_labels_kept
-- Rule `link = 'kept'` (NearDedupIndex(..., link="kept")): a document joins a cluster only when
-- it is itself near that cluster's KEPT document (nd_near: the same test as verification),
-- not merely near some member. Start label: the smallest such cluster among the clusters of its
-- earlier lake neighbours, or itself. Kept in nd_init: every round starts again from it (labels of
-- this rule are not monotone between rounds, so a round must not start from the previous one).
-- nd_groups holds the (document, cluster) pairs whose kept document the document is near
-- (kept_rep_check); a group counts when one of its candidates is near too, the kept document
-- itself (has_rep) or another (nd_near_pairs: the answers to kept_edge_pairs).
CREATE OR REPLACE TEMP TABLE nd_init AS
WITH edged AS (
    SELECT DISTINCT g.src, g.rep
    FROM nd_groups g
    JOIN nd_old_pairs p ON p.src = g.src AND p.rep = g.rep
    SEMI JOIN nd_near_pairs n ON n.src = p.src AND n.dst = p.dst
    WHERE NOT g.has_rep
), ok AS (
    SELECT src, min(rep) AS rep
    FROM (SELECT src, rep FROM nd_groups WHERE has_rep UNION ALL SELECT src, rep FROM edged)
    GROUP BY src
)
SELECT c.doc_seq, least(c.doc_seq, coalesce(ok.rep, c.doc_seq)) AS label
FROM nd_chunk c
LEFT JOIN ok ON ok.src = c.doc_seq
WHERE c.bands IS NOT NULL;

-- name: start_labels_kept
CREATE OR REPLACE TEMP TABLE nd_labels AS SELECT * FROM nd_init;

-- name: kept_rounds_begin
-- Rule `kept`: the (document, label) pairs the rounds have tested, and whether each is near: a
-- pair is tested once however many rounds compare it.
CREATE OR REPLACE TEMP TABLE nd_tested (src BIGINT, dst BIGINT, near BOOLEAN);

-- name: kept_round_pairs
-- A round of rule `kept` compares each document with the labels of its earlier in-chunk
-- neighbours (nd_round: the labels are kept documents, in the lake or in the chunk).
CREATE OR REPLACE TEMP TABLE nd_round AS
SELECT DISTINCT e.src, p.label AS rep
FROM nd_edges e
JOIN nd_labels p ON p.doc_seq = e.dst
WHERE NOT e.old;

-- name: kept_round_asked
-- The round's pairs no round tested yet, to test (asked_near here, or decider processes).
CREATE OR REPLACE TEMP TABLE nd_asked AS
SELECT r.src, r.rep AS dst FROM nd_round r ANTI JOIN nd_tested t ON t.src = r.src AND t.dst = r.rep;

-- name: kept_round_tested
-- The answers (`nd_near_pairs`) to the pairs asked, remembered.
INSERT INTO nd_tested
SELECT a.src, a.dst, n.src IS NOT NULL
FROM nd_asked a
LEFT JOIN nd_near_pairs n ON n.src = a.src AND n.dst = a.dst;

-- name: step_labels_kept
-- One round of rule `kept` along in-chunk edges: label(d) = min(init(d), the labels of d's earlier
-- in-chunk neighbours whose kept document d is near). A label depends only on earlier documents,
-- so after as many rounds as the longest in-chunk chain nothing changes, and that fixed point is
-- the unique solution of the rule (the same as one document at a time, in doc_seq order).
CREATE OR REPLACE TEMP TABLE nd_labels_next AS
WITH ok AS (
    SELECT r.src, min(r.rep) AS rep
    FROM nd_round r
    SEMI JOIN nd_tested t ON t.src = r.src AND t.dst = r.rep AND t.near
    GROUP BY r.src
)
SELECT i.doc_seq, least(i.label, coalesce(ok.rep, i.label)) AS label
FROM nd_init i
LEFT JOIN ok ON ok.src = i.doc_seq;

-- name: count_changed
SELECT count(*) FROM nd_labels_next n JOIN nd_labels l USING (doc_seq) WHERE n.label <> l.label;

-- name: swap_labels
CREATE OR REPLACE TEMP TABLE nd_labels AS SELECT * FROM nd_labels_next;

-- name: chunk_result
-- Per input document: its cluster (NULL without tokens) and the id of the kept document when it
-- is not the kept one itself.
SELECT c.doc_seq,
       c.doc_id,
       l.label AS cluster_id,
       CASE WHEN l.label <> c.doc_seq THEN coalesce(k.doc_id, o.doc_id) END AS dup_of
FROM nd_chunk c
LEFT JOIN nd_labels l ON l.doc_seq = c.doc_seq
LEFT JOIN nd_chunk k ON k.doc_seq = l.label
LEFT JOIN nd_lake_docs o ON o.doc_seq = l.label AND l.label < $chunk_min
ORDER BY c.doc_seq;

-- name: forget_docs_range
-- Make add_chunk idempotent: drop whatever an earlier attempt indexed for these documents.
DELETE FROM minhash_docs WHERE doc_seq BETWEEN $lo AND $hi;

-- name: insert_docs
-- `nd_matched`: the result of chunk_result for this chunk.
INSERT INTO minhash_docs (doc_seq, doc_id, cluster_id)
SELECT c.doc_seq, c.doc_id, m.cluster_id
FROM nd_chunk c
JOIN nd_matched m ON m.doc_seq = c.doc_seq
WHERE m.cluster_id IS NOT NULL
ORDER BY c.doc_seq;

-- name: cluster_sizes
-- For dedup-stats: how many clusters of each size (singletons included).
SELECT size, count(*) AS clusters
FROM (SELECT cluster_id, count(*) AS size FROM minhash_docs GROUP BY cluster_id)
GROUP BY size
ORDER BY size;

-- name: largest_clusters
-- For dedup-stats: the biggest clusters with their kept document and a few member ids.
SELECT d.cluster_id,
       count(*) AS size,
       any_value(k.doc_id) AS kept_id,
       list(d.doc_id ORDER BY d.doc_seq)[1:$samples] AS sample_ids
FROM minhash_docs d
JOIN minhash_docs k ON k.doc_seq = d.cluster_id
GROUP BY d.cluster_id
HAVING count(*) > 1
ORDER BY size DESC, d.cluster_id
LIMIT $limit;

-- name: forget_docs_seqs
-- Forget every document of these commits (doc_seq = commit seq << 32 | row): their chunks left
-- the table, or are about to be decided again. Their band and signature files are leftovers
-- nothing reads (a retry of the commit writes them again).
DELETE FROM minhash_docs WHERE (doc_seq >> 32) IN (SELECT unnest($seqs::BIGINT[]));

-- name: unindexed_chunks
-- Committed chunks with no document in the band index, in commit order: committed by a command
-- that does not run near dedup (a crash finalised by `compact` or `verify --repair`), or a state
-- rebuilt from the log. A chunk none of whose documents passed the filters (its funnel's first
-- lake-wide step saw none) has nothing to index, ever: it came back at every session, and its
-- rows were read and hashed again (5,000 such chunks: minutes before every command).
SELECT c.chunk_key, c.commit_seq FROM chunks c
WHERE c.status = 'SUCCESS'
  AND c.commit_seq NOT IN (SELECT DISTINCT doc_seq >> 32 FROM minhash_docs)
  AND NOT EXISTS (
      SELECT 1 FROM filter_stats f
      WHERE f.chunk_key = c.chunk_key AND f.step = 'duplicate_id' AND f.docs_in = 0
  )
ORDER BY c.commit_seq;

-- name: clear_docs
DELETE FROM minhash_docs;

-- name: chunk_paired
-- The chunk's documents in a candidate pair: the only ones the statements after
-- chunk_candidates see (`nd_chunk` is narrowed to them); any other is its own cluster.
SELECT src AS doc_seq FROM nd_cand
UNION
SELECT dst FROM nd_cand WHERE NOT old;
