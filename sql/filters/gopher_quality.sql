-- Gopher quality rules (Rae et al. 2021, "Scaling Language Models", Appendix A; the defaults are
-- datatrove's GopherQualityFilter). The first rule that fails names the measured value in detail.
-- As in datatrove: the word count and mean word length are over the non-symbol tokens (a token
-- with a character outside PUNCTUATION_SET, `lc_is_word`), the hash and ellipsis ratios and the
-- alphabetic share over all tokens; stop words are counted once each (distinct stop words
-- present) and match case-sensitively (so "The" is not "the"); lines are Python's splitlines().
-- `toks` are the document's tokens: `lc_tokens(text)`, or `lc_tokens_in(text, unit)` for its
-- language (rule version 3); an elided word's U+E000 apostrophe matches a stop word's "'".

-- name: gopher_quality
CREATE OR REPLACE MACRO gopher_quality_filter(text, toks,
        min_doc_words := 50, max_doc_words := 100000,
        min_avg_word_length := 3.0, max_avg_word_length := 10.0,
        max_symbol_word_ratio := 0.1,
        max_bullet_lines_ratio := 0.9, max_ellipsis_lines_ratio := 0.3,
        max_non_alpha_words_ratio := 0.8,
        min_stop_words := 2,
        stop_words := ['the', 'be', 'to', 'of', 'and', 'that', 'have', 'with']) AS
    list_transform([toks], lambda tt:
        list_transform([list_filter(tt, lambda t: lc_is_word(t))],
        lambda words:
        list_transform([lc_splitlines(text)], lambda lines:
        list_transform([{
            n_words: len(words),
            mean_len: coalesce(list_avg(list_transform(words, lambda w: length(w))), 0.0),
            hashes: lc_ratio(length(text) - length(replace(text, '#', '')), len(tt)),
            ellipses: lc_ratio((length(text) - length(replace(text, '...', ''))) / 3
                               + length(text) - length(replace(text, '…', '')), len(tt)),
            bullets: lc_ratio(len(list_filter(lines, lambda l:
                         regexp_matches(l, '^[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]*[•-]'))), len(lines)),
            end_ellipsis: lc_ratio(len(list_filter(lines, lambda l:
                         regexp_matches(l, '(\.\.\.|…)[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]*$'))),
                         len(lines)),
            alpha: lc_ratio(len(list_filter(tt, lambda t: regexp_matches(t, '\p{L}'))), len(tt)),
            stops: len(list_distinct(list_filter(list_transform(tt, lambda t: replace(t, chr(57344), '''')),
                                                  lambda t: list_contains(stop_words, t))))
        }], lambda s: CASE
            WHEN s.n_words < min_doc_words OR s.n_words > max_doc_words
                THEN 'gopher_quality.n_words=' || s.n_words
            WHEN s.mean_len < min_avg_word_length OR s.mean_len > max_avg_word_length
                THEN lc_detail('gopher_quality.mean_word_length', s.mean_len)
            WHEN s.hashes > max_symbol_word_ratio
                THEN lc_detail('gopher_quality.hash_ratio', s.hashes)
            WHEN s.ellipses > max_symbol_word_ratio
                THEN lc_detail('gopher_quality.ellipsis_ratio', s.ellipses)
            WHEN s.bullets > max_bullet_lines_ratio
                THEN lc_detail('gopher_quality.bullet_lines_ratio', s.bullets)
            WHEN s.end_ellipsis > max_ellipsis_lines_ratio
                THEN lc_detail('gopher_quality.ellipsis_lines_ratio', s.end_ellipsis)
            WHEN s.alpha < max_non_alpha_words_ratio
                THEN lc_detail('gopher_quality.alpha_words_ratio', s.alpha)
            WHEN s.stops < min_stop_words
                THEN 'gopher_quality.stop_words=' || s.stops
        END)[1])[1])[1])[1];
