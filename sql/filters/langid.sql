-- Language identification: `lc_langid(text)` is a vectorised Arrow UDF (lakecurate.langid, pycld2:
-- chosen by measurement, docs/langid.md) returning pycld2's own {lang, score}; `lc_lang_code`
-- turns its code into the lake's, and this macro decides. An empty keep-list keeps every language
-- and only annotates. Defaults: datatrove's LanguageFilter (English, score >= 0.65).
--
-- `v` is the lake's rule version (lakecurate.config.NORMALISATION_VERSION). Version 2 (issue 17):
-- codes are BCP-47 (pycld2's deprecated `iw` `jw` `in` `ji` `mo` become `he` `jv` `id` `yi` `ro`,
-- `zh-Hant` stays apart from `zh`, its script-only `xx-Xxxx` and joke/ignore codes are `un`), and
-- a listed code covers its subtags as BCP-47 prefix matching does (`zh` covers `zh-Hant`) and may
-- be a deprecated one (`iw` covers `he`). Version 1 (lakes made before): pycld2's codes with every
-- `zh*` as `zh`, matched exactly.

-- name: langid
CREATE OR REPLACE MACRO lc_lang_code(code, v) AS
    CASE
        WHEN v < 2 THEN CASE WHEN starts_with(code, 'zh') THEN 'zh' ELSE code END
        WHEN code IN ('xxx', 'zzb', 'zze', 'zzh', 'zzp') OR starts_with(code, 'xx-') THEN 'un'
        ELSE CASE code WHEN 'iw' THEN 'he' WHEN 'jw' THEN 'jv' WHEN 'in' THEN 'id'
                       WHEN 'ji' THEN 'yi' WHEN 'mo' THEN 'ro' ELSE code END
    END;
-- The entry of `codes` that covers `lang` (itself when none does): a step compares that entry
-- with its list, so `keep = ["zh"]` keeps `zh-Hant` without the macros knowing about prefixes.
CREATE OR REPLACE MACRO lc_lang_scope(lang, codes, v) AS
    CASE WHEN v < 2 THEN lang ELSE coalesce(list_filter(codes, lambda c:
        lang = lc_lang_code(c, v) OR starts_with(lang, lc_lang_code(c, v) || '-'))[1], lang) END;
CREATE OR REPLACE MACRO lc_lang_in(lang, codes, v) AS
    list_contains(codes, lc_lang_scope(lang, codes, v));
CREATE OR REPLACE MACRO langid_filter(lang, score, keep := ['en'], min_score := 0.65) AS
    CASE
        WHEN len(keep) > 0 AND NOT list_contains(keep, lang) THEN 'langid.lang=' || coalesce(lang, 'un')
        WHEN score < min_score THEN lc_detail('langid.score', score)
    END;
