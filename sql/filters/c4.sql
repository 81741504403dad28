-- C4 rules (Raffel et al. 2020, section 2.2; defaults of datatrove's C4QualityFilter). Line rules
-- edit the text: a line is removed if it has a word over max_word_length characters, does not end
-- in terminal punctuation (or ends in "..."), has fewer than min_words_per_line words, mentions
-- javascript, or a cookie/terms phrase. Page rules drop the document: "lorem ipsum" or a curly
-- bracket in a line that got that far, or fewer than min_num_sentences sentences in the kept lines.
-- Wikipedia citation marks ([1], [edit], [citation needed]) are removed from kept lines.
-- Sentences: runs of . ! ? followed by a space or the line end, at least one per kept line
-- (datatrove uses a sentence tokenizer). Returns {text: the edited text, detail: why it failed}.

-- name: c4
CREATE OR REPLACE MACRO c4_filter(text,
        remove_citations := true, filter_no_terminal_punct := true, min_num_sentences := 5,
        min_words_per_line := 3, max_word_length := 1000, filter_lorem_ipsum := true,
        filter_javascript := true, filter_curly_bracket := true, filter_policy := true) AS
    list_transform([list_transform(string_split(text, chr(10)), lambda raw:
        list_transform([lc_strip(raw)], lambda l:
        list_transform([{
            line: CASE WHEN remove_citations
                       THEN regexp_replace(l, '\[\d*\]|\[edit\]|\[citation needed\]', '', 'g')
                       ELSE l END,
            words: lc_split_ws(l)
        }], lambda c: {
            line: c.line,
            verdict: CASE
                WHEN max_word_length >= 0
                     AND list_max(list_transform(c.words, lambda w: length(w))) > max_word_length
                    THEN 'drop'
                WHEN filter_no_terminal_punct AND (NOT regexp_matches(c.line, '[.?!"'']$')
                                                   OR suffix(c.line, '...')) THEN 'drop'
                WHEN len(c.words) < min_words_per_line THEN 'drop'
                WHEN filter_lorem_ipsum AND contains(lower(c.line), 'lorem ipsum') THEN 'lorem_ipsum'
                WHEN filter_javascript AND contains(lower(c.line), 'javascript') THEN 'drop'
                WHEN filter_curly_bracket AND contains(c.line, '{') THEN 'curly_bracket'
                WHEN filter_policy AND regexp_matches(lower(c.line),
                    'terms of use|privacy policy|cookie policy|uses cookies|use of cookies|use cookies')
                    THEN 'drop'
                ELSE 'keep'
            END
        })[1])[1])],
    lambda ls: list_transform([list_filter(ls, lambda x: x.verdict = 'keep')], lambda kept: {
        text: lc_strip(array_to_string(list_transform(kept, lambda x: x.line), chr(10))),
        detail: CASE
            WHEN list_contains(list_transform(ls, lambda x: x.verdict), 'lorem_ipsum')
                 OR list_contains(list_transform(ls, lambda x: x.verdict), 'curly_bracket')
                THEN 'c4.' || list_filter(list_transform(ls, lambda x: x.verdict),
                                          lambda v: v IN ('lorem_ipsum', 'curly_bracket'))[1] || '=1'
            WHEN coalesce(list_sum(list_transform(kept, lambda x: greatest(1,
                     len(regexp_extract_all(x.line, '[.!?]+["'')\]]*(\s|$)'))))), 0)
                 < min_num_sentences
                THEN 'c4.sentences=' || coalesce(list_sum(list_transform(kept, lambda x: greatest(1,
                     len(regexp_extract_all(x.line, '[.!?]+["'')\]]*(\s|$)'))))), 0)
        END
    })[1])[1];
