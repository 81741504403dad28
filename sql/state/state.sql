-- The chunk ledger: every transition is one statement or one transaction, with an event row.

-- name: insert_run
INSERT INTO runs (run_id, command, args, config_hash, lakecurate_version, host, pid, started_at,
                  outcome)
VALUES ($run_id, $command, $args, $config_hash, $version, $host, $pid, now(), 'RUNNING');

-- name: finish_run
UPDATE runs SET finished_at = now(), outcome = $outcome, chunks_done = $done,
    chunks_dead = $dead, message = $message
WHERE run_id = $run_id;

-- name: abandon_runs
-- Runs still marked RUNNING when a new run takes the lock died without finishing.
UPDATE runs SET outcome = 'KILLED', message = 'the process ended without finishing (killed?)'
WHERE outcome = 'RUNNING';

-- name: get_sources
SELECT path, size, mtime_ns, inode, sha256, chunk_size FROM sources
WHERE path IN (SELECT unnest($paths::VARCHAR[]));

-- name: put_source
INSERT OR REPLACE INTO sources VALUES ($path, $format, $size, $mtime_ns, $inode, $sha256,
                                       $chunk_size, now());

-- name: chunks_of_sources
SELECT chunk_key, source_path, source_sha256, format, chunk_index, first_line, input_sha256,
       input_bytes, byte_start, byte_end, row_group_start, row_group_end, status
FROM chunks WHERE source_path IN (SELECT unnest($paths::VARCHAR[]))
ORDER BY source_path, chunk_index;

-- name: insert_planned
-- New chunks become PENDING; a chunk seen before keeps its row (and its history), except that a
-- SUPERSEDED one whose bytes came back is queued again. A kept row takes the plan's view of where
-- the chunk sits in its file now: the stat cache stores the file's new sha256, and a chunk left
-- with the old one would look departed to the next plan and lose its rows (issue 12, D1).
INSERT INTO chunks (chunk_key, source_path, source_sha256, format, chunk_index, byte_start,
    byte_end, row_group_start, row_group_end, first_line, input_sha256, input_bytes, status,
    attempts, run_id, created_at)
SELECT chunk_key, source_path, source_sha256, format, chunk_index, byte_start, byte_end,
    row_group_start, row_group_end, first_line, input_sha256, input_bytes, 'PENDING', 0,
    $run_id, now()
FROM planned
ON CONFLICT (chunk_key) DO UPDATE SET
    source_sha256 = excluded.source_sha256, byte_start = excluded.byte_start,
    byte_end = excluded.byte_end, row_group_start = excluded.row_group_start,
    row_group_end = excluded.row_group_end,
    status = CASE WHEN chunks.status = 'SUPERSEDED' THEN 'PENDING' ELSE chunks.status END,
    attempts = CASE WHEN chunks.status = 'SUPERSEDED' THEN 0 ELSE chunks.attempts END;

-- name: event
INSERT INTO chunk_events (event_at, run_id, chunk_key, from_status, to_status, message)
SELECT now(), $run_id, chunk_key, status, $to_status, $message
FROM chunks WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: event_by_status
INSERT INTO chunk_events (event_at, run_id, chunk_key, from_status, to_status, message)
SELECT now(), $run_id, chunk_key, status, $to_status, $message
FROM chunks WHERE status = $from_status;

-- name: todo
-- The chunks of this run's plan that still need work, in commit order.
SELECT chunk_key, status, attempts FROM chunks
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]))
  AND status IN ('PENDING', 'FAILED', 'RUNNING', 'COMMITTING')
ORDER BY chunk_key;

-- name: dead_in
SELECT chunk_key, last_error FROM chunks
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[])) AND status = 'DEAD' ORDER BY chunk_key;

-- name: reset_running
-- Chunks a dead run left RUNNING go back to PENDING; their attempt did not fail, it was cut off.
UPDATE chunks SET status = 'PENDING', worker = NULL, heartbeat_at = NULL
WHERE status = 'RUNNING';

-- name: start_chunk
-- Submitted to the workers; the attempt counts once one begins it (`count_attempts`).
UPDATE chunks SET status = 'RUNNING', started_at = now(),
    heartbeat_at = now(), finished_at = NULL, run_id = $run_id
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: unstart_chunk
UPDATE chunks SET status = 'PENDING'
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[])) AND status = 'RUNNING';

