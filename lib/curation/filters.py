"""The filters of curation's step 4: rules over one document each, by kind (prose: language, quality;
code: the code rule), in order, the first reason wins.

- `Filter.reject(doc)`: the reason the document leaves (a `dropped_<reason>` count), or None to
  keep it. A filter may annotate the document (language, scores) and counts under its `name`.
- `LanguageFilter`: fastText language ID on the document's prose lines (the whole text when they
  are too few), kept when in `curation.languages` with a score >= `language_threshold`.
- `QualityFilter`: the fastText quality model's score >= `quality_threshold`.
- `CodeFilter`: line lengths, alphanumeric share, generated files (lib.curation.textfilters).

Trade-off: one document at a time through Python (a call per document and filter), on line
features computed for the whole shard in one polars query (lib.curation.textfilters), so a new
filter is a few lines and the column work stays batched.
"""

from __future__ import annotations

from pathlib import Path

from lib.config import CurationConfig
from lib.curation.fasttext_filters import identify_languages, identify_paragraph_languages, quality_scores
from lib.curation.steps import Stats
from lib.curation.textfilters import CODE_REASONS, Doc, code_reason


class Filter:
    """A rule over one document: `reject(doc)` returns the reason it leaves, or None to keep it.
    It may annotate the document (language, scores) and counts under its `name` in `stats`."""

    name = "filter"

    def __init__(self, stats: Stats):
        self.stats = stats

    def reject(self, doc: Doc) -> str | None:
        raise NotImplementedError


class LanguageFilter(Filter):
    """Prose in `curation.languages` with a score ≥ `language_threshold`, identified on its prose
    lines (the whole text when they are too few); no languages configured: identify, keep all."""

    name = "language"

    def __init__(self, stats: Stats, c: CurationConfig):
        super().__init__(stats)
        self.c = c
        stats.set("language.judged_on_prose_lines", 0)
        stats.set("language.by_language", {})

    def reject(self, doc: Doc) -> str | None:
        f, c = doc.features, self.c
        if f["prose_chars"] >= min(c.language_min_prose_chars, f["chars"] / 2):
            self.stats.add("language.judged_on_prose_lines")
            (doc.lang,), (doc.lang_score,) = identify_paragraph_languages([f["prose"]])
        else:
            (doc.lang,), (doc.lang_score,) = identify_languages([doc.text])
        self.stats.add(f"language.by_language.{doc.lang}")
        if c.languages and not (doc.lang in c.languages and doc.lang_score >= c.language_threshold):
            return "language"
        return None


class QualityFilter(Filter):
    """The fastText quality model's score ≥ `quality_threshold` (no model configured: keep all)."""

    name = "quality"

    def __init__(self, stats: Stats, c: CurationConfig, model: Path | None):
        super().__init__(stats)
        self.threshold, self.model = c.quality_threshold, model
        stats.set("quality.model", str(c.quality_model) if c.quality_model else None)

    def reject(self, doc: Doc) -> str | None:
        if self.model is None:
            return None
        [doc.quality_score] = quality_scores([doc.text], self.model)
        return "quality" if doc.quality_score < self.threshold else None


class CodeFilter(Filter):
    """The code rule (lib.curation.textfilters.code_reason): line lengths, alphanumeric share, generated."""

    name = "code"

    def __init__(self, stats: Stats, c: CurationConfig):
        super().__init__(stats)
        self.c = c
        stats.set("code.by_reason", {r: 0 for r in CODE_REASONS})

    def reject(self, doc: Doc) -> str | None:
        c = self.c
        reason = code_reason(doc.features, c.code_max_line_chars, c.code_max_mean_line_chars, c.code_min_alnum_share,
                             c.code_drop_generated)
        if reason is not None:
            self.stats.add(f"code.by_reason.{reason}")
        return reason


def kind_filters(stats: Stats, c: CurationConfig, quality_model: Path | None) -> dict[str, list[Filter]]:
    """The filters each kind of document goes through, in order (the first reason wins)."""
    return {"prose": [LanguageFilter(stats, c), QualityFilter(stats, c, quality_model)], "code": [CodeFilter(stats, c)]}
