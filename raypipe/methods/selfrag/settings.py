"""Self-RAG's settings: its `methods.selfrag` section (and a request's controls), and its eval sweeps."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from raypipe.methods.settings import MethodSettings
from raypipe.settings.base import Section, ServerOnly
from raypipe.tokens import REFLECTION_TOKENS


def reflection_tokens_only(value: list[str]) -> list[str]:
    """`value` if every item is a reflection token (raypipe.tokens), else a validation error listing
    the allowed ones."""
    unknown = [t for t in value if t not in REFLECTION_TOKENS]
    if unknown:
        raise PydanticCustomError("unknown_token", "{unknown} are not reflection tokens; allowed: {allowed}",
                                  {"unknown": unknown, "allowed": ", ".join(REFLECTION_TOKENS)})
    return value


#: a reflection token; a JSON schema lists them, so that a client knows the allowed values (the
#: validator of `forbid` names them in its error)
ReflectionToken = Annotated[str, WithJsonSchema({"type": "string", "enum": list(REFLECTION_TOKENS)})]

RetrievalMode = Literal["adaptive", "always", "never"]


class SelfRAGSettings(MethodSettings):
    """Self-RAG inference (paper §3.3, Algorithm 1, App. A.4); defaults are the paper's settings. The
    number of passages per retrieval (K) is `top_k` (MethodSettings: `retrieval.top_k` unless set)."""

    #: `adaptive` retrieves when p(Retrieval) / (p(Retrieval) + p(No Retrieval)) > threshold
    mode: RetrievalMode = "adaptive"
    threshold: float = Field(0.2, ge=0.0, le=1.0, description="δ of adaptive retrieval")
    beam_width: int = Field(2, ge=1, description="segment-level beam width (B)")
    #: segments per output at most
    max_depth: int = Field(3, ge=1, description="segments per answer at most (T)")
    #: the segment's length cap
    max_new_tokens: int = Field(100, ge=1, description="tokens per segment at most")
    #: weight of the IsRel score in a segment's critique score (Eq. 4)
    w_is_rel: float = Field(1.0, allow_inf_nan=False)
    #: weight of the IsSup score (Eq. 4)
    w_is_sup: float = Field(1.0, allow_inf_nan=False)
    #: weight of the IsUse score (Eq. 4)
    w_is_use: float = Field(0.5, allow_inf_nan=False)
    #: the p(y_t | x, d, y<t) term of Eq. 3: `mean` = exp(mean token log-prob) (length-normalized),
    #: `sum` = exp(sum) (the raw segment probability), `none` = critique scores only (the released
    #: short-form script's default)
    segment_prob: ServerOnly[Literal["mean", "sum", "none"]] = "mean"
    #: hard constraints, e.g. ["[No support / Contradictory]"]
    forbid: list[ReflectionToken] = Field([], description="reflection tokens whose continuations are dropped")

    @field_validator("forbid")
    @classmethod
    def _reflection_tokens_only(cls, value: list[str]) -> list[str]:
        return reflection_tokens_only(value)


class SelfRAGSweeps(Section):
    """The Self-RAG variants eval runs beside `methods.selfrag`: retrieval modes, the threshold sweep
    of the paper's Fig. 3c and the IsSup-weight sweep of its Fig. 3b."""

    #: the retrieval modes evaluated (headline variants)
    modes: list[RetrievalMode] = ["never", "adaptive", "always"]
    #: adaptive-retrieval thresholds swept for the retrieval-frequency vs accuracy plot (Fig. 3c)
    threshold: list[float] = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]
    #: IsSup weights swept for the weight-effect plot (Fig. 3b); other weights as in `methods.selfrag`
    is_sup_weight: list[float] = [0.0, 0.5, 1.0, 2.0]
    #: retrieval mode of the weight sweep (weights only matter when passages are retrieved)
    weight_sweep_mode: RetrievalMode = "always"
