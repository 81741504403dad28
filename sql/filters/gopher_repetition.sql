-- Gopher repetition rules (Rae et al. 2021, Table A1; defaults of datatrove's
-- GopherRepetitionFilter): duplicated paragraphs and lines (share of them, share of characters in
-- them), the character share of the most frequent 2/3/4-gram, and the character share of words
-- covered by repeated 5..10-grams. Character shares are over length(text), as in datatrove.
--
-- Two parts, because DuckDB allows no subquery inside a lambda: `gopher_repetition_ngrams` counts
-- n-grams set-based over a whole chunk (relation `lc_input(doc, text)`, one hash aggregate for all
-- documents at once), and the macro `gopher_repetition_filter` decides one document from its text
-- and those counts.
--
-- Repeated n-grams: every occurrence of an n-gram after its first covers its n words, and the
-- covered words' characters are counted once (Gopher's definition). datatrove scans greedily and
-- skips n words after a hit instead; docs/filters.md says how often the two disagree.

-- name: gopher_repetition_ngrams
-- Per document: characters of the top n-gram for n = 2, 3, 4 (count x length, words joined by a
-- space; ties go to the n-gram seen first, as Python's Counter does), then characters of the words
-- covered by repeated n-grams for n = 5..10 (words joined without a space, as datatrove does).
WITH d AS (
    SELECT doc, lc_tokens(text) AS toks FROM lc_input
), w AS MATERIALIZED (
    SELECT doc, unnest(toks) AS w, generate_subscripts(toks, 1) AS i FROM d
), g AS MATERIALIZED (
    -- n-gram ids from a sliding window of word hashes (a lambda over the token list would copy
    -- the list once per element: quadratic in the document length).
    SELECT doc, n, i, hash(win[1:n]) AS h FROM (
        SELECT doc, i, list(hash(w)) OVER (PARTITION BY doc ORDER BY i
                                           ROWS BETWEEN CURRENT ROW AND 9 FOLLOWING) AS win
        FROM w), range(2, 11) r(n)
    WHERE len(win) >= n
), top AS (
    SELECT doc, n, max(c) AS c, arg_max(first, {c: c, f: -first}) AS first FROM (
        SELECT doc, n, h, count(*) AS c, min(i) AS first FROM g WHERE n <= 4 GROUP BY ALL)
    GROUP BY ALL
), top_chars AS (
    SELECT t.doc, t.n, t.c * (sum(length(w.w)) + t.n - 1) AS chars
    FROM top t JOIN w ON w.doc = t.doc AND w.i BETWEEN t.first AND t.first + t.n - 1
    GROUP BY t.doc, t.n, t.c
), rep AS (
    SELECT doc, n, i FROM (
        SELECT doc, n, i, min(i) OVER (PARTITION BY doc, n, h) AS first FROM g WHERE n >= 5)
    WHERE i > first
), covered AS (
    SELECT DISTINCT doc, n, unnest(range(i, i + n)) AS j FROM rep
), dup_chars AS (
    SELECT c.doc, c.n, sum(length(w.w)) AS chars
    FROM covered c JOIN w ON w.doc = c.doc AND w.i = c.j
    GROUP BY ALL
), chars AS (
    SELECT doc, n, chars FROM top_chars UNION ALL SELECT doc, n, chars FROM dup_chars
)
SELECT doc, list_transform(range(2, 11), lambda k: coalesce(list_filter(
    list(struct_pack(n := n, chars := chars)), lambda x: x.n = k)[1].chars, 0)) AS ngram_chars
FROM chars
GROUP BY doc;

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
