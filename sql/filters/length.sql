-- Length bounds in characters (Unicode code points). Not a published filter: the defaults are ours
-- (a document under 100 characters is rarely worth training on; over 1,000,000 is usually a dump).

-- name: length
CREATE OR REPLACE MACRO length_filter(text, min_chars := 100, max_chars := 1000000) AS
    CASE
        WHEN length(text) < min_chars THEN 'length.chars=' || length(text)
        WHEN length(text) > max_chars THEN 'length.chars=' || length(text)
    END;
