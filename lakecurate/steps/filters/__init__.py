"""Quality filters, PII redaction and language id: one SQL pipeline plus the Arrow UDFs it needs."""
