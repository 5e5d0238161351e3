"""Encoders: MiniLM through the generic HF encoder reproduces sentence-transformers; pooling, order."""

from __future__ import annotations

import numpy as np
import pytest

from raypipe.errors import ConfigError, ModelError
from raypipe.models import minilm_path
from raypipe.retrieval.encoders import HFEncoder, build_encoder, passage_texts
from raypipe.settings.retrieval import EncoderConfig

TEXTS = [
    "Ada Lovelace wrote the first published algorithm for Babbage's Analytical Engine.",
    "Paris",
    "The Danube flows through ten countries, more than any other river in the world, ending in the Black Sea.",
    "A short one.",
    "Mount Kenya is the second-highest mountain in Africa.",
]


@pytest.fixture(scope="module")
def minilm():
    return build_encoder(EncoderConfig(batch_size=2))


def test_minilm_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm_path()), device="cpu").encode(TEXTS)
    got = minilm.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, reference, atol=1e-5)


def test_batched_rows_come_back_in_input_order(minilm):
    one_by_one = np.stack([minilm.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(minilm.encode(TEXTS), one_by_one, atol=1e-5)


def test_cls_pooling_is_the_first_token_state():
    import torch
    from transformers import AutoModel, AutoTokenizer

    encoder = HFEncoder(minilm_path(), name="m", pooling="cls", normalize=False, device="cpu")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    model = AutoModel.from_pretrained(minilm_path(), local_files_only=True).eval()
    with torch.inference_mode():
        reference = model(**tokenizer([TEXTS[0]], return_tensors="pt")).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(encoder.encode([TEXTS[0]]), reference, atol=1e-5)
    assert encoder.name == "m:cls"


def test_normalize_off_keeps_length_but_not_direction(minilm):
    raw = HFEncoder(minilm_path(), name="m", normalize=False, device="cpu").encode(TEXTS)
    norms = np.linalg.norm(raw, axis=1)
    assert not np.allclose(norms, 1.0)
    np.testing.assert_allclose(raw / norms[:, None], minilm.encode(TEXTS), atol=1e-5)


def test_empty_input_gives_an_empty_matrix(minilm):
    assert minilm.encode([]).shape == (0, 384)


def test_hf_kind_needs_an_existing_folder(tmp_path):
    with pytest.raises(ConfigError, match="retrieval.encoder.path"):
        build_encoder(EncoderConfig(kind="hf"))
    with pytest.raises(ModelError, match="no config.json"):
        build_encoder(EncoderConfig(kind="hf", path=str(tmp_path / "missing")))


def test_passage_texts_prepend_the_title_when_asked():
    assert passage_texts(["Paris", ""], ["Capital.", "Untitled."], True) == ["Paris Capital.", "Untitled."]
    assert passage_texts(["Paris"], ["Capital."], False) == ["Capital."]
