"""Maintenance and checks of an existing lake: compact, vacuum, checkpoint, verify (and repair).
Imported by ``api``; imports ``store``, ``lake`` and the base modules."""
