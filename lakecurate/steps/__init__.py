"""The curation steps, free of lake state: ``filters`` (quality, PII, language) and ``near``
(MinHash signatures). Run by workers and, for signatures, by the driver's recovery; imports
only the base modules, never ``store``, ``lake`` or ``ingest``."""
