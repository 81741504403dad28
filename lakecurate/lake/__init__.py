"""The lake's files: paths, atomic writes, the Delta table (the only door to ``deltalake``), the
commit record in its log, and the writer's lock. Imports only the base modules."""
