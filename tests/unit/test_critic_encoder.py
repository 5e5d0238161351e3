"""The encoder critic (`raypipe.critic.encoder`): its input formats, its head layout, that a folder of it
fills the same label distributions as the LM critic whatever the batching, and the training task
(loss per aspect head, frozen layers, class weights, config checks) without Ray."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import torch

from raypipe import tokens
from raypipe.config import RaypipeConfig
from raypipe.critic.dataset import CRITIC_SCHEMA, example_column
from raypipe.critic.encoder import (
    GROUP_START,
    MANIFEST,
    NUM_OUTPUTS,
    encode_examples,
    encoder_pair,
    group_mask,
    read_manifest,
    target_index,
    write_manifest,
)
from raypipe.critic.encoder_critic import EncoderCritic
from raypipe.critic.encoder_model import HEADS_FILE, load_aspect_heads, save_aspect_heads
from raypipe.critic.encoder_train import CriticEncoderTask, critic_task, inverse_frequency_weights
from raypipe.critic.predict import make_predictor
from raypipe.data.io import write_parquet
from raypipe.errors import ConfigError, DataError, ModelError
from raypipe.jobs.train import run_train
from raypipe.models import minilm_path
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt

PASSAGE = "Ilse Marrow\nIlse Marrow (born 1961) is a Dutch painter known for her harbour scenes."
EXAMPLES = [
    CriticExample(Aspect.RETRIEVE_INPUT, "Who painted harbour scenes?"),
    CriticExample(Aspect.RETRIEVE, "Write about Ilse Marrow.", evidence=PASSAGE, output="She was born in 1961."),
    CriticExample(Aspect.IS_REL, "Who is Ilse Marrow?", evidence=PASSAGE),
    CriticExample(Aspect.IS_SUP, "Write about Ilse Marrow.", evidence=PASSAGE, preceding="Ilse Marrow paints.",
                  output="She is Dutch."),
    CriticExample(Aspect.IS_USE, "Write about Ilse Marrow.", output="Ilse Marrow is a Dutch painter. " * 5),
]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A 3-layer random BERT with MiniLM's tokenizer: the encoder critic's shape, cheap to run."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("encoder")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _critic(encoder_dir, folder, input_format="pair"):
    torch.manual_seed(1)
    model, tokenizer = load_aspect_heads(encoder_dir, layers=2)
    save_aspect_heads(model, tokenizer, folder)
    write_manifest(folder, str(encoder_dir), 2, max_length=96, input_format=input_format)
    return folder


@pytest.fixture(scope="module")
def critic_dir(encoder_dir, tmp_path_factory):
    return _critic(encoder_dir, tmp_path_factory.mktemp("critic"))


def test_pairs_put_the_task_first_and_the_judged_text_second():
    a, b = encoder_pair(EXAMPLES[0])
    assert a == "retrieve_input:\nWho painted harbour scenes?" and b == ""
    a, b = encoder_pair(EXAMPLES[3])
    assert a == "is_sup:\nWrite about Ilse Marrow.\nIlse Marrow paints."
    assert b == f"Evidence: {PASSAGE}\nOutput: She is Dutch."
    assert encoder_pair(EXAMPLES[2])[1] == f"Evidence: {PASSAGE}"


def test_the_input_format_decides_what_the_encoder_reads(encoder_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_dir, local_files_only=True)
    ex = EXAMPLES[3]
    prompt = encode_examples(tokenizer, [ex], "prompt", 512)
    assert tokenizer.decode(prompt["input_ids"][0], skip_special_tokens=True) == \
        tokenizer.decode(tokenizer(critic_prompt(ex))["input_ids"], skip_special_tokens=True)
    pair = encode_examples(tokenizer, [ex], "pair", 512)
    # text B (the evidence and the output) is the second segment of the pair
    second = pair["input_ids"][0][pair["token_type_ids"][0] == 1]
    assert tokenizer.decode(second, skip_special_tokens=True) == \
        tokenizer.decode(tokenizer(encoder_pair(ex)[1])["input_ids"], skip_special_tokens=True)
    assert int(prompt["token_type_ids"].sum()) == 0


def test_head_groups_follow_aspect_labels():
    assert NUM_OUTPUTS == sum(len(v) for v in ASPECT_LABELS.values()) == 15
    starts = [GROUP_START[a] for a in Aspect]
    assert starts == sorted(starts) and starts[0] == 0
    assert target_index(Aspect.IS_REL, tokens.IRRELEVANT) == GROUP_START[Aspect.IS_REL] + 1
    mask = group_mask([Aspect.IS_USE, Aspect.RETRIEVE_INPUT])
    assert mask[0].sum() == 5 and mask[0, -5:].all() and mask[1].sum() == 2 and mask[1, :2].all()


@pytest.mark.parametrize("input_format", ["pair", "prompt"])
def test_distributions_have_the_aspect_labels_in_order_and_sum_to_one(encoder_dir, tmp_path, input_format):
    critic = EncoderCritic(_critic(encoder_dir, tmp_path, input_format), device="cpu")
    assert critic.input_format == input_format
    for ex, dist in zip(EXAMPLES, critic.predict(EXAMPLES), strict=True):
        assert list(dist) == list(ASPECT_LABELS[ex.aspect])
        assert sum(dist.values()) == pytest.approx(1.0)
        assert all(0.0 < p < 1.0 for p in dist.values())


def test_batching_and_order_do_not_change_a_distribution(critic_dir):
    batched = EncoderCritic(critic_dir, batch_size=64, device="cpu", precision="fp32").distributions(EXAMPLES)
    single = EncoderCritic(critic_dir, batch_size=1, device="cpu", precision="fp32").distributions(EXAMPLES[::-1])[::-1]
    for got, want in zip(batched, single, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_bf16_weights_keep_the_distributions_close_to_fp32(critic_dir):
    bf16 = make_predictor(critic_dir, device="cpu", precision="bf16")
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    fp32 = EncoderCritic(critic_dir, device="cpu", precision="fp32").distributions(EXAMPLES)
    for got, want in zip(bf16.distributions(EXAMPLES), fp32, strict=True):
        assert got.dtype == np.float64 and got.sum() == pytest.approx(1.0)
        np.testing.assert_allclose(got, want, atol=0.02)


def test_augmentation_loads_the_critic_in_augment_critic_precision(critic_dir):
    from raypipe.augment.pipeline import load_models
    from raypipe.jobs.augment import augment_sections

    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        cfg = RaypipeConfig.model_validate({"augment": {"critic": str(critic_dir), "critic_precision": precision}})
        assert next(load_models({"critic"}, augment_sections(cfg))["critic"].model.parameters()).dtype == dtype


def test_the_folder_keeps_its_layers_and_make_predictor_picks_its_kind(critic_dir):
    assert json.loads((critic_dir / "config.json").read_text())["num_hidden_layers"] == 2
    assert (critic_dir / HEADS_FILE).is_file()
    assert isinstance(make_predictor(critic_dir, device="cpu"), EncoderCritic)


def test_a_folder_with_another_head_layout_or_input_is_refused(critic_dir, tmp_path):
    manifest = json.loads((critic_dir / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "heads": {**manifest["heads"], "is_use": ["[Utility:5]"]}}))
    with pytest.raises(ModelError, match="head layout"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "input": "chat"}))
    with pytest.raises(ModelError, match="input format"):
        read_manifest(tmp_path)
    with pytest.raises(ModelError, match="no encoder critic"):
        read_manifest(tmp_path / "missing")


def _rows(examples, label=lambda ex: ASPECT_LABELS[ex.aspect][-1]):
    return [{"aspect": ex.aspect.value, "target": label(ex), "example": example_column(ex)} for ex in examples]


def test_the_loss_reads_each_row_on_its_own_aspect_head(encoder_dir):
    task = CriticEncoderTask(max_length=96, layers=2)
    torch.manual_seed(0)
    model, tokenizer = task.load(str(encoder_dir))
    assert not model.encoder.embeddings.word_embeddings.weight.requires_grad
    assert model.encoder.embeddings.position_embeddings.weight.requires_grad
    loss = task.loss(model, tokenizer, _rows(EXAMPLES))
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss)
    grad = model.heads.weight.grad.abs().sum(dim=1)
    # every row's target is its group's last label: exactly the outputs of the rows' groups get a
    # gradient, none outside them
    groups = group_mask([ex.aspect for ex in EXAMPLES]).any(axis=0)
    assert (grad[torch.from_numpy(groups)] > 0).all() and (grad[torch.from_numpy(~groups)] == 0).all()


def test_class_weights_scale_each_rows_loss(encoder_dir):
    rows = _rows(EXAMPLES[2:3] * 2)  # two IsRel rows, target [Irrelevant]
    plain = CriticEncoderTask(max_length=96, layers=2)
    torch.manual_seed(0)
    model, tokenizer = plain.load(str(encoder_dir))
    weights = [1.0] * NUM_OUTPUTS
    weights[target_index(Aspect.IS_REL, tokens.IRRELEVANT)] = 3.0
    weighted = CriticEncoderTask(max_length=96, layers=2, class_weights=tuple(weights))
    # one label in the batch: the weighted mean equals the plain one (the weight cancels) ...
    assert weighted.loss(model, tokenizer, rows).item() == pytest.approx(plain.loss(model, tokenizer, rows).item())
    # ... and with two labels the weighted one leans towards the up-weighted row
    mixed = rows[:1] + _rows(EXAMPLES[2:3], lambda ex: tokens.RELEVANT)
    each = [plain.loss(model, tokenizer, [r]).item() for r in mixed]
    assert weighted.loss(model, tokenizer, mixed).item() == pytest.approx((3 * each[0] + each[1]) / 4, rel=1e-5)


def test_inverse_frequency_weights_balance_labels_within_each_aspect():
    rows = ([("is_rel", tokens.IRRELEVANT)] * 6 + [("is_rel", tokens.RELEVANT)] * 2
            + [("is_use", "[Utility:5]")] * 4)
    table = pa.table({"aspect": [a for a, _ in rows], "target": [t for _, t in rows]})
    weights = inverse_frequency_weights(table)
    assert weights[target_index(Aspect.IS_REL, tokens.IRRELEVANT)] == pytest.approx(8 / (2 * 6))
    assert weights[target_index(Aspect.IS_REL, tokens.RELEVANT)] == pytest.approx(8 / (2 * 2))
    assert weights[target_index(Aspect.IS_USE, "[Utility:5]")] == pytest.approx(4 / (5 * 4))
    # each label's weighted count is the same within an aspect, and labels no row has keep 1
    counts = Counter(rows)
    assert {weights[target_index(Aspect(a), t)] * n for (a, t), n in counts.items() if a == "is_rel"} == {4.0}
    assert weights[target_index(Aspect.IS_USE, "[Utility:1]")] == 1.0


def test_tempered_weights_weigh_only_the_named_aspect_and_keep_its_share():
    rows = ([("is_rel", tokens.IRRELEVANT)] * 6 + [("is_rel", tokens.RELEVANT)] * 2
            + [("is_use", "[Utility:5]")] * 9 + [("is_use", "[Utility:2]")] * 1)
    table = pa.table({"aspect": [a for a, _ in rows], "target": [t for _, t in rows]})
    weights = inverse_frequency_weights(table, {"is_use": 0.5})
    five, two = weights[target_index(Aspect.IS_USE, "[Utility:5]")], weights[target_index(Aspect.IS_USE, "[Utility:2]")]
    # the square root of the balanced ratio (9 : 1), scaled so that IsUse's 10 rows still weigh 10
    assert two / five == pytest.approx(3.0)
    assert 9 * five + two == pytest.approx(10.0)
    assert weights[target_index(Aspect.IS_REL, tokens.IRRELEVANT)] == weights[target_index(Aspect.IS_REL, tokens.RELEVANT)] == 1.0
    # exponent 1 on an aspect is inverse_frequency's weights on it
    full = inverse_frequency_weights(table, {"is_rel": 1.0})
    assert full[target_index(Aspect.IS_REL, tokens.RELEVANT)] == inverse_frequency_weights(table)[target_index(Aspect.IS_REL, tokens.RELEVANT)]
    assert full[target_index(Aspect.IS_USE, "[Utility:2]")] == 1.0


@pytest.mark.parametrize("weights", [{"is_usefulness": 0.5}, {"is_use": -1.0}])
def test_class_weight_exponents_refuse_unknown_aspects_and_negatives(weights):
    with pytest.raises(ValueError, match="is_usefulness|>= 0"):
        RaypipeConfig.model_validate({"training": {"critic": {"encoder_class_weights": weights}}})


def test_settings_choose_the_task():
    cfg = RaypipeConfig.model_validate({"training": {"critic": {
        "kind": "encoder", "encoder_input": "prompt", "encoder_layers": 3, "trainable_layers": 2,
        "encoder_class_weights": "inverse_frequency", "max_length": 64}}})
    table = pa.table({"aspect": ["is_rel", "is_rel", "is_rel"], "target": [tokens.RELEVANT] + [tokens.IRRELEVANT] * 2})
    task = critic_task(cfg.training.critic, table)
    assert (task.input_format, task.layers, task.trainable_layers, task.max_length) == ("prompt", 3, 2, 64)
    assert task.class_weights == inverse_frequency_weights(table)
    assert critic_task(cfg.training.critic.model_copy(update={"encoder_class_weights": "none"}), table).class_weights is None
    tempered = cfg.training.critic.model_copy(update={"encoder_class_weights": {"is_rel": 0.5}})
    assert critic_task(tempered, table).class_weights == inverse_frequency_weights(table, {"is_rel": 0.5})


def test_trainable_layers_freeze_everything_below_the_top_ones(encoder_dir):
    model, _ = CriticEncoderTask(max_length=96, trainable_layers=1).load(str(encoder_dir))
    layers = model.encoder.encoder.layer
    assert len(layers) == 3
    assert not any(p.requires_grad for p in model.encoder.embeddings.parameters())
    assert not any(p.requires_grad for layer in layers[:2] for p in layer.parameters())
    assert all(p.requires_grad for p in layers[2].parameters()) and model.heads.weight.requires_grad
    # as many trainable layers as the encoder has (or more) train every layer but the word embeddings
    model, _ = CriticEncoderTask(max_length=96, trainable_layers=3).load(str(encoder_dir))
    assert all(p.requires_grad for p in model.encoder.encoder.parameters())
    assert model.encoder.embeddings.position_embeddings.weight.requires_grad


def _train_cfg(tmp_path, rows, **critic) -> RaypipeConfig:
    write_parquet(pa.Table.from_pylist(rows, schema=CRITIC_SCHEMA), tmp_path / "d" / "train" / "part-00000.parquet")
    return RaypipeConfig.model_validate({"training": {"critic": {
        "kind": "encoder", "data": str(tmp_path / "d" / "train"), "out_dir": str(tmp_path / "out"), **critic}}})


def _critic_rows(label=lambda ex: ASPECT_LABELS[ex.aspect][0]):
    return [{"id": f"r{i}", "instance_id": f"i{i}", "aspect": ex.aspect.value, "prompt": critic_prompt(ex),
             "target": label(ex), "example": example_column(ex)} for i, ex in enumerate(EXAMPLES)]


def test_bad_training_input_fails_before_ray_naming_the_fix(tmp_path):
    cfg = _train_cfg(tmp_path, _critic_rows(lambda ex: "[Utility:9]" if ex.aspect is Aspect.IS_USE
                                            else ASPECT_LABELS[ex.aspect][0]))
    with pytest.raises(DataError, match=r"'\[Utility:9\]' is not a label of aspect 'is_use'.*id='r4'"):
        run_train(cfg, "critic")
    cfg = _train_cfg(tmp_path, _critic_rows(), stages=[{"name": "a"}, {"name": "b"}])
    with pytest.raises(ConfigError, match="one stage"):
        run_train(cfg, "critic")
    cfg = _train_cfg(tmp_path, _critic_rows(), max_length=1024)
    with pytest.raises(ConfigError, match="max_length=1024 is over the 512 positions"):
        run_train(cfg, "critic")