-- name: count_attempts
-- A key twice (begun twice since the last count) counts twice; $by = -1 takes them back.
UPDATE chunks SET attempts = greatest(chunks.attempts + $by * n.n, 0)
FROM (SELECT k AS chunk_key, count(*) AS n FROM unnest($keys::VARCHAR[]) t(k) GROUP BY k) n
WHERE chunks.chunk_key = n.chunk_key;

-- name: heartbeat
UPDATE chunks SET heartbeat_at = now()
WHERE status = 'RUNNING' AND chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: fail_chunk
UPDATE chunks SET status = $to_status, last_error = $error, traceback = $traceback,
    finished_at = now(), worker = $worker
WHERE chunk_key = $key;

-- name: requeue_dead
UPDATE chunks SET status = 'PENDING', attempts = 0
WHERE status = 'DEAD' AND ($keys IS NULL OR chunk_key IN (SELECT unnest($keys::VARCHAR[])))
RETURNING chunk_key;

-- name: next_seq
SELECT coalesce(max(seq), 0) + 1 FROM commits;

-- name: insert_commit
-- Only as the next seq (the check and the insert in one statement): a seq taken meanwhile
-- inserts nothing, and the caller raises.
INSERT INTO commits (seq, kind, chunk_keys, status, run_id, intent_ns, table_version_before)
SELECT $seq, $kind, $keys, 'INTENT', $run_id, $intent_ns, $version_before
WHERE $seq = (SELECT coalesce(max(seq), 0) + 1 FROM commits)
RETURNING seq;

-- name: insert_appends
-- The intents of a batch of APPEND commits, one chunk each, their seqs consecutive from the
-- next one (checked in the same statement: a seq taken meanwhile inserts nothing, the caller
-- raises).
INSERT INTO commits (seq, kind, chunk_keys, status, run_id, intent_ns, table_version_before)
SELECT a.seq, 'APPEND', [a.chunk_key], 'INTENT', $run_id, $intent_ns, $version_before
FROM (SELECT unnest($seqs::BIGINT[]) AS seq, unnest($keys::VARCHAR[]) AS chunk_key) a
WHERE list_extract($seqs::BIGINT[], 1) = (SELECT coalesce(max(seq), 0) + 1 FROM commits)
RETURNING seq;

-- name: event_committing
-- Each chunk of a batch of APPEND intents goes to COMMITTING under its own seq.
INSERT INTO chunk_events (event_at, run_id, chunk_key, from_status, to_status, message)
SELECT now(), $run_id, c.chunk_key, c.status, 'COMMITTING', 'commit seq ' || a.seq
FROM chunks c
JOIN (SELECT unnest($keys::VARCHAR[]) AS chunk_key, unnest($seqs::BIGINT[]) AS seq) a
    ON a.chunk_key = c.chunk_key;

-- name: mark_committing
UPDATE chunks SET status = 'COMMITTING', commit_seq = a.seq
FROM (SELECT unnest($keys::VARCHAR[]) AS chunk_key, unnest($seqs::BIGINT[]) AS seq) a
WHERE chunks.chunk_key = a.chunk_key;

-- name: open_intents
SELECT seq, kind, chunk_keys, intent_ns, table_version_before FROM commits
WHERE status = 'INTENT' ORDER BY seq;

-- name: drop_intent
DELETE FROM commits WHERE seq = $seq;

-- name: uncommit_chunks
-- A commit that never reached the Delta log: its chunks wait for the next attempt to commit.
UPDATE chunks SET status = 'PENDING', commit_seq = NULL
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[])) AND status = 'COMMITTING';

-- name: finish_commit
UPDATE commits SET status = 'DONE', delta_version = $version, rows_added = $added,
    rows_removed = $removed, finished_at = now()
WHERE seq = $seq;

-- name: succeed_chunks
-- The chunks one Delta commit carried (a registered table, one row per chunk) become SUCCESS;
-- one whose attempt was cut off before it was counted (staged by a run killed within
-- `ATTEMPT_SECONDS`) still took one.
UPDATE chunks SET status = 'SUCCESS', delta_version = $version, commit_seq = f.seq,
    finished_at = now(), attempts = greatest(chunks.attempts, 1),
    rows_in = f.rows_in, rows_kept = f.rows_kept, rows_dropped = f.rows_dropped,
    rows_malformed = f.rows_malformed, worker = coalesce(f.worker, chunks.worker),
    gate_violations = f.gate_violations, redactions = f.redactions,
    last_error = NULL, traceback = NULL
