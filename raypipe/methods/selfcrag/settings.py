"""Self-CRAG's settings: its `methods.selfcrag` section (and a request's controls). Its eval sweeps are
CRAG's (`raypipe.methods.crag.settings.CRAGSweeps`)."""

from __future__ import annotations

from typing import Literal

from raypipe.methods.crag.settings import CorrectiveSettings
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.settings.base import ServerOnly


class SelfCRAGSettings(SelfRAGSettings, CorrectiveSettings):
    """Self-CRAG (CRAG App. B.3): Self-RAG decoding whose retrieved items are CRAG's processed
    knowledge (internal for Correct, external for Incorrect, both for Ambiguous)."""

    #: how the knowledge reaches Self-RAG's beam. App. B.3 says only that the retrieved items are
    #: replaced by it. "per_source" (the default; our reading): each retrieved item (a source document
    #: or web page) is replaced by its kept strips, in order, under its title: the form Self-RAG's
    #: generator was trained to read and critique one at a time. "joined": one passage, k = internal +
    #: external (Algorithm 1, line 12, which feeds a plain generator). Measured on the demo's world and
    #: generator (50 held-out questions per set, docs/results/crag.md): per_source 50 / 36 / 18% on QA / fact / MC,
    #: joined 24 / 36 / 22%, Self-RAG itself 42 / 34 / 18%
    knowledge_passages: ServerOnly[Literal["joined", "per_source"]] = "per_source"
