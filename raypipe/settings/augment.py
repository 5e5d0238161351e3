"""Settings of `raypipe augment` (Self-RAG Algorithm 3): D_gen from instances, the critic and the
retriever."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section
from raypipe.settings.models import DecodePrecision, EngineKind
from raypipe.settings.paths import default_path


class SamplingConfig(Section):
    """Self-RAG App. A.3: drop part of the no-retrieval instances, up-sample [Irrelevant] for QA."""

    #: share of the rows without retrieval left out of D_gen
    drop_no_retrieval: float = Field(0.5, ge=0.0, le=1.0)
    #: extra copies of a QA row holding [Irrelevant] (1.5 = one more, and a second for half of them)
    upsample_irrelevant_qa: float = Field(0.0, ge=0.0)
    #: datasets whose rows count as QA for the up-sampling
    qa_datasets: list[str] = ["nq", "factual_qa"]
    #: ours, not App. A.3: the share of kept QA rows that are also written once more with a passage the
    #: critic judged [Irrelevant] in place of the chosen one (`augment.stages.render_contrast`). Where
    #: retrieval finds the gold passage for nearly every question, the chosen passages are all
    #: [Relevant] and up-sampling [Irrelevant] rows finds almost none (docs/augmentation.md), so the
    #: generator never sees a namesake's passage rejected. 0 = off (the paper's policy)
    contrast_irrelevant_qa: float = Field(0.0, ge=0.0, le=1.0)
    #: ours: the datasets whose rows get those contrast copies (None = `qa_datasets`), so one task can go
    #: without them (multiple choice, whose copies teach an answer after a rejected passage) while it
    #: keeps the [Irrelevant] up-sampling
    contrast_datasets: list[str] | None = None
    #: ours, not App. A.3: the share of kept rows (any dataset) that are also written once more with a
    #: passage the critic judged [Relevant] but [No support / Contradictory] in place of the chosen one
    #: (`augment.stages.render_unsupported`). App. A.2 picks a supporting passage wherever there is one,
    #: so where outputs restate their passages nearly every IsSup written is [Fully supported]
    #: (docs/augmentation.md) and the generator's IsSup is a constant. 0 = off (the paper's)
    contrast_unsupported: float = Field(0.0, ge=0.0, le=1.0)
    #: seeds the draws (keyed by row id, so a rerun draws the same)
    seed: int = 0


class CollapseCheckConfig(Section):
    """After augmentation, the critic's labels in D_gen beside the teacher's on a sample of the same
    rows, per aspect (`raypipe.augment.collapse`): a critic that answers one label everywhere makes a
    generator that writes one fixed critique, and nothing downstream would say so."""

    #: D_gen rows the teacher (`label.teacher`) relabels: every judgement the critic made on them.
    #: None = 200 with the oracle teacher (free) and 0 with an OpenAI teacher (each row costs a few
    #: requests per sentence and passage); 0 = no teacher sample, D_gen's shares alone
    sample_rows: int | None = Field(None, ge=0)
    #: an aspect is collapsed when one label takes more than this share of D_gen's labels while the
    #: teacher's top label on the sample takes no more
    max_share: float = Field(0.95, gt=0.0, le=1.0)
    #: a collapsed aspect fails the job (after stats.json is written, before _SUCCESS) instead of
    #: warning; off by default so a first run still shows how far it got
    fail: bool = False
    #: seeds the rows the teacher relabels
    seed: int = 0


class AugmentConfig(Section):
    #: the instance shards (a parquet file or a folder of them)
    instances: str = default_path("augment.instances")
    #: the critic model folder
    critic: str = default_path("augment.critic")
    #: D_gen: data/ (parquet shards), jsonl/, rejects/, stats.json
    out_dir: str = default_path("augment.out_dir")
    sampling: SamplingConfig = SamplingConfig()
    collapse_check: CollapseCheckConfig = CollapseCheckConfig()
    #: `fused`: each actor holds the critic, the retriever and the splitter and runs all of
    #: Algorithm 3 on its batch (`workers` actors of `worker_cpus`): one busy process per core, the
    #: fastest on CPU. `staged`: one actor pool per model stage (three critic pools of `critic_actors`,
    #: two retrieval pools of `retriever_actors`), so each model gets its own resources, e.g. the
    #: critic on GPUs and retrieval on CPUs.
    layout: Literal["fused", "staged"] = "fused"
    #: `fused`: actors, each running all of Algorithm 3
    workers: int = Field(2, ge=1)
    #: `fused`: CPU share of one actor
    worker_cpus: float = Field(0.4, gt=0)
    #: `staged`: actors per critic stage (three critic stages)
    critic_actors: int = Field(1, ge=1)
    #: `staged`: actors per retrieval stage (two)
    retriever_actors: int = Field(1, ge=1)
    #: CPU share of one `staged` actor, and of one stateless task (read, validate, render; in the
    #: `staged` layout also the splitter's actor): fractional so that the stage pools plus the tasks
    #: fit on a 2-core laptop. Ray Data 2.60's
    #: parquet file listing always asks for a whole CPU, so the actors must leave one free.
    critic_cpus: float = Field(0.15, gt=0)
    #: CPU share of one `staged` retrieval actor
    retriever_cpus: float = Field(0.15, gt=0)
    #: CPU share of one stateless task (read, validate, render; `staged`: also the splitter's actor)
    task_cpus: float = Field(0.25, gt=0)
    #: GPU share of one critic actor when CUDA is present
    critic_gpus: float = Field(0.25, gt=0)
    #: GiB of memory Ray reserves for one `fused` actor, so that a node gets no more actors than its
    #: memory holds (an actor holds the critic, the retriever, the index and spaCy); without a request
    #: Ray Data assumes ~1 GiB per 0.4 CPU and warns every 30 s that the actors use more
    worker_memory_gib: float = Field(2.0, gt=0)
    #: GiB reserved for one `staged` critic actor (the weights pass through host memory as they load)
    critic_memory_gib: float = Field(1.5, gt=0)
    #: GiB reserved for one `staged` retrieval actor (the index is held in memory unless
    #: `retrieval.index.mmap`; the passages are memory-mapped)
    retriever_memory_gib: float = Field(1.5, gt=0)
    #: rows per Ray Data batch
    batch_size: int = Field(256, ge=1)
    #: prompts per critic forward pass
    critic_batch_size: int = Field(64, ge=1)
    #: the critic's weights. fp32 keeps a row's labels independent of the rows batched with it, so a
    #: resumed, re-sharded or fault-recovered run writes the same bytes (tested); `bf16`, or `auto` (as
    #: `engine.precision`: bf16 on a GPU or on a CPU that multiplies bf16 natively), trades that for speed:
    #: 1.94x on the demo's encoder critic on an AVX512-BF16 CPU, the same labels on its 1,556 dev rows
    critic_precision: DecodePrecision = "fp32"
    #: what runs an LM critic (an encoder critic runs on torch): `auto` = vLLM wherever it imports, in
    #: fp32 exact and repeatable as on HF (docs/engines.md)
    critic_engine: EngineKind = "auto"
