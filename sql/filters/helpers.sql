-- Shared building blocks of the filter macros. Loaded before every filter (see lakecurate.filters).
--
-- Whitespace is Python's str.isspace() set (RE2's \s is ASCII only, see sql/worker/decide.sql).
-- Tokens: a word is a run of letters, marks, digits or '_' (apostrophes inside a word kept:
-- "don't" is one word); every other run of non-space characters is one symbol token (",", "...").
-- datatrove uses spaCy/NLTK here; docs/filters.md lists where the two tokenisers differ.

-- name: helpers
CREATE OR REPLACE MACRO lc_strip(s) AS
    regexp_replace(s, '^[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+|[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+$', '', 'g');
CREATE OR REPLACE MACRO lc_tokens(s) AS
    regexp_extract_all(s, '[\p{L}\p{M}\p{N}_]+(?:[''’][\p{L}\p{M}\p{N}_]+)*|[^\p{L}\p{M}\p{N}_\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+');
-- Python's str.split(): whitespace-separated words, none for an empty or blank string.
CREATE OR REPLACE MACRO lc_split_ws(s) AS
    list_filter(string_split_regex(s, '[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+'), lambda w: w <> '');
-- Occurrences after the first, and their characters (Gopher's duplicate line/paragraph counts).
CREATE OR REPLACE MACRO lc_dup_count(xs) AS len(xs) - len(list_distinct(xs));
CREATE OR REPLACE MACRO lc_dup_chars(xs) AS
    coalesce(list_sum(list_transform(xs, lambda x: length(x))), 0)
    - coalesce(list_sum(list_transform(list_distinct(xs), lambda x: length(x))), 0);
-- A ratio that is 0 (not an error) when there is nothing to divide by.
CREATE OR REPLACE MACRO lc_ratio(a, b) AS CASE WHEN b = 0 THEN 0.0 ELSE a / b END;
-- How a measured value is written into `detail`: filter.metric=value, 4 significant decimals.
CREATE OR REPLACE MACRO lc_detail(name, value) AS name || '=' || round(value::DOUBLE, 4)::VARCHAR;
