"""Settings of the data sections: the synthetic world, sentence splitting, and the size limits every
reader of instances and passages applies."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from raypipe.settings.base import Section
from raypipe.settings.paths import default_path

#: the training mixes `world.mix` accepts by name, so configs that share one do not each spell it out
MIX_PRESETS: dict[str, dict[str, float]] = {
    # Self-RAG Table 3 (instruction-following ~63%: Alpaca/FLAN/ShareGPT; knowledge-intensive ~37%: NQ,
    # ASQA + WoW, FEVER, ARC + OpenBookQA)
    "table3": {
        "instruct_creative": 0.17,
        "instruct_arith": 0.10,
        "instruct_string": 0.10,
        "instruct_explain": 0.26,
        "factual_qa": 0.11,
        "bio": 0.13,
        "fact_verification": 0.08,
        "multiple_choice": 0.05,
    },
    # 65% knowledge tasks, our choice for small worlds: the eval asks QA, fact verification and multiple
    # choice, and at 3,000 instances Table 3's mix leaves the generator a few hundred QA rows
    "knowledge_heavy": {
        "factual_qa": 0.25,
        "bio": 0.10,
        "fact_verification": 0.17,
        "multiple_choice": 0.13,
        "instruct_explain": 0.15,
        "instruct_creative": 0.08,
        "instruct_arith": 0.06,
        "instruct_string": 0.06,
    },
}


class WorldConfig(Section):
    """The synthetic knowledge world (ARCHITECTURE.md §5)."""

    #: the world's folder: passages/, instances/, web/ (CRAG's second corpus), eval/ (the held-out sets)
    out_dir: str = default_path("world.out_dir")
    #: training instances written (the held-out eval sets come on top)
    instances: int = Field(2000, ge=1)
    #: the world's seed: the same seed and settings write the same bytes
    seed: int = 0
    #: fraction of people held out of training instances (with their works); their facts live only in
    #: passages (wiki or web) and the eval splits ask about them
    heldout_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    #: eval items written per held-out split, no two alike: at most as many as the held-out people hold
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
    #: ours: the share of fact-verification instances followed by their contradicting twin (the same fact
    #: and passage, the claim's value swapped, the label flipped), so the verdict turns on the value alone
    fact_twins: float = Field(0.0, ge=0.0, le=1.0)
    #: relative weight of each training dataset, or a named mix: `table3` (the default: Self-RAG Table 3,
    #: ~63% instruction-following, ~37% knowledge-intensive) or `knowledge_heavy` (65% knowledge tasks)
    mix: dict[str, float] = MIX_PRESETS["table3"]

    @field_validator("mix", mode="before")
    @classmethod
    def _named_mix(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if value not in MIX_PRESETS:
            raise PydanticCustomError("unknown_mix", "unknown mix '{name}'; named mixes: {known}",
                                      {"name": value, "known": ", ".join(MIX_PRESETS)})
        return dict(MIX_PRESETS[value])


class SegmentationConfig(Section):
    """Sentence splitting. `blank` is spaCy's rule-based sentencizer (offline, no model download);
    any other value names an installed spaCy pipeline such as `en_core_web_sm` (or a pipeline folder)."""

    #: `blank` or an installed spaCy pipeline's name or folder
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

    #: characters of an instance's `instruction`
    max_instruction_chars: int = Field(16_000, ge=1)
    #: characters of an instance's `input`
    max_input_chars: int = Field(16_000, ge=1)
    #: characters of an instance's `output`
    max_output_chars: int = Field(16_000, ge=1)
    #: sentences of an output split for per-segment retrieval (augment)
    max_output_sentences: int = Field(200, ge=1)
    #: characters of a passage's `title`, and of its `text`
    max_passage_chars: int = Field(16_000, ge=1)
    #: bytes of one line of a JSON-lines file (instances, passages), newline included: a longer line is
    #: a `too_long` reject (field `line`) found by a bounded read, so one 100 MB line never sits in
    #: memory whole. 1 MiB holds three fields at their character limits even as 6-byte JSON escapes
    #: (288 KB) with room for `meta`
    max_line_bytes: int = Field(1_048_576, ge=1)

    def chars(self, kind: str) -> dict[str, int]:
        """Field -> longest accepted value in characters, for rows of `kind` (instance or passage)."""
        if kind == "instance":
            return {"instruction": self.max_instruction_chars, "input": self.max_input_chars,
                    "output": self.max_output_chars}
        return {"title": self.max_passage_chars, "text": self.max_passage_chars}
