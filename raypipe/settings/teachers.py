"""Settings of the teachers and the data sets they write: D_critic (`raypipe label`) and the
self-reasoning trajectories with their quality control."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from raypipe.prompts import Aspect
from raypipe.settings.base import Section, check_keyed_amounts
from raypipe.settings.paths import default_path

#: the kinds of negative evidence passage D_critic draws from (`raypipe.critic.teacher_requests`)
NEGATIVE_KINDS = ("same_title", "similar_title", "retrieved", "random")


class TeacherConfig(Section):
    """Who labels D_critic: the world's ground truth (`oracle`, GPT-4's stand-in offline) or any
    OpenAI-compatible chat-completions server (`openai`: a hosted model, vLLM, Ray Serve LLM)."""

    #: `oracle` = the world's ground truth; `openai` = an OpenAI-compatible server
    kind: Literal["oracle", "openai"] = "oracle"
    #: oracle: probability that a label is replaced by a random wrong one (mimics teacher noise)
    error_rate: float = Field(0.05, ge=0.0, le=1.0)
    #: oracle: seeds its noise
    seed: int = 0
    #: openai: server root including the API version, e.g. https://api.openai.com/v1
    base_url: str | None = None
    #: openai: the model name each request names
    model: str = "gpt-4"
    #: environment variable holding the API key; unset means no Authorization header (local servers)
    api_key_env: str = "OPENAI_API_KEY"
    #: requests in flight at once
    concurrency: int = Field(8, ge=1)
    #: openai: seconds one request may take
    timeout_s: float = Field(60.0, gt=0)
    #: extra attempts after a 408, 409, 429, a 5xx, a timeout or a dropped connection (the openai
    #: library's retry policy: exponential backoff, a server's Retry-After wins)
    retries: int = Field(4, ge=0)
    #: openai: sampling temperature
    temperature: float = 1.0
    #: openai: tokens of a reply at most
    max_tokens: int = Field(200, ge=1)
    #: JSON fields added to every request body: a server's own parameters, e.g. `{method: direct}` for
    #: a raypipe server or vLLM's `repetition_penalty` (the fields above win over these)
    extra_body: dict[str, Any] = {}


class LabelConfig(Section):
    """`raypipe label`: the critic data set D_critic (Self-RAG §3.2.1)."""

    #: the instances labelled (a file or folder; bad rows go to rejects/)
    instances: str = default_path("label.instances")
    #: the passages the evidence is drawn from
    passages: str = default_path("label.passages")
    #: D_critic: train/, dev/, stats.json
    out_dir: str = default_path("label.out_dir")
    teacher: TeacherConfig = TeacherConfig()
    #: examples per aspect (the paper: 4k-20k)
    per_aspect: int = Field(500, ge=1)
    #: per-aspect overrides of per_aspect, keyed by aspect name (retrieve_input, retrieve, is_rel,
    #: is_sup, is_use); 0 leaves an aspect out
    aspect_sizes: dict[str, int] = {}
    #: share of evidence passages (retrieve, is_rel, is_sup) drawn from the instance's ground-truth
    #: passages; the rest are same-entity, similar-title or random passages, so labels are mixed
    gt_evidence_fraction: float = Field(0.5, ge=0.0, le=1.0)
    #: relative odds of the negative evidence kinds (same_title, similar_title, retrieved, random)
    #: where an instance has several; a kind not named weighs 1, so {} draws them uniformly. Weighting
    #: same_title up teaches the critic that a passage about the right entity can still be off the
    #: question (ours)
    evidence_weights: dict[str, float] = {}
    #: when > 0, each instance's top k passages from the configured index (instruction, input and
    #: output as the query, as augmentation's first retrieval) join those pools as a fourth kind,
    #: `retrieved`: the near neighbours the critic will judge in augmentation, where random passages
    #: are easy negatives (ours; needs the passage index). 0 = off
    retrieved_evidence_k: int = Field(0, ge=0)
    #: IsUse rows beyond the sample, train split only: a question's instruction with the output of
    #: another question about the same subject that answers something else (true, on topic, no
    #: answer). Needs instances whose meta names their subject and answer, as the world's do (ours).
    #: 0 = off
    is_use_swapped_outputs: int = Field(0, ge=0)
    #: share of the instances (a seeded draw on their id) whose examples go to dev/, which the agreement
    #: report reads
    dev_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: rows per output parquet part
    shard_size: int = Field(50_000, ge=1)
    #: seeds the sampling and the evidence drawn
    seed: int = 0

    @field_validator("aspect_sizes", "evidence_weights")
    @classmethod
    def _known_keys(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        known = [a.value for a in Aspect] if info.field_name == "aspect_sizes" else list(NEGATIVE_KINDS)
        check_keyed_amounts(value, known)
        if info.field_name == "evidence_weights" and value and not any(
                value.get(k, 1.0) > 0 for k in NEGATIVE_KINDS):
            raise ValueError("at least one kind must weigh more than 0")
        return value


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
    #: `critic`: the critic folder
    critic: str = default_path("trajectories.qc.critic")
    #: `nli`: the NLI model folder
    nli_model: str | None = None
    #: `critic`: IsSup tokens that count as support
    critic_supported: list[str] = ["[Fully supported]"]
    #: `nli`: entailment probability needed
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
    #: long-form: ALCE citation recall a kept trajectory reaches at least (the paper: 0.8)
    min_citation_recall: float = Field(0.8, ge=0.0, le=1.0)
    #: long-form: ALCE citation precision a kept trajectory reaches at least (the paper: 0.8)
    min_citation_precision: float = Field(0.8, ge=0.0, le=1.0)
    #: long-form answer correctness (program P of Algorithm 1): share of the gold facts the analysis
    #: states (ASQA's EM recall); ours, the paper does not give P's threshold
    min_em_recall: float = Field(0.8, ge=0.0, le=1.0)


class TrajectoryConfig(Section):
    """`raypipe self-reasoning data`: self-reasoning trajectories for training questions, generated by
    a teacher and filtered by quality control (Self-Reasoning §"Data Generation and Quality Control")."""

    #: the instances the training questions are drawn from
    instances: str = default_path("trajectories.instances")
    #: train/ (the kept trajectories), trajectories.jsonl (every item), eval/ (the long-form set),
    #: stats.json (the quality-control funnel)
    out_dir: str = default_path("trajectories.out_dir")
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
    #: at most this many kept trajectories of a task (`qa`, `fact`, `longform`); the rest of that task's
    #: passing trajectories are counted (`over_task_cap`), not kept. Ours (the paper does not give its
    #: mix), for worlds where one task dominates; no cap by default: on the demo's world, biographies
    #: capped at 120 of 744 rows cost fact and long-form points and left QA where it was
    #: (docs/results/self-reasoning.md)
    max_kept_per_task: dict[Literal["qa", "fact", "longform"], int] = Field(
        default_factory=dict, description="kept trajectories per task at most, e.g. {longform: 120}")
    #: show the top-K in a seeded random order ("to avoid order bias", §"Data Generation")
    shuffle: bool = True
    #: biography questions about held-out people written to `<out_dir>/eval/heldout_longform.jsonl`, the
    #: long-form eval set (EM recall, citation recall and precision); 0 = none
    longform_eval: int = Field(100, ge=0)
    qc: QualityConfig = QualityConfig()
    #: Ray Data retrieval actors
    actors: int = Field(1, ge=1)
    #: CPU share of one retrieval actor
    actor_cpus: float = Field(0.5, gt=0)
    #: questions per Ray Data batch
    batch_size: int = Field(64, ge=1)
    #: seeds the questions drawn, the negatives and the shuffles
    seed: int = 0
