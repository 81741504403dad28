"""The lake's files: the Delta table (the only door to ``deltalake``) and the writer's lock.
Imports only the base modules."""
