"""Self-CRAG's settings: its `methods.selfcrag` section (and a request's controls), and its eval sweeps:
CRAG's ablations plus the ways its knowledge reaches Self-RAG's beam."""

from __future__ import annotations

from typing import Literal

from raypipe.methods.crag.settings import CorrectiveSettings, CRAGSweeps
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.settings.base import ServerOnly

#: how CRAG's knowledge reaches Self-RAG's beam (`SelfCRAGSettings.knowledge_passages`)
KnowledgePassages = Literal["joined", "per_source", "per_action"]


class SelfCRAGSettings(SelfRAGSettings, CorrectiveSettings):
    """Self-CRAG (CRAG App. B.3): Self-RAG decoding whose retrieved items are CRAG's processed
    knowledge (internal for Correct, external for Incorrect, both for Ambiguous)."""

    #: how the knowledge reaches Self-RAG's beam. App. B.3 says only that the retrieved items are
    #: replaced by it. "per_source" (the default; our reading): the evaluator's action picks the
    #: knowledge, and each retrieved item (a source document or web page) is replaced by its kept
    #: strips, in order, under its title: the form Self-RAG's generator was trained to read and critique
    #: one at a time. "joined": the action's knowledge as one passage, k = internal + external
    #: (Algorithm 1, line 12, which feeds a plain generator). "per_action" (Table 6's reading: "only
    #: three passages are provided as input (correct, incorrect and ambiguous content)"): every request
    #: gets the three, internal knowledge, external knowledge and the two combined, and Self-RAG's own
    #: critique chooses among them; the action is still triggered and traced, and an action ablation
    #: withholds that action's passage. The default scored best on average of the three on the demo's
    #: world at two thirds of per_action's time (docs/results/crag.md;
    #: `eval.sweeps.selfcrag.knowledge_passages` compares them on the same questions)
    knowledge_passages: ServerOnly[KnowledgePassages] = "per_source"


class SelfCRAGSweeps(CRAGSweeps):
    """Self-CRAG's eval variants beside the method itself: CRAG's ablations (each `selfcrag_<ablation>`)
    and each listed way of handing the knowledge to the beam (`selfcrag_<knowledge_passages>`)."""

    #: the ways of handing the knowledge to the beam evaluated beside the method's own
    knowledge_passages: list[KnowledgePassages] = []
