-- C4 rules (Raffel et al. 2020, section 2.2; defaults of datatrove's C4QualityFilter). Line rules
-- edit the text: a line is removed if it has a word over max_word_length characters, does not end
-- in terminal punctuation (or ends in "..."), has fewer than min_words_per_line words, mentions
-- javascript, or a cookie/terms phrase. Page rules drop the document: "lorem ipsum" or a curly
-- bracket in a line that got that far, or fewer than min_num_sentences sentences in the kept lines.
-- Wikipedia citation marks ([1], [edit], [citation needed]) are removed from kept lines.
-- Sentences per kept line, as datatrove's sentence splitter (spaCy's sentencizer) counts them:
-- one, plus one per sentence end followed by more text. An end is a single '.' (not "...", not
-- the period of "U.S.", "e.g.", "a." or of "Mr.", "Jan.", "Calif." and spaCy's other
-- exceptions) or a run of '!'/'?', after a word of two characters or more, a digit or a
-- closing symbol, then closing quotes/brackets and a space; or a period between a lower-case and
-- an upper-case letter ("end.Next"). Returns {text: the edited text, detail: why it failed}.

-- name: c4
CREATE OR REPLACE MACRO lc_sentences(line) AS
    1 + len(regexp_extract_all(line,
            '(?:[\p{L}\p{N}][\p{L}\p{N}]|[^\s.\p{L}\p{N}]|(?:^|\s)\p{N})(?:\.|[!?]+)["''”’)\]]*[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+\S|\p{Ll}\.\p{Lu}'))
      - len(regexp_extract_all(line, '(?:^|[^\p{L}\p{N}_.])(?:Mrs|Mr|Ms|Dr|Prof|Gen|Gov|Sen|Rep|Rev|Adm|Bros|Corp|Inc|Ltd|Co|Jr|Sr|St|Mt|vs|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec|Ala|Ariz|Ark|Calif|Colo|Conn|Del|Fla|Ga|Ill|Ind|Kan|Kans|Ky|La|Mass|Md|Mich|Minn|Miss|Mo|Mont|Neb|Nebr|Nev|Okla|Ore|Pa|Tenn|Va|Wash|Wis)\.[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+\S'));
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
            WHEN coalesce(list_sum(list_transform(kept, lambda x: lc_sentences(x.line))), 0)
                 < min_num_sentences
                THEN 'c4.sentences='
                     || coalesce(list_sum(list_transform(kept, lambda x: lc_sentences(x.line))), 0)
        END
    })[1])[1];