FROM finished_chunks f
WHERE chunks.chunk_key = f.chunk_key;

-- name: finish_chunk_commits
-- Their intents are DONE at that version.
UPDATE commits SET status = 'DONE', delta_version = $version, rows_added = f.rows_in,
    rows_removed = 0, finished_at = now()
FROM finished_chunks f
WHERE commits.seq = f.seq;

-- name: clear_filter_stats
DELETE FROM filter_stats WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: insert_funnel
INSERT INTO filter_stats SELECT chunk_key, step, step_no, docs_in, docs_dropped FROM funnel_rows;

-- name: supersede_chunks
UPDATE chunks SET status = 'SUPERSEDED', finished_at = now()
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: success_keys
SELECT chunk_key FROM chunks WHERE status = 'SUCCESS';

-- name: get_meta
SELECT value FROM lake_meta WHERE key = $key;

-- name: put_meta
INSERT OR REPLACE INTO lake_meta VALUES ($key, $value);

-- name: has_meta_table
SELECT count(*) FROM information_schema.tables WHERE table_name = 'lake_meta';

-- name: snapshot_table
-- Copy one state table into the snapshot being published (identifier quoted by the caller).
CREATE TABLE snap.{table} AS SELECT * FROM main.{table};

-- name: attach_snapshot
-- Small blocks: the snapshot holds a few small tables and is rewritten every few seconds of an
-- ingest; with DuckDB's default 256 KiB blocks each one cost ~2 MB of writes whatever its rows.
ATTACH $path AS snap (BLOCK_SIZE 16384);

-- name: detach_snapshot
DETACH snap;

-- name: queue_redecide
INSERT OR IGNORE INTO redecide SELECT unnest($keys::VARCHAR[]), now();

-- name: unqueue_redecide
DELETE FROM redecide WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[]));

-- name: redecide_queue
-- Queued chunks that are still committed, in their commit order (the order decisions follow).
SELECT c.chunk_key FROM redecide r JOIN chunks c USING (chunk_key)
WHERE c.status = 'SUCCESS' ORDER BY c.commit_seq;

-- name: drop_stale_redecide
DELETE FROM redecide WHERE chunk_key NOT IN (SELECT chunk_key FROM chunks WHERE status = 'SUCCESS');

-- name: commit_seqs_of
SELECT commit_seq FROM chunks
WHERE chunk_key IN (SELECT unnest($keys::VARCHAR[])) AND commit_seq IS NOT NULL;

-- name: chunk_record
-- What a re-decision needs to know of a committed chunk besides its rows.
SELECT rows_in, rows_malformed, worker, gate_violations, redactions FROM chunks
WHERE chunk_key = $key;

-- name: chunk_funnel
SELECT step, docs_in, docs_dropped FROM filter_stats WHERE chunk_key = $key ORDER BY step_no;

-- name: last_seq
SELECT coalesce(max(seq), 0) FROM commits;

-- name: spec_of_key
SELECT chunk_key, source_path, source_sha256, format, chunk_index, first_line, input_sha256,
       input_bytes, byte_start, byte_end, row_group_start, row_group_end, status
FROM chunks WHERE chunk_key = $key;

-- name: chunks_under
-- Every live chunk of a source below a folder (prefix ends with a path separator): the sources
-- a folder input had before, to find the ones that left it.
SELECT chunk_key, source_path, source_sha256, format, chunk_index, first_line, input_sha256,
       input_bytes, byte_start, byte_end, row_group_start, row_group_end, status
FROM chunks WHERE starts_with(source_path, $prefix) AND status <> 'SUPERSEDED'
ORDER BY source_path, chunk_index;

-- name: forget_sources
DELETE FROM sources WHERE path IN (SELECT unnest($paths::VARCHAR[]));

-- name: checkpoint
-- Write everything to the database file (and empty the WAL): the file is then whole on its own,
-- and can be copied to the lake (store.remote).
CHECKPOINT;
