-- The lake's authoritative state. Users query these tables with `lakecurate sql`.

-- One row per `lakecurate` invocation that wrote to the lake.
CREATE TABLE runs (
    run_id          VARCHAR PRIMARY KEY,
    command         VARCHAR NOT NULL,
    args            VARCHAR,
    config_hash     VARCHAR,
    lakecurate_version VARCHAR,
    host            VARCHAR,
    pid             INTEGER,
    started_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP,
    outcome         VARCHAR,            -- RUNNING, OK, NOTHING_TO_DO, DEAD_CHUNKS, FAILED, or NULL if killed
    chunks_done     INTEGER DEFAULT 0,
    chunks_dead     INTEGER DEFAULT 0,
    message         VARCHAR
);

-- The stat cache: an input whose (size, mtime_ns, inode) is unchanged is not read again.
CREATE TABLE sources (
    path            VARCHAR PRIMARY KEY,
    format          VARCHAR NOT NULL,
    size            BIGINT NOT NULL,
    mtime_ns        BIGINT NOT NULL,
    inode           BIGINT NOT NULL,
    sha256          VARCHAR NOT NULL,
    chunk_size      BIGINT NOT NULL,
    scanned_at      TIMESTAMP NOT NULL
);

-- One row per chunk ever planned. Status: PENDING, RUNNING, COMMITTING, SUCCESS, FAILED, DEAD,
-- SUPERSEDED (its input changed; its rows were removed from the table).
CREATE TABLE chunks (
    chunk_key       VARCHAR PRIMARY KEY,
    source_path     VARCHAR NOT NULL,
    source_sha256   VARCHAR NOT NULL,
    format          VARCHAR NOT NULL,
    chunk_index     INTEGER NOT NULL,
    byte_start      BIGINT,
    byte_end        BIGINT,
    row_group_start INTEGER,
    row_group_end   INTEGER,
    first_line      BIGINT NOT NULL,
    input_sha256    VARCHAR NOT NULL,
    input_bytes     BIGINT NOT NULL,
    status          VARCHAR NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      VARCHAR,
    traceback       VARCHAR,
    worker          VARCHAR,
    heartbeat_at    TIMESTAMP,
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    rows_in         BIGINT,
    rows_kept       BIGINT,
    rows_dropped    BIGINT,
    rows_malformed  BIGINT,
    commit_seq      BIGINT,
    delta_version   BIGINT,
    run_id          VARCHAR,
    created_at      TIMESTAMP NOT NULL
);

-- Append-only log of every status transition.
CREATE SEQUENCE chunk_event_seq;
CREATE TABLE chunk_events (
    event_id        BIGINT DEFAULT nextval('chunk_event_seq'),
    event_at        TIMESTAMP NOT NULL,
    run_id          VARCHAR,
    chunk_key       VARCHAR NOT NULL,
    from_status     VARCHAR,
    to_status       VARCHAR NOT NULL,
    message         VARCHAR
);

-- The funnel: documents entering and dropped by each step, per chunk.
CREATE TABLE filter_stats (
    chunk_key       VARCHAR NOT NULL,
    step            VARCHAR NOT NULL,
    step_no         INTEGER NOT NULL,   -- position of the step in the pipeline
    docs_in         BIGINT NOT NULL,
    docs_dropped    BIGINT NOT NULL
);

-- Intents of Delta commits (design section 6): written before the commit, DONE after it.
-- kind: APPEND (one chunk's rows) or SUPERSEDE (remove the rows of chunks whose input changed).
CREATE TABLE commits (
    seq             BIGINT PRIMARY KEY,
    kind            VARCHAR NOT NULL,
    chunk_keys      VARCHAR[] NOT NULL,
    status          VARCHAR NOT NULL,   -- INTENT or DONE
    run_id          VARCHAR,
    intent_ns       BIGINT NOT NULL,    -- wall clock when the intent was recorded (orphan cleanup)
    table_version_before BIGINT,
    delta_version   BIGINT,
    rows_added      BIGINT,
    rows_removed    BIGINT,
    finished_at     TIMESTAMP
);

-- Second tier of the membership index: normalised-content hash (md5 as an integer) of every kept
-- document in the lake, and md5_number(id) of every source-given document id; `seq` is the commit
-- that added the row (a Bloom file covering seq <= W is topped up from here).
CREATE TABLE content_hashes (
    hash            UHUGEINT NOT NULL,
    doc_id          VARCHAR NOT NULL,
    chunk_key       VARCHAR NOT NULL,
    seq             BIGINT NOT NULL
);

CREATE TABLE doc_ids (
    hash            UHUGEINT NOT NULL,
    chunk_key       VARCHAR NOT NULL,
    seq             BIGINT NOT NULL
);

CREATE TABLE lake_meta (
    key             VARCHAR PRIMARY KEY,
    value           VARCHAR NOT NULL
);
