-- Language identification: `lc_langid(text)` is a vectorised Arrow UDF (lakecurate.langid, pycld2:
-- chosen by measurement, docs/langid.md) returning {lang, score}; this macro decides. An empty
-- keep-list keeps every language and only annotates. Defaults: datatrove's LanguageFilter
-- (English, score >= 0.65).

-- name: langid
CREATE OR REPLACE MACRO langid_filter(lang, score, keep := ['en'], min_score := 0.65) AS
    CASE
        WHEN len(keep) > 0 AND NOT list_contains(keep, lang) THEN 'langid.lang=' || coalesce(lang, 'un')
        WHEN score < min_score THEN lc_detail('langid.score', score)
    END;
