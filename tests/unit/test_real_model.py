"""The real pretrained LM (SmolLM2-135M-Instruct, imported once per session by `raypipe models import`)
through the shared paths: import determinism, reflection tokens in its tokenizer, the embedding rows of
the added tokens, EOS, and the HF engine's exact group read-out on a 30-layer model."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from raypipe import tokens
from raypipe.inference.engines.base import GenerationParams
from raypipe.inference.engines.hf import HFEngine
from raypipe.models import load_model, reflection_token_ids
from raypipe.models.importer import MANIFEST, import_model, smollm2_source
from raypipe.prompts import format_generator_prompt
from raypipe.settings.models import LMImportConfig
from raypipe.tokens import GROUP_TOKENS, Group

pytestmark = pytest.mark.slow

AUGMENTED = (
    tokens.RETRIEVAL + tokens.format_paragraph("Zoë Harlow", "Zoë Harlow (1901–1980) was a painter from 東京.")
    + tokens.RELEVANT + "Zoë was born in 1901." + tokens.FULLY_SUPPORTED
    + tokens.CONTINUE + " She painted  rivers 🌊." + tokens.PARTIALLY_SUPPORTED
    + tokens.NO_RETRIEVAL + "\nDone [1]." + tokens.NO_SUPPORT + tokens.UTILITY[3]
)


@pytest.fixture(scope="module")
def real(smollm2_dir):
    return load_model(smollm2_dir, device="cpu")


@pytest.fixture(scope="module")
def gguf_tokenizer():
    """The tokenizer as transformers reads it from the GGUF file, before the import touched it."""
    from transformers import AutoTokenizer

    path = smollm2_source().path
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_import_is_deterministic_and_the_manifest_is_true(smollm2_dir, tmp_path, capfd):
    first = json.loads((smollm2_dir / MANIFEST).read_text())
    weights = smollm2_dir / "model.safetensors"
    assert first["weights"] == {"model.safetensors": _sha256(weights)}
    assert first["source_sha256"] == _sha256(smollm2_source().path)

    capfd.readouterr()
    second, skipped = import_model(LMImportConfig(out_dir=str(tmp_path / "again")))  # a full second import
    assert not skipped
    printed = capfd.readouterr()
    assert "GGUF tensors" not in printed.err + printed.out  # the loader's bar is silenced (one log line)
    assert _sha256(tmp_path / "again" / "model.safetensors") == _sha256(weights)
    assert second["weights"] == first["weights"]


def test_rerun_on_the_same_folder_is_skipped(smollm2_dir):
    weights = smollm2_dir / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    manifest, skipped = import_model(LMImportConfig(out_dir=str(smollm2_dir)))
    assert skipped and manifest["source_sha256"] == smollm2_source().record_sha256
    assert weights.stat().st_mtime_ns == mtime


def test_shape_eos_and_chat_template_are_the_pretrained_ones(real, gguf_tokenizer):
    model, tokenizer = real
    assert model.config.num_hidden_layers == 30
    assert not hasattr(model.config, "quantization_config") or model.config.quantization_config is None
    assert len(tokenizer) == len(gguf_tokenizer) + len(tokens.SPECIAL_TOKENS) == 49152 + 15
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert tokenizer.chat_template == gguf_tokenizer.chat_template
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n")
    text = "The capital of France is Paris."
    assert tokenizer.encode(text, add_special_tokens=True) == gguf_tokenizer.encode(text, add_special_tokens=True)


def test_every_reflection_token_is_one_id_and_decodes_exactly(real):
    _, tokenizer = real
    ids = reflection_token_ids(tokenizer)
    assert len(set(ids.values())) == len(tokens.SPECIAL_TOKENS)
    assert min(ids.values()) >= 49152  # new ids, not pieces of the pretrained vocabulary
    for token, i in ids.items():
        assert tokenizer.encode(token, add_special_tokens=False) == [i]
        assert tokenizer.decode([i]) == token
    encoded = tokenizer.encode(AUGMENTED, add_special_tokens=False)
    assert tokenizer.decode(encoded) == AUGMENTED
    assert sum(i in ids.values() for i in encoded) == 10  # each of the 10 markup tokens is one id


def test_added_rows_start_at_their_pieces_mean_at_pretrained_scale(real, gguf_tokenizer):
    model, tokenizer = real
    emb = model.get_input_embeddings().weight.detach()
    assert model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()  # tied, as pretrained
    ids = reflection_token_ids(tokenizer)
    old_norm = emb[:49152].norm(dim=1)
    for token, i in ids.items():
        pieces = gguf_tokenizer.encode(token, add_special_tokens=False)
        assert torch.allclose(emb[i], emb[pieces].mean(dim=0), atol=1e-6)
        assert emb[i].norm() <= emb[pieces].norm(dim=1).max()
    new = emb[sorted(ids.values())]
    assert torch.cdist(new, new).add(torch.eye(len(new))).min() > 1e-3  # 15 distinct rows
    assert new.norm(dim=1).max() < old_norm.quantile(0.99)
    # before fine-tuning the new tokens do not take over the pretrained next-token distribution
    prompt = tokenizer(format_generator_prompt("What is the capital of France?"), return_tensors="pt")
    with torch.no_grad():
        probs = model(**prompt).logits[0, -1].softmax(-1)
    assert probs[49152:].sum() < 0.01


@pytest.fixture(scope="module")
def engine(smollm2_dir) -> HFEngine:
    return HFEngine(smollm2_dir, batch_size=2, device="cpu")


def _plain_group_probs(engine: HFEngine, ids: list[int], group: Group) -> list[float]:
    """softmax over the group's logits from a plain forward of the whole sequence."""
    with torch.no_grad():
        logits = engine.model(torch.tensor([ids])).logits[0, -1].double()
    return torch.softmax(logits[engine.groups.ids[group]], dim=-1).tolist()


