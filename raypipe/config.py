"""The whole run's configuration: every section composed into `RaypipeConfig`, and `load_config`.

One YAML file describes a whole run (``configs/demo.yaml`` for the laptop, ``configs/paper_7b.yaml``
for the paper's settings); each job reads the sections it needs. Defaults live in the section models
(`raypipe.settings` for the jobs' sections, `raypipe.methods.<name>.settings` for each decoding
method's), so a YAML file only says what differs; artifact paths derive from `run_dir`
(`raypipe.settings.paths`). Unknown keys are errors: a typo must never silently fall back to a default.
It imports every method's settings, so it sits above the methods; only the jobs floor (raypipe.jobs),
the CLI and the demo take the whole config, and hand each component its own sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator

from raypipe.methods import REGISTRY, MethodName
from raypipe.settings.augment import AugmentConfig
from raypipe.settings.base import Section
from raypipe.settings.cluster import RayConfig
from raypipe.settings.crag_tools import CRAGConfig
from raypipe.settings.data import LimitsConfig, SegmentationConfig, WorldConfig
from raypipe.settings.loader import load_settings
from raypipe.settings.models import EngineConfig, LMImportConfig, TinyModelConfig
from raypipe.settings.paths import DEFAULT_RUN_DIR, default_path, derive_paths, eval_set_paths
from raypipe.settings.retrieval import DocumentNoise, RetrievalConfig
from raypipe.settings.teachers import LabelConfig, TrajectoryConfig
from raypipe.settings.training import TrainingConfig

#: one section per registered method (raypipe.methods.REGISTRY): its default settings in eval and serving
MethodsConfig = create_model("MethodsConfig", __base__=Section, __doc__=(
    "One section per decoding method (raypipe.methods.REGISTRY): its default settings in eval and serving."),
    **{name: (m.settings, m.settings()) for name, m in REGISTRY.items()})

#: each method's eval sweeps, for the methods that sweep (the method declares what: `Method.variants`)
SweepsConfig = create_model("SweepsConfig", __base__=Section, __doc__=(
    "Each method's eval sweeps (the method declares what it sweeps: `Method.variants`)."),
    **{name: (m.sweeps, m.sweeps()) for name, m in REGISTRY.items() if m.sweeps is not None})


class RobustnessConfig(Section):
    """CRAG §5.6 (Fig. 3): every evaluated method that retrieves, rerun with each share of the accurate
    retrieval results (an eval item's `passage_ids`) removed at random; `robustness.png` and
    `metrics.json` `robustness` (raypipe.eval.robustness). Each rate above 0 is one more decoding of
    every such method, so it is off unless enabled."""

    #: decode every retrieving method again at each removal rate
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

    #: the generator folder of every method's `engine` tool (the Self-RAG generator), unless `generators`
    #: names another
    generator: str = default_path("eval.generator")
    #: a method's own generator folder (the model its `engine` tool loads) where it is not `generator`,
    #: e.g. `self_reasoning: runs/ls_lm/models/self_reasoning` beside Self-RAG's generator, so that one
    #: eval runs every method on its own model (configs/results_table.yaml)
    generators: dict[MethodName, str] = {}
    #: jsonl files of QA rows (question, answers), fact rows (claim, label), multiple-choice rows
    #: (question, choices, answerKey) or instruction rows (instruction, input, answers), or the papers'
    #: released files (raypipe/eval/released.py); heldout_noret holds instructions that need no
    #: retrieval, so retrieval frequency per set shows adaptivity; the world also writes
    #: heldout_longform.jsonl (biographies, instruction + facts, scored by FactScore)
    eval_sets: list[str] = eval_set_paths(default_path("world.out_dir"))
    #: predictions/, metrics.json, results.md, plots
    out_dir: str = default_path("eval.out_dir")
    #: the methods evaluated, each with its `methods.<name>` settings and its `sweeps.<name>` variants
    methods: list[MethodName] = ["selfrag"]
    sweeps: SweepsConfig = SweepsConfig()
    robustness: RobustnessConfig = RobustnessConfig()
    #: every method's retrieval perturbed as in Self-Reasoning's Figure 3 (off by default)
    retrieval_noise: RetrievalNoiseConfig = RetrievalNoiseConfig()
    #: the first `limit` rows of each eval file, in file order, rejected rows included (so a limited run
    #: always evaluates the same questions); None = all
    limit: int | None = Field(None, ge=1)
    #: the first `sweep_limit` of those rows per set are all that the variants outside the headline table
    #: decode (the methods' sweeps, ablations and robustness points): a curve's shape needs fewer items than
    #: a stated comparison; None = the same rows as the headline
    sweep_limit: int | None = Field(None, ge=1)
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
    #: GiB of memory Ray reserves for one actor, so that a node gets no more actors than its memory holds
    #: (the demo's: two vLLM engines with their KV caches, the retriever, CRAG's evaluator; ~4.8 GiB)
    actor_memory_gib: float = Field(6.0, gt=0)


class ServeConfig(Section):
    """`raypipe serve` / `serve run configs/serve.yaml`: the Ray Serve app (raypipe/serving).

    Requests flow ingress -> Decoder (autoscaled; runs the request's method) -> Generator + Retrieval.
    CPU shares are fractional so that one replica of everything, plus a second Decoder, fits on 2
    cores."""

    #: the address Serve's HTTP proxy binds
    host: str = "127.0.0.1"
    #: its port
    port: int = Field(8000, ge=1, le=65535)
    #: Serve application name
    app_name: str = "raypipe"
    #: the app's HTTP route prefix
    route_prefix: str = "/"
    #: the generator checkpoint (an HF folder) the Generator deployment loads
    generator: str = default_path("serve.generator")
    #: the model id reported by /v1/models and echoed in responses
    model_name: str = "selfrag"
    #: the methods this server answers with (a request names one in `method`); deployments are bound
    #: only for the tools these methods use
    methods: list[MethodName] = ["selfrag"]
    #: the method a request that names none gets (one of `methods`)
    default_method: MethodName = "selfrag"
    # --- Decoder autoscaling (Serve autoscaling_config) ---
    #: Decoder replicas the autoscaler keeps at least ...
    min_replicas: int = Field(1, ge=0)
    #: ... and at most
    max_replicas: int = Field(2, ge=1)
    #: requests per Decoder replica the autoscaler aims at
    target_ongoing_requests: float = Field(2.0, gt=0)
    #: seconds a higher load must last before a replica is added
    upscale_delay_s: float = Field(2.0, ge=0)
    #: seconds a lower load must last before a replica is removed
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
    #: replicas of the HTTP ingress
    ingress_replicas: int = Field(1, ge=1)
    #: replicas of the Generator (each holds the generator LM)
    generator_replicas: int = Field(1, ge=1)
    #: replicas of Retrieval (each holds the index)
    retrieval_replicas: int = Field(1, ge=1)
    #: replicas of one deployment a node may hold (Serve's max_replicas_per_node; None: no limit).
    #: 1 puts each deployment's replicas on different nodes, so that a node's death takes at most one
    #: replica of each and the others keep serving while Serve replaces it (it caps the autoscaled
    #: Decoder too: max_replicas Decoders then need as many nodes)
    max_replicas_per_node: int | None = Field(None, ge=1)
    #: CPU share of one ingress replica
    ingress_cpus: float = Field(0.1, gt=0)
    #: CPU share of one Decoder replica
    decoder_cpus: float = Field(0.2, gt=0)
    #: CPU share of one Generator replica
    generator_cpus: float = Field(0.5, gt=0)
    #: CPU share of one Retrieval replica
    retrieval_cpus: float = Field(0.3, gt=0)
    #: CPU share of one retrieval-evaluator replica. CRAG's deployments are bound only when a served
    #: method uses them (the instruct LM gets a second Generator deployment, with generator_cpus)
    evaluator_cpus: float = Field(0.2, gt=0)
    #: CPU share of one web search replica (CRAG's second source; bound as the evaluator) and of the
    #: `openai` query rewriter's (`crag.rewriter`), both HTTP clients
    web_cpus: float = Field(0.1, gt=0)
    #: GPU share of a Generator replica when the cluster has GPUs (then vLLM schedules its own batches)
    generator_gpus: float = Field(1.0, gt=0)
    #: torch threads per Generator / Retrieval replica (one core's worth on a 2-core machine)
    torch_threads: int = Field(1, ge=1)
    #: @serve.batch: concurrent engine (and retriever) calls merged into one call at most
    max_batch_size: int = Field(16, ge=1)
    #: seconds the first call of a batch waits for others
    batch_wait_timeout_s: float = Field(0.01, ge=0)
    # --- request limits (422 beyond them) ---
    #: characters of a request's prompt (its messages together) at most
    max_prompt_chars: int = Field(4000, ge=1)
    #: the largest `top_k` a request may ask for
    max_top_k: int = Field(20, ge=1)
    #: the largest `beam_width`
    max_beam_width: int = Field(8, ge=1)
    #: the largest `max_depth`
    max_depth_limit: int = Field(8, ge=1)
    #: the largest `max_tokens` (and `max_completion_tokens`)
    max_tokens_limit: int = Field(512, ge=1)
    #: request body size in bytes at most (413 beyond it), checked on Content-Length and on the bytes
    #: received before the body is parsed; 1 MiB holds any prompt within max_prompt_chars
    max_body_bytes: int = Field(1_048_576, ge=1)
    #: environment variable holding the bearer token; unset or empty means no authentication
    auth_token_env: str = "RAYPIPE_SERVE_TOKEN"


#: keys that moved, old -> new: an old key in a file is an error naming the new one
MOVED_KEYS = {
    "decode.top_k": "retrieval.top_k",
    "augment.top_k": "retrieval.top_k",
    "decode.engine": "engine.kind",
    "decode.engine_batch_size": "engine.batch_size",
    "decode.gpu_memory_utilization": "engine.gpu_memory_utilization",
    **{f"decode.{k}": f"methods.selfrag.{k}" for k in REGISTRY["selfrag"].settings.model_fields if k != "top_k"},
    "eval.modes": "eval.sweeps.selfrag.modes",
    "eval.threshold_sweep": "eval.sweeps.selfrag.threshold",
    "eval.is_sup_weight_sweep": "eval.sweeps.selfrag.is_sup_weight",
    "eval.weight_sweep_mode": "eval.sweeps.selfrag.weight_sweep_mode",
    "serve.tree_search_cpus": "serve.decoder_cpus",
    "serve.retriever_cpus": "serve.retrieval_cpus",
    "serve.retriever_replicas": "serve.retrieval_replicas",
    "crag.lm": "instruct_lm",
    **{f"methods.{m}.rewriter_{k}": f"crag.rewriter.{k}" for m in ("crag", "selfcrag")
       for k in ("url", "model", "api_key_env", "timeout_s")},
}


class RaypipeConfig(Section):
    #: the run's folder: every artifact path that is not set derives from it (settings.paths.DERIVED_PATHS)
    run_dir: str = DEFAULT_RUN_DIR
    #: seconds between the progress lines of a long stage (a model training) where stderr is not a
    #: terminal (a pipe, a job's log, CI); a terminal gets a bar instead
    progress_every_s: float = Field(30.0, gt=0)
    #: the instruct LM folder (`raypipe models import` writes SmolLM2-135M-Instruct there): the plain
    #: generator of `direct`, `rag` and `crag` with `generator: lm`, and CRAG's `lm` query rewriter
    instruct_lm: str = default_path("instruct_lm")
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
        derive_paths(self)
        if self.serve.default_method not in self.serve.methods:
            raise ValueError(f"serve.default_method={self.serve.default_method!r} is not among serve.methods "
                             f"{self.serve.methods}")
        return self

    @model_validator(mode="after")
    def _derive_method_k(self) -> RaypipeConfig:
        """A method's K is `retrieval.top_k` unless its own section sets one."""
        for name in MethodsConfig.model_fields:
            section = getattr(self.methods, name)
            if "top_k" not in section.model_fields_set and section.top_k != self.retrieval.top_k:
                # a copy, since the section may be the caller's object; object.__setattr__ keeps the key out
                # of model_fields_set, as a derived path: still "not set"
                section = section.model_copy()
                object.__setattr__(section, "top_k", self.retrieval.top_k)
                object.__setattr__(self.methods, name, section)
        return self

    @model_validator(mode="after")
    def _openai_rewriter_has_an_endpoint(self) -> RaypipeConfig:
        for name in MethodsConfig.model_fields:
            if getattr(getattr(self.methods, name), "rewriter", None) == "openai" and not self.crag.rewriter.url:
                raise ValueError(f"methods.{name}.rewriter=openai needs crag.rewriter.url (an OpenAI-compatible "
                                 "server root, .../v1)")
        return self


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RaypipeConfig:
    """Read a YAML config (or the defaults when `path` is None) and apply `--set` overrides
    (raypipe.settings.loader); errors name the key path and the file."""
    return load_settings(RaypipeConfig, path, overrides, MOVED_KEYS)
