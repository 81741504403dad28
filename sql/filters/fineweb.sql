-- FineWeb quality rules (Penedo et al. 2024; defaults of datatrove's FineWebQualityFilter):
-- share of lines ending in terminal punctuation, share of short lines, characters in duplicated
-- lines, and newlines per word (list-like documents).

-- name: fineweb
CREATE OR REPLACE MACRO fineweb_filter(text,
        line_punct_thr := 0.12, line_punct_exclude_zero := false,
        short_line_thr := 0.67, short_line_length := 30,
        char_duplicates_ratio := 0.01, new_line_ratio := 0.3) AS
    list_transform([string_split(text, chr(10))], lambda lines:
        list_transform([{
            punct: lc_ratio(len(list_filter(lines, lambda l: regexp_matches(l, '[.''"!?]$'))),
                            len(lines)),
            short: lc_ratio(len(list_filter(lines, lambda l: length(l) <= short_line_length)),
                            len(lines)),
            dup: lc_ratio(lc_dup_chars(list_filter(lines, lambda l: lc_strip(l) <> '')),
                          length(replace(text, chr(10), ''))),
            newlines: lc_ratio(len(lines) - 1, len(lc_tokens(text)))
        }], lambda s: CASE
            WHEN s.punct <= line_punct_thr AND NOT (s.punct = 0 AND line_punct_exclude_zero)
                THEN lc_detail('fineweb.line_punct_ratio', s.punct)
            WHEN s.short >= short_line_thr THEN lc_detail('fineweb.short_line_ratio', s.short)
            WHEN s.dup >= char_duplicates_ratio THEN lc_detail('fineweb.char_dup_ratio', s.dup)
            WHEN s.newlines > new_line_ratio THEN lc_detail('fineweb.list_ratio', s.newlines)
        END)[1])[1];
