-- Drop documents whose `url` host is a blocked domain or a subdomain of one. The list comes from
-- [filters.url_blocklist] domains = [...] or file = "blocklist.txt" (one domain a line, # comments).
-- A document without a url passes. Hosts are lower-cased; a leading "www." is ignored.

-- name: url_blocklist
CREATE OR REPLACE MACRO url_blocklist_filter(url, domains := []::VARCHAR[]) AS
    list_transform(
        [string_split(regexp_replace(lower(regexp_extract(coalesce(url, ''),
            '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^:/?#]+)', 1)), '^www\.', ''), '.')],
        lambda parts: CASE WHEN parts <> [''] AND list_has_any(
            list_transform(range(1, len(parts) + 1), lambda i: array_to_string(parts[i:], '.')),
            domains) THEN 'url_blocklist.host=' || array_to_string(parts, '.') END)[1];
