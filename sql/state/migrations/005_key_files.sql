-- The membership index's keys move into Parquet files under index/keys (issue 14: the tables'
-- rows were most of the driver's writes, once to the WAL and again at the checkpoint); this
-- table says which commit seqs of which file are in the index. The rows of the tables are
-- moved out by `store.key_files.move_out` when the state is next opened.
CREATE TABLE index_files (
    space           VARCHAR NOT NULL,
    file            VARCHAR NOT NULL,
    seq             BIGINT NOT NULL,
    rows            BIGINT NOT NULL
);
