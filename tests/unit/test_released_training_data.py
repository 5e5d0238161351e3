"""Self-RAG's released training data read as released by the training encoder.

tests/fixtures/released holds rows in the released shapes: the generator data
(`selfrag_train_data.jsonl`: instruction, output with reflection tokens and `<paragraph>` passages,
input "", id, dataset_name; as `data_creation/generator/postprocess_data.py` writes them) and the critic
data (`selfrag_critic_train.json`: one JSON array of instruction, input, output = one reflection token,
task; as `data_creation/critic/gpt4_reward/combine_chat_gpt_reward.py` writes it). The expected labels
are read off the row's text and the token ids here, never from the encoder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from raypipe.prompts import format_generator_prompt
from raypipe.tokens import PARAGRAPH_CLOSE, PARAGRAPH_OPEN, REFLECTION_TOKENS
from raypipe.training.encode import IGNORE_INDEX

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "released"
GEN_MASK = ["prompt", "paragraph"]
_PASSAGE = re.compile(re.escape(PARAGRAPH_OPEN) + "(.*?)" + re.escape(PARAGRAPH_CLOSE), re.S)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from raypipe.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def _generator_rows() -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / "selfrag_train_data.jsonl").read_text().splitlines()]


def _encode(rows: list[dict], tiny_model_dir, mask: list[str], **kwargs) -> list[dict]:
    from raypipe.training.data import encode_table

    return encode_table(pa.Table.from_pylist(rows), tokenizer_path=str(tiny_model_dir), mask=mask, max_length=512,
                        seed=0, **kwargs).to_pylist()


def test_released_generator_rows_train_with_their_passages_out_of_the_loss(tiny_model_dir, tokenizer):
    rows = _generator_rows()
    out = _encode(rows, tiny_model_dir, GEN_MASK)
    assert [(r["id"], r["rejected"], r["selected"]) for r in out] == [(row["id"], 0, 1) for row in rows]
    eos = tokenizer.eos_token
    for row, enc in zip(rows, out, strict=True):
        prompt = format_generator_prompt(row["instruction"])  # input "" in every released row
        target = row["output"]
        prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        assert enc["input_ids"][: len(prompt_ids)] == prompt_ids
        assert set(enc["labels"][: len(prompt_ids)]) == {IGNORE_INDEX}
        labels = enc["labels"][len(prompt_ids):]
        ids = enc["input_ids"][len(prompt_ids):]
        # what the loss reads: the output with every passage's body cut out, markers kept, then EOS
        learned = tokenizer.decode([label for label in labels if label != IGNORE_INDEX])
        assert learned == _PASSAGE.sub(PARAGRAPH_OPEN + PARAGRAPH_CLOSE, target) + eos
        # what it does not: exactly the passages' bodies ("Title\ntext"), in order
        hidden = tokenizer.decode([i for i, label in zip(ids, labels, strict=True) if label == IGNORE_INDEX])
        assert hidden == "".join(_PASSAGE.findall(target))
        # every reflection token of the output is one id and predicted
        for token in REFLECTION_TOKENS:
            assert (tokenizer.convert_tokens_to_ids(token) in labels) == (token in target)
    nq = out[1]
    assert "[citation needed]" not in tokenizer.decode([t for t in nq["labels"] if t != IGNORE_INDEX])


def test_training_datasets_select_released_rows_by_dataset_name(tiny_model_dir):
    out = _encode(_generator_rows(), tiny_model_dir, GEN_MASK, datasets=["nq", "fever"])
    assert [(r["id"], r["selected"]) for r in out] == [
        ("gpt4_alpaca_1042", 0), ("nq_train_20731", 1), ("asqa_train_311", 0), ("fever_train_88", 1)]


def test_released_critic_rows_train_on_their_one_token(tiny_model_dir, tokenizer):
    rows = json.loads((FIXTURES / "selfrag_critic_train.json").read_text())
    out = _encode(rows, tiny_model_dir, ["prompt"])
    assert [r["rejected"] for r in out] == [0] * len(rows)  # [Fully supported] alone is a label, not an output
    for row, enc in zip(rows, out, strict=True):
        assert [t for t in enc["labels"] if t != IGNORE_INDEX] == [
            tokenizer.convert_tokens_to_ids(row["output"]), tokenizer.eos_token_id]
