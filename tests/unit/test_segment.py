"""Sentence segmentation: lossless splits, abbreviations kept whole, whitespace owned by the earlier
sentence, pipelines chosen by config and cached per process."""

from __future__ import annotations

import pytest
import spacy

from raypipe.data.segment import Segmenter
from raypipe.errors import ModelError
from raypipe.settings.data import SegmentationConfig


@pytest.fixture(scope="module")
def segmenter() -> Segmenter:
    return Segmenter(SegmentationConfig())


@pytest.mark.parametrize(("text", "sentences"), [
    ("Dr. Smith moved to Washington, D.C. in 1990. He likes tea, e.g. green tea. Does he?",
     ["Dr. Smith moved to Washington, D.C. in 1990. ", "He likes tea, e.g. green tea. ", "Does he?"]),
    ("One.  Two.\n\nThree.", ["One.  ", "Two.\n\n", "Three."]),
    ("  One. Two.  ", ["  One. ", "Two.  "]),
    ("no final punctuation", ["no final punctuation"]),
    ("   ", ["   "]),
    ("", []),
])
def test_split_gives_expected_sentences(segmenter, text, sentences):
    assert segmenter.split(text) == sentences


@pytest.mark.parametrize("text", [
    "Dr. Who met Mr. Smith in Washington, D.C. They talked, e.g. about U.S. policy!  Really?\n",
    "\n\nFirst line.\n\n\n  Second line.\t\tThird? Fourth!!! ...  \u00a0Fifth. ",
    "Prices rose 3.5% in Jan. 2024. See p. 12, i.e. the table. Fin.",
])
def test_split_is_lossless_and_sentences_start_with_text(segmenter, text):
    sentences = segmenter.split(text)
    assert "".join(sentences) == text
    assert all(s.strip() for s in sentences)
    assert all(not s[0].isspace() for s in sentences[1:])


def test_split_many_batches_texts_in_order(segmenter):
    assert segmenter.split_many(["Go. Stop.", "", "Only one"]) == [["Go. ", "Stop."], [], ["Only one"]]


def test_pipeline_is_loaded_once_per_process():
    assert Segmenter(SegmentationConfig()).nlp is Segmenter(SegmentationConfig(batch_size=8)).nlp


def test_named_pipeline_folder_is_used_instead_of_blank(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer", config={"punct_chars": ["|"]})
    nlp.to_disk(tmp_path / "pipe")
    seg = Segmenter(SegmentationConfig(spacy_model=str(tmp_path / "pipe")))
    assert seg.split("a. b | c. d") == ["a. b | ", "c. d"]
    assert seg.nlp.pipe_names == ["sentencizer"]


def test_pipeline_without_sentence_boundaries_gets_a_sentencizer(tmp_path):
    spacy.blank("en").to_disk(tmp_path / "bare")
    seg = Segmenter(SegmentationConfig(spacy_model=str(tmp_path / "bare")))
    assert seg.split("One. Two.") == ["One. ", "Two."]


def test_missing_spacy_package_is_a_model_error_saying_how_to_install():
    with pytest.raises(ModelError) as err:
        Segmenter(SegmentationConfig(spacy_model="en_core_web_zz"))
    assert "en_core_web_zz" in str(err.value)
    assert "python -m spacy download en_core_web_zz" in str(err.value)
