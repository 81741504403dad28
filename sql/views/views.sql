-- The user-facing views over one version of the Delta table `documents`.

-- name: create
CREATE TEMP VIEW documents AS SELECT * FROM documents_dataset;
CREATE TEMP VIEW docs AS SELECT * FROM documents WHERE kept;
CREATE TEMP VIEW rejects AS SELECT * FROM documents WHERE NOT kept;
