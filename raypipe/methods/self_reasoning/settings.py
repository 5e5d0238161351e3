"""Self-Reasoning's settings: its `methods.self_reasoning` section (and a request's controls), the
processes a trajectory holds, and its eval sweeps."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator

from raypipe.methods.settings import MethodSettings
from raypipe.settings.base import Section, ServerOnly
from raypipe.settings.retrieval import DocumentNoise
from raypipe.trajectory_format import TrajectoryProcess


class SelfReasoningSettings(MethodSettings, DocumentNoise):
    """Self-Reasoning decoding (raypipe.methods.self_reasoning.method): retrieve top-K, generate the
    RAP/EAP/TAP trajectory in one pass, parse it. The generator is the self-reasoning model
    (`training.self_reasoning.out_dir`), so point `eval.generator` / `serve.generator` at it."""

    #: the trajectory format the self-reasoning model writes: the data job writes its training targets
    #: with these processes, decoding parses them. All three is the method; Table 2's ablations leave
    #: one out ("w/o RAP": [evidence, analysis]); the final answer is always written
    processes: ServerOnly[list[TrajectoryProcess]] = ["relevance", "evidence", "analysis"]

    #: the paper allows 2048. Ours fits the longest kept trajectory: the oracle trajectories quality
    #: control keeps on configs/self_reasoning.yaml's world measure, in SmolLM2 tokens, p95 256 / max
    #: 376 with the configured MiniLM top-5 (long form alone: p95 314) and max 388 with every relevant
    #: passage shown (the most a trajectory can cite). 512 leaves room over the longest and costs a
    #: well-formed trajectory nothing, since decoding stops after its `Final Answer` line
    max_new_tokens: int = Field(512, ge=1, description="tokens of the whole trajectory at most")
    #: repetition control (0 turns it off): OpenAI's frequency penalty on generated tokens (the engines'
    #: `GenerationParams.frequency_penalty`, vLLM's own). It grows with each repeat, so a greedy loop
    #: ("Tavasvik, Tavasvik, ...") breaks before the cap; the format's own repeats stay small against a
    #: trained model's margins: in a kept oracle trajectory a newline comes back at most 9 times and the
    #: most repeated token (a comma) 22 times, 0.9 and 2.2 logits at 0.1
    frequency_penalty: float = Field(0.1, ge=0.0, le=2.0, description="logit penalty per earlier use of a token")
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


class SelfReasoningSweeps(Section):
    """Self-Reasoning's eval variants beside the method itself: the retrieval-robustness settings of
    its Figure 3 (`shuffled`: the top-K in random order; `noise50`: half of them replaced by another
    question's)."""

    #: Figure 3's settings evaluated beside the method
    robustness: list[Literal["shuffled", "noise50"]] = ["shuffled", "noise50"]
