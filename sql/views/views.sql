-- The user-facing views over one version of the Delta table `documents`.

-- name: create
CREATE TEMP VIEW documents AS SELECT * FROM documents_dataset;
CREATE TEMP VIEW docs AS SELECT * FROM documents WHERE kept;
CREATE TEMP VIEW rejects AS SELECT * FROM documents WHERE NOT kept;

-- name: attach_memory
-- The reader's private copy of the state tables: the name queries use (`lake.main.chunks`).
ATTACH ':memory:' AS lake;

-- name: attach_source
-- The state file (or the snapshot) is attached only while its tables are copied.
ATTACH $path AS lake_source (READ_ONLY);

-- name: source_tables
SELECT table_name FROM duckdb_tables()
WHERE database_name = 'lake_source' AND schema_name = 'main'
ORDER BY table_name;

-- name: copy_table
-- {table} is a quoted identifier filled in by the caller.
CREATE TABLE lake.main.{table} AS SELECT * FROM lake_source.main.{table};

-- name: source_version
-- The Delta version a snapshot describes: the newest commit it records as DONE.
SELECT max(delta_version) FROM lake_source.main.commits WHERE status = 'DONE';

-- name: detach_source
DETACH lake_source;

-- name: serialize
-- The parse tree of one SELECT as JSON (an error object for anything that is not a SELECT).
SELECT json_serialize_sql($sql);

-- name: key_files_of_source
-- The key files (`store.key_files`) the attached state registers for `$space`.
SELECT DISTINCT file FROM lake_source.main.index_files WHERE space = $space ORDER BY file;

-- name: copy_content_hashes
-- The membership index's content keys as the table they were (`hash`, `doc_id`, `seq`): the
-- rows of the registered seqs of each file in `$files` (full paths).
CREATE TABLE lake.main.content_hashes AS
SELECT (k.hi::UHUGEINT << 64) | k.lo AS hash, k.doc_id, k.seq
FROM read_parquet($files::VARCHAR[], filename = true) k
SEMI JOIN (SELECT file, seq FROM lake_source.main.index_files WHERE space = 'content') r
    ON r.file = parse_filename(k.filename) AND r.seq = k.seq;

-- name: copy_doc_ids
CREATE TABLE lake.main.doc_ids AS
SELECT (k.hi::UHUGEINT << 64) | k.lo AS hash, k.seq
FROM read_parquet($files::VARCHAR[], filename = true) k
SEMI JOIN (SELECT file, seq FROM lake_source.main.index_files WHERE space = 'ids') r
    ON r.file = parse_filename(k.filename) AND r.seq = k.seq;

-- name: empty_content_hashes
CREATE TABLE lake.main.content_hashes (hash UHUGEINT, doc_id VARCHAR, seq BIGINT);

-- name: empty_doc_ids
CREATE TABLE lake.main.doc_ids (hash UHUGEINT, seq BIGINT);
