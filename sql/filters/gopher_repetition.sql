-- Gopher repetition rules (Rae et al. 2021, Table A1; defaults of datatrove's
-- GopherRepetitionFilter): duplicated paragraphs and lines (share of them, share of characters in
-- them), the character share of the most frequent 2/3/4-gram, and the character share of
-- duplicated 5..10-grams. Character shares are over length(text), as in datatrove.
--
-- Two parts: `lc_ngram_chars(tokens)` (a vectorised Arrow UDF, lakecurate/steps/filters/gopher.py) counts
-- the n-gram characters of a whole vector of documents at once with numpy and Arrow's hash
-- tables, because SQL cannot do it efficiently (DuckDB allows no subquery inside a lambda, a
-- lambda over the token list copies it per element, and the set-based plan of one row per
-- n-gram was ~100x slower); the macro `gopher_repetition_filter` decides one document from its
-- text and those counts.
--
-- Top 2/3/4-grams: count x length of the most frequent n-gram, words joined by a space; ties go
-- to the n-gram seen first (Python's Counter). Duplicated 5..10-grams: datatrove's scan, which
-- at an n-gram seen before adds its characters (words joined without a space) and jumps n words
-- ahead; n-grams inside a jump are never remembered.

-- name: gopher_repetition
CREATE OR REPLACE MACRO gopher_repetition_filter(text, ngram_chars,
        dup_line_frac := 0.3, dup_para_frac := 0.3,
        dup_line_char_frac := 0.2, dup_para_char_frac := 0.2,
        top_2_gram_frac := 0.2, top_3_gram_frac := 0.18, top_4_gram_frac := 0.16,
        dup_5_gram_frac := 0.15, dup_6_gram_frac := 0.14, dup_7_gram_frac := 0.13,
        dup_8_gram_frac := 0.12, dup_9_gram_frac := 0.11, dup_10_gram_frac := 0.10) AS
    list_transform([{
        paras: string_split_regex(lc_strip(text), '\n{2,}'),
        lines: string_split_regex(text, '\n+'),
        ng: list_transform(coalesce(ngram_chars, [0, 0, 0, 0, 0, 0, 0, 0, 0]),
                           lambda v: lc_ratio(v, length(text)))
    }], lambda d: list_transform([{
        para: lc_ratio(lc_dup_count(d.paras), len(d.paras)),
        para_chars: lc_ratio(lc_dup_chars(d.paras), length(text)),
        line: lc_ratio(lc_dup_count(d.lines), len(d.lines)),
        line_chars: lc_ratio(lc_dup_chars(d.lines), length(text)),
        ng: d.ng
    }], lambda s: CASE
        WHEN s.para > dup_para_frac THEN lc_detail('gopher_repetition.dup_para_frac', s.para)
        WHEN s.para_chars > dup_para_char_frac
            THEN lc_detail('gopher_repetition.dup_para_char_frac', s.para_chars)
        WHEN s.line > dup_line_frac THEN lc_detail('gopher_repetition.dup_line_frac', s.line)
        WHEN s.line_chars > dup_line_char_frac
            THEN lc_detail('gopher_repetition.dup_line_char_frac', s.line_chars)
        WHEN s.ng[1] > top_2_gram_frac THEN lc_detail('gopher_repetition.top_2_gram_frac', s.ng[1])
        WHEN s.ng[2] > top_3_gram_frac THEN lc_detail('gopher_repetition.top_3_gram_frac', s.ng[2])
        WHEN s.ng[3] > top_4_gram_frac THEN lc_detail('gopher_repetition.top_4_gram_frac', s.ng[3])
        WHEN s.ng[4] > dup_5_gram_frac THEN lc_detail('gopher_repetition.dup_5_gram_frac', s.ng[4])
        WHEN s.ng[5] > dup_6_gram_frac THEN lc_detail('gopher_repetition.dup_6_gram_frac', s.ng[5])
        WHEN s.ng[6] > dup_7_gram_frac THEN lc_detail('gopher_repetition.dup_7_gram_frac', s.ng[6])
        WHEN s.ng[7] > dup_8_gram_frac THEN lc_detail('gopher_repetition.dup_8_gram_frac', s.ng[7])
        WHEN s.ng[8] > dup_9_gram_frac THEN lc_detail('gopher_repetition.dup_9_gram_frac', s.ng[8])
        WHEN s.ng[9] > dup_10_gram_frac
            THEN lc_detail('gopher_repetition.dup_10_gram_frac', s.ng[9])
    END)[1])[1];
