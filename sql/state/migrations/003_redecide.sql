-- Committed chunks whose lake-wide decisions must be made again (issue 12): a superseded chunk
-- took away documents they were duplicates of (or clustered with). Queued in the transaction
-- that removes the superseded chunks from the index, cleared in the one that records the new
-- decisions, so a crash in between leaves the queue for the next ingest.
CREATE TABLE redecide (
    chunk_key VARCHAR PRIMARY KEY,
    queued_at TIMESTAMP NOT NULL
);
