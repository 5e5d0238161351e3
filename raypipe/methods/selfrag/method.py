"""The `selfrag` method (Self-RAG §3.3): the segment-level beam search (beam.py) over the generator's
engine and the retriever, and the variants eval runs (retrieval modes, threshold and IsSup-weight
sweeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raypipe.inference.engines.base import Engine, GroupTable
from raypipe.methods.base import Method, MethodRequest, MethodResult, Toolkit, ToolName, Variant
from raypipe.methods.selfrag.beam import BeamSearch
from raypipe.methods.selfrag.settings import SelfRAGSettings, SelfRAGSweeps


class SelfRAG(Method[SelfRAGSettings]):
    """Self-RAG decoding with the generator's engine and a retriever (paper §3.3)."""

    name = "selfrag"
    settings_type = SelfRAGSettings
    tool_names = ("engine", "retriever")

    def __init__(self, toolkit: Toolkit):
        super().__init__(toolkit)
        self.engine: Engine = toolkit.get("engine", self.name)
        self.groups = GroupTable(self.engine.tokenizer)

    @classmethod
    def uses(cls, settings: SelfRAGSettings) -> set[ToolName]:
        return {"engine"} if settings.mode == "never" else {"engine", "retriever"}

    def decode(self, requests: Sequence[MethodRequest], settings: SelfRAGSettings) -> list[MethodResult]:
        retriever = self.toolkit.get("retriever", self.name) if settings.mode != "never" else None
        return BeamSearch(self.engine, retriever, self.groups, settings).run(requests)

    @classmethod
    def variants(cls, settings: SelfRAGSettings, sweeps: SelfRAGSweeps | None = None) -> list[Variant]:
        """The retrieval modes, then the threshold sweep, then the IsSup-weight sweep (Fig. 3b, 3c)."""
        sweeps = sweeps or SelfRAGSweeps()

        def variant(name: str, sweep: str, value: float | str, **update: Any) -> Variant:
            return Variant(name, cls.name, sweep, value, settings.model_copy(update=update))

        variants = [variant(mode, "mode", mode, mode=mode) for mode in sweeps.modes]
        variants += [variant(f"threshold_{t:g}", "threshold", t, mode="adaptive", threshold=t) for t in sweeps.threshold]
        variants += [variant(f"w_is_sup_{w:g}", "is_sup_weight", w, mode=sweeps.weight_sweep_mode, w_is_sup=w)
                     for w in sweeps.is_sup_weight]
        return list({v.name: v for v in variants}.values())
