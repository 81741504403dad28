"""The ingest path. Driver side: plan, chunking, runner, commit, near; worker side: reader, worker;
both: staging (the staged file) and executor (the one door from driver to worker). Imported by
``api`` only; imports ``store``, ``lake``, ``steps`` and the base modules."""
