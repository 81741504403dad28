"""Read-only commands: query, versions (time travel, lineage), history and diff, export, report.
Imported by ``api``; imports ``store``, ``lake`` and the base modules, never writes the lake."""
