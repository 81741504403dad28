-- UTF-8 sanity: text decoded with U+FFFD replacement characters, or carrying control characters
-- (ANSI colour escapes, overstrike backspaces, NULs) is broken extraction, not language.
-- Tab, LF and CR are not counted as control characters. Defaults are ours.
-- Since rule version 2 normalisation strips control characters first (sql/worker/decide.sql,
-- docs/filters.md "Normalise, don't drop"), so only replacement characters drop a document; the
-- control rule still applies to lakes of version 1.

-- name: utf8
CREATE OR REPLACE MACRO utf8_filter(text, max_replacement_ratio := 0.001,
                                    max_control_ratio := 0.001) AS
    CASE
        WHEN lc_ratio(length(text) - length(replace(text, '�', '')), length(text))
             > max_replacement_ratio
            THEN lc_detail('utf8.replacement_ratio',
                           lc_ratio(length(text) - length(replace(text, '�', '')), length(text)))
        WHEN lc_ratio(length(regexp_extract_all(text, '[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')),
                      length(text)) > max_control_ratio
            THEN lc_detail('utf8.control_ratio',
                           lc_ratio(length(regexp_extract_all(text, '[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]')),
                                    length(text)))
    END;
