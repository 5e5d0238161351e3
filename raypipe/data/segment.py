"""Sentence segmentation: the unit of a Self-RAG output segment.

Self-RAG treats one sentence as a segment (§3.1, footnote 2) and splits outputs "using Spacy" when it
builds the generator's training data (App. A.2, Algorithm 3). By default this is spaCy's rule-based
sentencizer on a blank English pipeline: offline, fast, no model download, and it does not split inside
"Dr.", "D.C." or "e.g.". A full pipeline (e.g. `en_core_web_sm`, parser-based boundaries) is used when
the config names one.

Splitting is lossless: ``"".join(segmenter.split(text)) == text``. Whitespace between two sentences
belongs to the earlier one (its trailing whitespace, as in spaCy's ``text_with_ws``), so every sentence
but a text's first starts with a non-space character and reflection tokens can be inserted between
segments without reflowing the text. Whitespace-only stretches never form a sentence of their own.
"""

from __future__ import annotations

import functools
import logging
from itertools import pairwise
from pathlib import Path

import spacy
from spacy.language import Language
from spacy.tokens import Doc

from raypipe.errors import ModelError
from raypipe.settings.data import SegmentationConfig

logger = logging.getLogger(__name__)

BLANK = "blank"


def _sets_sentence_boundaries(nlp: Language) -> bool:
    return any("token.is_sent_start" in nlp.get_pipe_meta(name).assigns for name in nlp.pipe_names)


@functools.cache
def load_pipeline(model: str, exclude: tuple[str, ...] = ()) -> Language:
    """The spaCy pipeline for `model`, loaded once per process (Ray actors reuse it across batches).

    A pipeline without a sentence-boundary component (parser, senter, sentencizer) gets a sentencizer.
    """
    if model == BLANK:
        nlp = spacy.blank("en")
    else:
        try:
            nlp = spacy.load(model, exclude=list(exclude))
        except OSError as exc:
            hint = ("check the folder" if Path(model).exists() else
                    f"install it with `python -m spacy download {model}` (or pip install the pipeline's "
                    "wheel), or set segmentation.spacy_model=blank")
            raise ModelError(f"spaCy pipeline {model!r} cannot be loaded: {hint}. ({exc})") from exc
    if not _sets_sentence_boundaries(nlp):
        nlp.add_pipe("sentencizer")
    logger.info("sentence segmentation: spaCy pipeline %r with components %s", model, nlp.pipe_names)
    return nlp


def _sentences(doc: Doc) -> list[str]:
    """Cut the text at each later sentence's start moved forward past whitespace; starts that run into
    the next sentence (or the end) are dropped, which folds whitespace-only sentences into their
    neighbours. The first sentence always starts at 0 so it keeps the text's leading whitespace."""
    text = doc.text
    cuts = [0]
    for sent in list(doc.sents)[1:]:
        start = sent.start_char
        while start < len(text) and text[start].isspace():
            start += 1
        if cuts[-1] < start < len(text):
            cuts.append(start)
    cuts.append(len(text))
    return [text[a:b] for a, b in pairwise(cuts) if b > a]


class Segmenter:
    """Splits texts into sentences with the configured spaCy pipeline."""

    def __init__(self, cfg: SegmentationConfig):
        self.cfg = cfg
        self.nlp = load_pipeline(cfg.spacy_model, tuple(cfg.exclude))

    def split(self, text: str) -> list[str]:
        return _sentences(self.nlp(text))

    def split_many(self, texts: list[str]) -> list[list[str]]:
        """Batched through `nlp.pipe`, which is much faster than one call per text."""
        return [_sentences(doc) for doc in self.nlp.pipe(texts, batch_size=self.cfg.batch_size)]
