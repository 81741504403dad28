-- Shared building blocks of the filter macros. Loaded before every filter (see lakecurate.filters).
--
-- Whitespace is Python's str.isspace() set (RE2's \s is ASCII only, see sql/worker/decide.sql).
--
-- Tokens (`lc_tokens`) approximate datatrove's English word tokenizer (spaCy's rule-based
-- tokenizer, which datatrove uses for every document whatever its language) with one RE2 pass,
-- measured against it on ../shared/data/real (docs/filters.md):
--   - a word is a run of letters, marks, digits or '_', and goes on across symbols inside a
--     whitespace-separated chunk ("l'homme", "AT&T", "x@y.com", "end.next", Chinese text with
--     its commas), except where spaCy splits an infix: hyphens and dashes, ',' ':' '/' '<' '>'
--     '=' (but "1,000", "3.5", "10:30", "1/2", "1990–2000" stay one), "...", and a period before
--     an upper-case letter ("end.Next"); symbols at either end of a chunk are tokens;
--   - English contractions are split as spaCy does: "don't" -> "do" "n't", "it's" -> "it" "'s",
--     "I'm", "we're", "they've", "you'll", "he'd", and "dont" -> "do" "nt" (a space is put in
--     before the contraction, then "n't" and "'s" are tokens of their own);
--   - "U.S.", "e.g.", "a." (letters each followed by a period) and the titles, months and
--     state abbreviations of spaCy's exceptions ("Mr.", "Jan.", "Calif.") keep their period;
--   - an ANSI colour code up to its final letter ("\x1b[33" of "\x1b[33m") is one token;
--   - "...", "--", "~~" and "……" runs are one token; any other symbol is one token per
--     character (spaCy splits "),", "?!" and "***" into single characters).
-- Not done here: spaCy's exceptions for URLs, "C++", "@user", "COVID-19", and its other
-- special cases; docs/filters.md has the measured effect.
--
-- `lc_is_word`: a token with a character outside datatrove's PUNCTUATION_SET (its "non-symbol
-- word"); the set is datatrove.utils.text.PUNCTUATION_SET as RE2 ranges.

-- name: helpers
CREATE OR REPLACE MACRO lc_strip(s) AS
    regexp_replace(s, '^[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+|[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+$', '', 'g');
-- Contractions get a space before them ("n't" then joins as a word; the apostrophe of "'s" becomes
-- U+E000 so that it starts a word); the period of an abbreviation becomes U+E001 so that it
-- stays in its word (but not the first period of "x..."). Both stand for one character, so
-- lengths are unchanged.
CREATE OR REPLACE MACRO lc_tokens_prepare(s) AS
    regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(s,
        '(\p{L})(n[''’]t)\b|\b([Dd]o|[Dd]oes|[Dd]id|[Cc]a|[Ww]o|[Ii]s|[Aa]re|[Ww]as|[Ww]ere|[Hh]as|[Hh]ave|[Hh]ad|[Cc]ould|[Ww]ould|[Ss]hould|[Mm]ust|[Aa]i|[Nn]eed)(nt)\b',
        '\1\3 \2\4', 'g'),
        '(\p{L})[''’]([sSmMdD]|re|RE|ve|VE|ll|LL)\b', '\1 ' || chr(57344) || '\2', 'g'),
        '(^|[^\p{L}\p{M}\p{N}_.\x{e001}])(Mrs|Mr|Ms|Dr|Prof|Gen|Gov|Sen|Rep|Rev|Adm|Bros|Corp|Inc|Ltd|Co|Jr|Sr|St|Mt|vs|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec|Ala|Ariz|Ark|Calif|Colo|Conn|Del|Fla|Ga|Ill|Ind|Kan|Kans|Ky|La|Mass|Md|Mich|Minn|Miss|Mo|Mont|Neb|Nebr|Nev|Okla|Ore|Pa|Tenn|Va|Wash|Wis|\p{L})\.', '\1\2' || chr(57345), 'g'),
        '(\x{e001})(\p{L})\.', '\1\2' || chr(57345), 'g'),
        '\x{e001}\.', '..', 'g');
CREATE OR REPLACE MACRO lc_tokens(s) AS
    regexp_extract_all(lc_tokens_prepare(s),
        '[\p{L}\p{M}\p{N}_\x{e000}\x{e001}]+(?:[^\s\v\x{1c}-\x{1f}\x{85}\p{Z}\p{L}\p{M}\p{N}_\-,/:<>=.…–—~]+[\p{L}\p{M}\p{N}_\x{e000}\x{e001}]+|[.,:/–]\p{N}[\p{L}\p{M}\p{N}_\x{e000}\x{e001}]*|\.\p{Ll}[\p{L}\p{M}\p{N}_\x{e000}\x{e001}]*)*|\x{1b}\[[0-9;]*|\.{2,}|-{2,}|~{2,}|…+|[^\p{L}\p{M}\p{N}_\s\v\x{1c}-\x{1f}\x{85}\p{Z}]');
