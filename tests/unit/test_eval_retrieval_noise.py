"""`eval.retrieval_noise`: Self-Reasoning's Figure 3 noise applied to every evaluated method's index
results, and predictions decoded under it never mistaken for clean ones."""

from __future__ import annotations

from raypipe.config import RetrievalNoiseConfig, load_config
from raypipe.eval.datasets import read_eval_sets
from raypipe.eval.predict import load_tools
from raypipe.eval.runner import _fingerprint, eval_variants
from raypipe.jobs.eval import eval_sections
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.tools import ToolSources


class CorpusSearcher:
    def __init__(self) -> None:
        self.corpus = {q: [Passage(f"{q}{i}", q.upper(), f"{q} text {i}", 1.0) for i in range(4)] for q in "ab"}

    def search(self, queries: list[str], k: int, requests=None) -> list[list[Passage]]:
        return [self.corpus[q][:k] for q in queries]


def _retriever(noise: RetrievalNoiseConfig):
    sources = ToolSources("unused", EngineConfig(), RetrievalConfig())
    return load_tools({"retriever"}, sources, CorpusSearcher, noise=noise).retriever


def test_active_noise_replaces_half_of_each_questions_documents_with_the_other_questions():
    a, b = _retriever(RetrievalNoiseConfig(noise_fraction=0.5, seed=3)).search(["a", "b"], 4)
    assert sum(p.id.startswith("b") for p in a) == 2 and sum(p.id.startswith("a") for p in b) == 2
    clean = _retriever(RetrievalNoiseConfig())
    assert isinstance(clean, CorpusSearcher)  # off: the method searches the retriever itself
    shuffled = _retriever(RetrievalNoiseConfig(doc_order="shuffled", seed=3)).search(["a", "b"], 4)
    assert [sorted(p.id for p in hits) for hits in shuffled] == [["a0", "a1", "a2", "a3"], ["b0", "b1", "b2", "b3"]]
    assert [p.id for p in shuffled[0]] != ["a0", "a1", "a2", "a3"] or [p.id for p in shuffled[1]] != ["b0", "b1", "b2", "b3"]


def test_noisy_predictions_have_their_own_fingerprint_and_clean_ones_keep_theirs(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"id": "q1", "question": "Where was Ada born?", "answers": ["Ostrava"]}\n')
    common = ["eval.methods=[rag]", f"eval.eval_sets=[{qa}]"]
    base = load_config(None, common)
    variant = eval_variants(eval_sections(base))[0]
    off = load_config(None, [*common, "eval.retrieval_noise.seed=5"])  # inactive: nothing changes
    noisy = load_config(None, [*common, "eval.retrieval_noise.noise_fraction=0.5"])
    shuffled = load_config(None, [*common, "eval.retrieval_noise.doc_order=shuffled"])
    items, _ = read_eval_sets([str(qa)], tmp_path / "rejects", None, None)
    prints = [_fingerprint(eval_sections(cfg), variant, False, None, items) for cfg in (base, off, noisy, shuffled)]
    assert prints[0] == prints[1]
    assert len(set(prints[1:])) == 3


def test_predictions_are_reused_only_for_the_same_items(tmp_path):
    """The fingerprint names the items themselves, so a limit that keeps other rows (say, a reader
    that now counts rejected rows) never reuses predictions decoded for the old ones."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"id": "q1", "question": "Where was Ada born?", "answers": ["Ostrava"]}\n'
                  '{"id": "q2", "question": "Where was Bo born?", "answers": ["Brno"]}\n')
    cfg = load_config(None, ["eval.methods=[rag]", f"eval.eval_sets=[{qa}]"])
    variant = eval_variants(eval_sections(cfg))[0]
    both, _ = read_eval_sets([str(qa)], tmp_path / "rejects", None, None)
    first, _ = read_eval_sets([str(qa)], tmp_path / "rejects", 1, None)
    assert [i.id for i in first] == ["q1"]
    prints = [_fingerprint(eval_sections(cfg), variant, False, None, items) for items in (both, first, first[:])]
    assert prints[0] != prints[1] and prints[1] == prints[2]


def test_predictions_of_another_engine_or_precision_are_not_reused(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"id": "q1", "question": "Where was Ada born?", "answers": ["Ostrava"]}\n')
    common = ["eval.methods=[rag]", f"eval.eval_sets=[{qa}]"]
    configs = [load_config(None, [*common, *extra]) for extra in (
        ["engine.kind=hf", "engine.precision=fp32"], ["engine.kind=vllm", "engine.precision=fp32"],
        ["engine.kind=hf", "engine.precision=bf16"], ["engine.kind=hf", "engine.precision=fp32", "engine.batch_size=3"])]
    items, _ = read_eval_sets([str(qa)], tmp_path / "rejects", None, None)
    prints = [_fingerprint(eval_sections(cfg), eval_variants(eval_sections(cfg))[0], False, None, items)
              for cfg in configs]
    assert len(set(prints[:3])) == 3
    assert prints[3] == prints[0]  # the HF batch size decides no token