PROMPTS = [
    format_generator_prompt("Who wrote the novel The Northern Dream?"),
    format_generator_prompt("Tell me about Velmora.") + tokens.RETRIEVAL
    + tokens.format_paragraph("Velmora", "Velmora is a city on the river Ost."),
    "short",
]


def test_engine_group_read_out_equals_a_plain_softmax_on_the_real_model(engine):
    assert engine.eos == {engine.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    got = engine.next_group_probs(PROMPTS, Group.RETRIEVE)  # batched: left padding, explicit positions
    for prompt, probs in zip(PROMPTS, got, strict=True):
        ids = engine.tokenizer(prompt)["input_ids"]
        assert list(probs) == list(GROUP_TOKENS[Group.RETRIEVE])
        assert list(probs.values()) == pytest.approx(_plain_group_probs(engine, ids, Group.RETRIEVE), abs=1e-5)

    params = GenerationParams(max_new_tokens=3, first_position_groups=(Group.IS_REL, Group.IS_USE))
    for prompt, gen in zip(PROMPTS, engine.generate(PROMPTS, params), strict=True):
        ids = engine.tokenizer(prompt)["input_ids"]
        for group in (Group.IS_REL, Group.IS_USE):
            expected = _plain_group_probs(engine, ids, group)
            assert list(gen.group_probs(group, position=0).values()) == pytest.approx(expected, abs=1e-5)
        with torch.no_grad():
            logits = engine.model(torch.tensor([ids + gen.token_ids[:1]])).logits[0, -1].double()
        assert gen.token_logprobs[1] == pytest.approx(torch.log_softmax(logits, -1)[gen.token_ids[1]].item(), abs=1e-4)


def test_training_labels_on_the_real_tokenizer_are_the_target_without_passages_plus_eos(real):
    """Loss masks are computed from character offsets; on SmolLM2's byte-level tokenizer the tokens
    left in the loss must decode to exactly the target minus the passage texts, then <|im_end|>."""
    from raypipe.training.encode import IGNORE_INDEX, encode_example

    _, tokenizer = real
    prompt = format_generator_prompt("Who was Zoë Harlow?")
    example = encode_example(prompt, AUGMENTED, tokenizer, ["prompt", "paragraph"], max_length=512)
    kept = [label for label in example.labels if label != IGNORE_INDEX]
    passage = "Zoë Harlow\nZoë Harlow (1901–1980) was a painter from 東京."
    assert tokenizer.decode(kept) == AUGMENTED.replace(passage, "") + "<|im_end|>"
    assert example.input_ids[-1] == tokenizer.eos_token_id and not example.truncated
    assert tokenizer.decode(example.input_ids) == prompt + AUGMENTED + "<|im_end|>"  # no BOS is added
