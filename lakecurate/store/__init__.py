"""The DuckDB side of the lake: the state ledger, its rebuild from the Delta log, the two-tier
membership index (Bloom + DuckDB) and the near-dedup band index. Imported by ``ingest``, ``read``,
``ops`` and ``api``; imports ``lake``, ``steps`` and the base modules."""
