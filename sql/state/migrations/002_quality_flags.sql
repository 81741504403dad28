-- Quality gates and PII redaction, per chunk (issue: filters as SQL).
ALTER TABLE chunks ADD COLUMN gate_violations VARCHAR;   -- '; '-joined, NULL when none
ALTER TABLE chunks ADD COLUMN redactions VARCHAR;        -- JSON {pii type: replacements}
