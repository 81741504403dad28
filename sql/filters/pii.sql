-- PII redaction: e-mail addresses, IPv4 and IPv6 addresses, phone numbers. One macro per type,
-- each returning {text, n}: n matches, replaced by a tag ('tag'), by the tag with the first 10 hex
-- of the match's md5 ('hash': stable, so the same address is the same token everywhere), or left
-- in place ('drop': the pipeline then drops the document when n > 0).
-- Phone numbers: +<country> followed by 7..15 digits in groups, or North-American
-- (NNN) NNN-NNNN / NNN-NNN-NNNN forms; bare digit runs (dates, ids, years) are not phones.

-- name: pii
-- Splits around the matches and re-joins with each match's replacement (regexp_replace cannot
-- call md5 on a match); both functions see the same leftmost, non-overlapping matches.
CREATE OR REPLACE MACRO lc_redact(text, pattern, strategy, tag) AS
    list_transform([{parts: regexp_split_to_array(text, pattern),
                     hits: regexp_extract_all(text, pattern)}], lambda r: {
        text: CASE
            WHEN len(r.hits) = 0 OR strategy = 'drop' THEN text
            WHEN strategy = 'tag' THEN array_to_string(
                list_transform(range(1, len(r.parts) + 1), lambda i:
                    r.parts[i] || CASE WHEN i <= len(r.hits) THEN tag ELSE '' END), '')
            ELSE array_to_string(
                list_transform(range(1, len(r.parts) + 1), lambda i:
                    r.parts[i] || CASE WHEN i <= len(r.hits)
                        THEN rtrim(tag, '>') || ':' || left(md5(r.hits[i]), 10) || '>'
                        ELSE '' END), '')
        END,
        n: len(r.hits)
    })[1];
CREATE OR REPLACE MACRO pii_email(text, strategy := 'tag', tag := '<EMAIL>') AS
    lc_redact(text, '[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}', strategy, tag);
CREATE OR REPLACE MACRO pii_ipv4(text, strategy := 'tag', tag := '<IPV4>') AS
    lc_redact(text, '\b(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\b',
              strategy, tag);
CREATE OR REPLACE MACRO pii_ipv6(text, strategy := 'tag', tag := '<IPV6>') AS
    lc_redact(text, '\b(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|(?:[0-9A-Fa-f]{1,4}:){1,6}(?::[0-9A-Fa-f]{1,4}){1,6}|(?:[0-9A-Fa-f]{1,4}:){2,7}:)(?:\b|$)|::(?:ffff:)?(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})\b',
              strategy, tag);
CREATE OR REPLACE MACRO pii_phone(text, strategy := 'tag', tag := '<PHONE>') AS
    lc_redact(text, '\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}\d\b|(?:\(\d{3}\) ?|\b\d{3}[ .-])\d{3}[ .-]\d{4}\b',
              strategy, tag);
