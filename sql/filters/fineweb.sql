-- FineWeb quality rules (Penedo et al. 2024; defaults of datatrove's FineWebQualityFilter), over
-- the non-blank lines: share of lines ending in terminal punctuation (`stop_chars`, the body of
-- an RE2 character class; default datatrove's TERMINAL_PUNCTUATION: '.', '!', '?', '。', '！',
-- '।', ... but no quotes, written as \x{..} ranges so lakecurate.toml stays ASCII), short lines,
-- characters in duplicated lines over all non-newline characters, and newlines per token
-- (list-like documents). A document without a non-blank line fails the first rule. `toks` are
-- the document's tokens (`lc_tokens(text)`, or `lc_tokens_in` for its language).

-- name: fineweb
-- (Written as a flat CASE over small macros: the same statistics bound through nested lambdas
-- made the macro 10x slower, and a flat CASE computes the tokens only for what is still alive.)
CREATE OR REPLACE MACRO lc_fw_lines(text) AS
    list_filter(string_split(text, chr(10)),
                lambda l: regexp_matches(l, '[^\s\v\x{1c}-\x{1f}\x{85}\p{Z}]'));
CREATE OR REPLACE MACRO lc_fw_punct(text, stop_chars) AS
    lc_ratio(len(list_filter(lc_fw_lines(text),
                             lambda l: regexp_matches(l, '[' || stop_chars || ']$'))),
             len(lc_fw_lines(text)));
CREATE OR REPLACE MACRO lc_fw_short(text, short_line_length) AS
    lc_ratio(len(list_filter(lc_fw_lines(text), lambda l: length(l) <= short_line_length)),
             len(lc_fw_lines(text)));
CREATE OR REPLACE MACRO lc_fw_dup(text) AS
    lc_ratio(lc_dup_chars(lc_fw_lines(text)), length(replace(text, chr(10), '')));
CREATE OR REPLACE MACRO lc_fw_newlines(text, toks) AS
    lc_ratio(length(text) - length(replace(text, chr(10), '')), len(toks));
CREATE OR REPLACE MACRO fineweb_filter(text, toks,
        line_punct_thr := 0.12, line_punct_exclude_zero := false,
        stop_chars := '!.?\x{589}\x{61d}-\x{61f}\x{6d4}\x{700}-\x{702}\x{7f9}\x{837}\x{839}\x{83d}-\x{83e}\x{964}-\x{965}\x{104a}-\x{104b}\x{1362}\x{1367}-\x{1368}\x{166e}\x{1735}-\x{1736}\x{17d4}-\x{17d6}\x{17d9}-\x{17da}\x{1803}\x{1809}\x{1944}-\x{1945}\x{1aa8}-\x{1aab}\x{1b5a}-\x{1b5b}\x{1b5e}-\x{1b5f}\x{1b7d}-\x{1b7e}\x{1c3b}-\x{1c3c}\x{1c7e}-\x{1c7f}\x{203c}-\x{203d}\x{2047}-\x{2049}\x{2e2e}\x{2e3c}\x{2e53}-\x{2e54}\x{3002}\x{a4ff}\x{a60e}-\x{a60f}\x{a6f3}\x{a6f7}\x{a876}-\x{a877}\x{a8ce}-\x{a8cf}\x{a92f}\x{a9c8}-\x{a9c9}\x{aa5d}-\x{aa5f}\x{aaf0}-\x{aaf1}\x{abeb}\x{fe52}\x{fe56}-\x{fe57}\x{ff01}\x{ff0e}\x{ff1f}\x{ff61}\x{10a56}-\x{10a57}\x{10f55}-\x{10f59}\x{10f86}-\x{10f89}\x{11047}-\x{11048}\x{110be}-\x{110c1}\x{11141}-\x{11143}\x{111c5}-\x{111c6}\x{111cd}\x{111de}-\x{111df}\x{11238}-\x{11239}\x{1123b}-\x{1123c}\x{112a9}\x{1144b}-\x{1144c}\x{115c2}-\x{115c3}\x{115c9}-\x{115d7}\x{11641}-\x{11642}\x{1173c}-\x{1173e}\x{11944}\x{11946}\x{11a42}-\x{11a43}\x{11a9b}-\x{11a9c}\x{11c41}-\x{11c42}\x{11ef7}-\x{11ef8}\x{11f43}-\x{11f44}\x{16a6e}-\x{16a6f}\x{16af5}\x{16b37}-\x{16b38}\x{16b44}\x{16e98}\x{1bc9f}\x{1da88}',
        short_line_thr := 0.67, short_line_length := 30,
        char_duplicates_ratio := 0.01, new_line_ratio := 0.3) AS
    CASE
        WHEN lc_fw_punct(text, stop_chars) < line_punct_thr
             AND NOT (lc_fw_punct(text, stop_chars) = 0 AND line_punct_exclude_zero)
            THEN lc_detail('fineweb.line_punct_ratio', lc_fw_punct(text, stop_chars))
        WHEN lc_fw_short(text, short_line_length) > short_line_thr
            THEN lc_detail('fineweb.short_line_ratio', lc_fw_short(text, short_line_length))
        WHEN lc_fw_dup(text) > char_duplicates_ratio
            THEN lc_detail('fineweb.char_dup_ratio', lc_fw_dup(text))
        WHEN lc_fw_newlines(text, toks) > new_line_ratio
            THEN lc_detail('fineweb.list_ratio', lc_fw_newlines(text, toks))
    END;
