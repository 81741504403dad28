"""Near-duplicate removal: ``minhash`` (pure numpy signatures and band hashes, importable by workers
without DuckDB) and ``lsh`` (the DuckDB side: Arrow UDFs and the lake-wide band index).

Nothing is imported here on purpose, so ``import lakecurate.dedup.minhash`` stays free of duckdb.
See docs/near-dedup.md.
"""
