-- Gopher repetition rules (Rae et al. 2021, Table A1; defaults of datatrove's
-- GopherRepetitionFilter): duplicated paragraphs and lines (share of them, share of characters in
-- them), the character share of the most frequent 2/3/4-gram, and the character share of words
-- covered by repeated 5..10-grams. Ratios of characters are over length(text), as in datatrove.
--
-- Repeated n-grams: every occurrence of an n-gram after its first covers its n words, and the
-- covered words' characters are counted once (Gopher's definition). datatrove scans greedily and
-- skips n words after a hit instead; docs/filters.md shows how rarely the two disagree.

-- name: gopher_repetition_ngrams
-- Top n-gram character count, for n = 2, 3, 4: count x length of the most frequent n-gram
-- (words joined by spaces; ties go to the n-gram seen first, as Python's Counter does).
CREATE OR REPLACE MACRO lc_top_ngram_chars(words) AS (
    SELECT list(v ORDER BY n) FROM (
        SELECT n, arg_max(c * length(g), {c: c, first: -first}) AS v FROM (
            SELECT n, g, count(*) AS c, min(i) AS first FROM (
                SELECT n.n, i.i, array_to_string(words[i.i:i.i + n.n - 1], ' ') AS g
                FROM range(2, 5) n(n), range(1, len(words) + 1) i(i)
                WHERE i.i <= len(words) - n.n + 1)
            GROUP BY n, g)
        GROUP BY n));
-- Characters of the words covered by repeated n-grams, for n = 5..10.
CREATE OR REPLACE MACRO lc_dup_ngram_chars(words) AS (
    SELECT list(v ORDER BY n) FROM (
        SELECT n, sum(length(words[j])) AS v FROM (
            SELECT DISTINCT n, unnest(range(i, i + n)) AS j FROM (
                SELECT n, i, row_number() OVER (PARTITION BY n, h ORDER BY i) AS k FROM (
                    SELECT n.n, i.i, hash(words[i.i:i.i + n.n - 1]) AS h
                    FROM range(5, 11) n(n), range(1, len(words) + 1) i(i)
                    WHERE i.i <= len(words) - n.n + 1))
            WHERE k > 1)
        GROUP BY n));

-- name: gopher_repetition
CREATE OR REPLACE MACRO gopher_repetition_filter(text,
        dup_line_frac := 0.3, dup_para_frac := 0.3,
        dup_line_char_frac := 0.2, dup_para_char_frac := 0.2,
        top_2_gram_frac := 0.2, top_3_gram_frac := 0.18, top_4_gram_frac := 0.16,
        dup_5_gram_frac := 0.15, dup_6_gram_frac := 0.14, dup_7_gram_frac := 0.13,
        dup_8_gram_frac := 0.12, dup_9_gram_frac := 0.11, dup_10_gram_frac := 0.10) AS
    list_transform([{
        paras: string_split_regex(lc_strip(text), '\n{2,}'),
        lines: string_split_regex(text, '\n+'),
        words: lc_tokens(text)
    }], lambda d: list_transform([{
        para: lc_ratio(lc_dup_count(d.paras), len(d.paras)),
        para_chars: lc_ratio(lc_dup_chars(d.paras), length(text)),
        line: lc_ratio(lc_dup_count(d.lines), len(d.lines)),
        line_chars: lc_ratio(lc_dup_chars(d.lines), length(text)),
        top: list_transform(coalesce(lc_top_ngram_chars(d.words), []),
                            lambda v: lc_ratio(v, length(text))),
        dup: list_transform(coalesce(lc_dup_ngram_chars(d.words), []),
                            lambda v: lc_ratio(v, length(text)))
    }], lambda s: CASE
        WHEN s.para > dup_para_frac THEN lc_detail('gopher_repetition.dup_para_frac', s.para)
        WHEN s.para_chars > dup_para_char_frac
            THEN lc_detail('gopher_repetition.dup_para_char_frac', s.para_chars)
        WHEN s.line > dup_line_frac THEN lc_detail('gopher_repetition.dup_line_frac', s.line)
        WHEN s.line_chars > dup_line_char_frac
            THEN lc_detail('gopher_repetition.dup_line_char_frac', s.line_chars)
        WHEN s.top[1] > top_2_gram_frac THEN lc_detail('gopher_repetition.top_2_gram_frac', s.top[1])
        WHEN s.top[2] > top_3_gram_frac THEN lc_detail('gopher_repetition.top_3_gram_frac', s.top[2])
        WHEN s.top[3] > top_4_gram_frac THEN lc_detail('gopher_repetition.top_4_gram_frac', s.top[3])
        WHEN s.dup[1] > dup_5_gram_frac THEN lc_detail('gopher_repetition.dup_5_gram_frac', s.dup[1])
        WHEN s.dup[2] > dup_6_gram_frac THEN lc_detail('gopher_repetition.dup_6_gram_frac', s.dup[2])
        WHEN s.dup[3] > dup_7_gram_frac THEN lc_detail('gopher_repetition.dup_7_gram_frac', s.dup[3])
        WHEN s.dup[4] > dup_8_gram_frac THEN lc_detail('gopher_repetition.dup_8_gram_frac', s.dup[4])
        WHEN s.dup[5] > dup_9_gram_frac THEN lc_detail('gopher_repetition.dup_9_gram_frac', s.dup[5])
        WHEN s.dup[6] > dup_10_gram_frac
            THEN lc_detail('gopher_repetition.dup_10_gram_frac', s.dup[6])
    END)[1])[1];
