"""`raypipe models import` without the 30-second import: sources, errors that name the file, caching.

The tests on the imported SmolLM2 itself are in test_real_model.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from raypipe.errors import ModelError
from raypipe.models import load_model, load_tokenizer
from raypipe.models.importer import (
    MANIFEST,
    Source,
    _gguf_parsed_once,
    import_model,
    resolve_source,
    smollm2_source,
    validate_source,
)
from raypipe.settings.models import LMImportConfig


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    return smollm2_source().path


def _import(source: Path | str, out: Path) -> dict:
    return import_model(LMImportConfig(source=str(source), out_dir=str(out)))


def test_smollm2_source_is_the_wheels_file_and_matches_its_record(gguf_path):
    source = smollm2_source()
    assert source.kind == "gguf" and gguf_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert hashlib.sha256(gguf_path.read_bytes()).hexdigest() == source.record_sha256
    assert validate_source(source) == source.record_sha256


def test_missing_gguf_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelError, match=re.escape(str(missing)) + ".*does not exist"):
        _import(missing, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_not_gguf_names_the_file_and_its_magic(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("hello, not a model")
    with pytest.raises(ModelError, match=re.escape(str(bad)) + r": not a GGUF file \(it starts with b'hell'"):
        _import(bad, tmp_path / "out")


@pytest.mark.slow
def test_truncated_gguf_names_the_file_and_says_truncated(tmp_path, gguf_path):
    cut = tmp_path / "cut.gguf"
    with gguf_path.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(gguf_path.stat().st_size // 2))
    with pytest.raises(ModelError, match=re.escape(str(cut)) + ": (corrupt or )?truncated GGUF file"):
        _import(cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_damaged_bytes_are_caught_by_the_wheels_record(tmp_path, gguf_path):
    source = Source("gguf", gguf_path, record_sha256="0" * 64)
    with pytest.raises(ModelError, match=re.escape(str(gguf_path)) + ": corrupt file: sha256 .* differs"):
        validate_source(source)


def _folder_without_tokenizer(tiny_model_dir: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, folder / name)
    return folder


def test_model_folder_without_tokenizer_is_an_error_naming_it(tmp_path, tiny_model_dir):
    folder = _folder_without_tokenizer(tiny_model_dir, tmp_path / "no_tok")
    with pytest.raises(ModelError, match=re.escape(str(folder)) + ": no tokenizer in the model folder"):
        _import(folder, tmp_path / "out")
    with pytest.raises(ModelError, match=re.escape(str(folder)) + ": no tokenizer"):
        load_model(folder, device="cpu")
    with pytest.raises(ModelError, match="no tokenizer"):
        load_tokenizer(folder)


def test_a_local_hf_folder_imports_and_a_rerun_is_skipped(tmp_path, tiny_model_dir):
    out = tmp_path / "imported"
    manifest, skipped = _import(tiny_model_dir, out)
    assert not skipped
    assert manifest["added_tokens"] == {}  # the tiny tokenizer has them already
    assert manifest["source_file"] == str(tiny_model_dir.resolve())
    weights = out / "model.safetensors"
    assert manifest["weights"]["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert json.loads((out / MANIFEST).read_text())["source_sha256"] == manifest["source_sha256"]
    mtime = weights.stat().st_mtime_ns

    again, skipped = _import(tiny_model_dir, out)
    assert skipped and again == manifest
    assert weights.stat().st_mtime_ns == mtime  # not rewritten

    _, skipped = import_model(LMImportConfig(source=str(tiny_model_dir), out_dir=str(out), dtype="bfloat16"))
    assert not skipped  # another dtype is another folder's content


def test_resolve_source_kinds(tmp_path, tiny_model_dir, gguf_path):
    assert resolve_source(str(tiny_model_dir)).kind == "hf"
    assert resolve_source(str(gguf_path)) == Source("gguf", gguf_path.resolve())


def test_the_loader_parses_a_gguf_file_once_per_import_and_gets_gguf_back_after(tmp_path, monkeypatch):
    """transformers' GGUF loader builds a reader (a full metadata parse) for the config, the tokenizer
    and the weights, and gguf's tensor-name table once per submodule; during an import each is built
    once, and afterwards gguf's own names are back."""
    import gguf
    import numpy as np

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.chdir(tmp_path)
    reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    with _gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader("small.gguf") is first  # the same file by another spelling
        assert first.tensors[0].name == "token_embd.weight"
        table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is table
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not table
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_cls, name_map)
    assert gguf.GGUFReader(path) is not first