-- Words counted per language (rule version 3, docs/filters.md "Per-language rules"); `unit` is
-- the document language's (lakecurate/steps/filters/fineweb2_languages.toml, [words]):
--   'char': a language written without spaces (Chinese, Japanese, Thai...): every Han, kana,
--     Thai, Lao, Khmer, Myanmar or Tibetan character (with its combining marks) is a word, the
--     rest (Latin words, digits, symbols) tokenised as usual;
--   'elision': an elided word before a letter ("l'", "d'", "qu'", "dell'") is a word of its own,
--     with its apostrophe as U+E000 (as "'s" above; stop words compare it as "'");
--   anything else (and NULL: no language known): `lc_tokens`, unchanged.
CREATE OR REPLACE MACRO lc_tokens_in(s, unit) AS
    lc_tokens(CASE unit
        WHEN 'char' THEN regexp_replace(s,
            '(\p{Han}|\p{Hiragana}|\p{Katakana}|[\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}\p{Tibetan}]\p{M}*)',
            ' \1 ', 'g')
        WHEN 'elision' THEN regexp_replace(s,
            '(^|[^\p{L}\p{M}\p{N}_])([LlDdJjMmNnSsTtCc]|[Qq]u|[Jj]usqu|[Ll]orsqu|[Pp]uisqu|[Dd]ell|[Aa]ll|[Dd]all|[Nn]ell|[Ss]ull|[Uu]n)[''’](\p{L})',
            '\1\2' || chr(57344) || ' \3', 'g')
        ELSE s
    END);
CREATE OR REPLACE MACRO lc_is_word(t) AS
    regexp_matches(t, '[^\x{0}-\x{8}\x{b}-\x{1f}!-/:-@\x{5b}-`{-\x{9f}«´»։؝-؟۔܀-܂߹࠷࠹࠽࠾।॥၊။።፧፨᙮᜵᜶។-៖៙៚᠃᠉᥄᥅᪨-᪫᭚᭛᭞᭟᭽᭾᰻᰼᱾᱿–—’“-„…‼‽⁇-⁉∶━►⸮⸼⹓⹔、。〈-」【】꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝-꩟꫰꫱꯫﹒﹖﹗！％（），．１：；？～｡\x{10a56}\x{10a57}\x{10f55}-\x{10f59}\x{10f86}-\x{10f89}\x{11047}\x{11048}\x{110be}-\x{110c1}\x{11141}-\x{11143}\x{111c5}\x{111c6}\x{111cd}\x{111de}\x{111df}\x{11238}\x{11239}\x{1123b}\x{1123c}\x{112a9}\x{1144b}\x{1144c}\x{115c2}\x{115c3}\x{115c9}-\x{115d7}\x{11641}\x{11642}\x{1173c}-\x{1173e}\x{11944}\x{11946}\x{11a42}\x{11a43}\x{11a9b}\x{11a9c}\x{11c41}\x{11c42}\x{11ef7}\x{11ef8}\x{11f43}\x{11f44}\x{16a6e}\x{16a6f}\x{16af5}\x{16b37}\x{16b38}\x{16b44}\x{16e98}\x{1bc9f}\x{1da88}]');
-- Python's str.split(): whitespace-separated words, none for an empty or blank string.
CREATE OR REPLACE MACRO lc_split_ws(s) AS
    list_filter(string_split_regex(s, '[\s\v\x{1c}-\x{1f}\x{85}\p{Z}]+'), lambda w: w <> '');
-- Python's str.splitlines() (the text is already LF-normalised): none for an empty string.
CREATE OR REPLACE MACRO lc_splitlines(s) AS
    CASE WHEN s = '' THEN []::VARCHAR[]
         ELSE string_split_regex(regexp_replace(s, '[\n\x{b}\x{c}\x{1c}-\x{1e}\x{85}\x{2028}\x{2029}]$', ''),
                                 '[\n\x{b}\x{c}\x{1c}-\x{1e}\x{85}\x{2028}\x{2029}]') END;
-- Occurrences after the first, and their characters (Gopher's duplicate line/paragraph counts).
CREATE OR REPLACE MACRO lc_dup_count(xs) AS len(xs) - len(list_distinct(xs));
CREATE OR REPLACE MACRO lc_dup_chars(xs) AS
    coalesce(list_sum(list_transform(xs, lambda x: length(x))), 0)
    - coalesce(list_sum(list_transform(list_distinct(xs), lambda x: length(x))), 0);
-- A ratio that is 0 (not an error) when there is nothing to divide by.
CREATE OR REPLACE MACRO lc_ratio(a, b) AS CASE WHEN b = 0 THEN 0.0 ELSE a / b END;
-- How a measured value is written into `detail`: filter.metric=value, 4 significant decimals.
CREATE OR REPLACE MACRO lc_detail(name, value) AS name || '=' || round(value::DOUBLE, 4)::VARCHAR;
