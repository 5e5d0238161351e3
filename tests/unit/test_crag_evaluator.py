"""The retrieval evaluator's data from the world's ground truth (CRAG §4.2, App. B.3), its held-out
report (counting at the thresholds as the trigger does) and its startup check."""

from __future__ import annotations

from collections import Counter
from statistics import fmean

import pytest

from raypipe.data.world_entities import World
from raypipe.data.world_facts import Fact
from raypipe.errors import ModelError
from raypipe.evaluator_training.data import (
    Question,
    build_pairs,
    heldout_entity,
    passage_by_id,
    strip_pairs,
    write_pairs,
)
from raypipe.evaluator_training.report import confusion, report, suggest_thresholds
from raypipe.methods.crag.trigger import Action, trigger
from raypipe.retrieval.cross_encoder import load_evaluator
from raypipe.retrieval.types import Passage
from raypipe.settings.crag_tools import EvaluatorConfig, EvaluatorTrainConfig
from raypipe.settings.data import WorldConfig
from raypipe.training.classifier import steps_per_epoch


def _world(world_dir) -> tuple[WorldConfig, World]:
    cfg = WorldConfig(out_dir=str(world_dir), instances=400, seed=7, eval_instances=40, shard_size=150)
    return cfg, World(cfg)


class TitleSearcher:
    """Stands in for the dense retriever: every passage whose title shares a word with the query,
    then the first passages of the corpus."""

    def __init__(self, world: World):
        self.passages = [passage_by_id(world, f"p{i:07d}") for i in range(world.n_passages)]

    def search(self, queries, k, requests=None):
        out = []
        for q in queries:
            words = set(q.replace("?", "").split())
            ranked = sorted(range(len(self.passages)), key=lambda i: -len(words & set(self.passages[i][0].split())))
            out.append([Passage(f"p{i:07d}", *self.passages[i], 1.0) for i in ranked[:k]])
        return out


def test_pairs_label_answer_passages_positive_and_retrieved_or_lookalike_negative(world_dir):
    _, world = _world(world_dir)
    cfg = EvaluatorTrainConfig(questions=60, negatives=3, retrieve_k=8)
    pairs = list(build_pairs(world, TitleSearcher(world), cfg))
    heldout = {world.person(i).entity_id for i in world.heldout_people()}
    assert not any(p.entity_id in heldout for p in pairs)  # training-side questions only
    kinds = Counter(p.kind for p in pairs)
    assert kinds["positive"] >= 60 and kinds["retrieved"] > 0 and kinds["lookalike"] > 0
    assert kinds["strip_positive"] > 0 and kinds["strip_negative"] > 0  # the web pages' paragraphs
    for p in pairs:
        title, text = passage_by_id(world, p.passage_id)
        if p.kind.startswith("strip_"):
            assert p.title == title and p.text in text.splitlines()
        else:
            assert (p.title, p.text) == (title, text)
        assert (p.label > 0) == (p.kind in ("positive", "strip_positive"))
    # a look-alike negative is the near-namesake's passage: same first name, surname + "e"
    look = next(p for p in pairs if p.kind == "lookalike")
    assert look.title.split()[0] in look.query and look.title not in look.query
    # negative documents never hold the answer: none is among the question's positives (a negative
    # strip is a paragraph of a positive page that does not state it)
    positives = {(p.query, p.passage_id) for p in pairs if p.kind == "positive"}
    assert not any((p.query, p.passage_id) in positives for p in pairs if p.kind in ("retrieved", "lookalike"))
    assert all((p.query, p.passage_id) in positives for p in pairs if p.kind.startswith("strip_"))


def _question(subject: str, value: str) -> Question:
    fact = Fact(relation="r", entity_id="e1", subject=subject, value=value, questions=("q?",),
                template="{v}", pool="p", passages=("w0000001",))
    return Question(f"What about {subject}?", fact, None)


#: a person's web page: three paragraphs, as the world writes them
PAGE = ("Thea Rosing, born in Graebury in 1896, was a Koradian film director.\n"
        "Thea Rosing lived in Jorenkar for many years. Thea Rosing is best known for the film The Silver Crown by Night.\n"
        "This profile of Thea Rosing was compiled from local archives. Corrections are welcome.")


def test_a_web_pages_paragraphs_are_labelled_by_whether_they_state_the_fact():
    nationality = list(strip_pairs(_question("Thea Rosing", "Koradian"), "Thea Rosing", PAGE, "w0000001"))
    assert [(p.label, p.kind) for p in nationality] == [
        (1.0, "strip_positive"), (-1.0, "strip_negative"), (-1.0, "strip_negative")]
    assert [p.text for p in nationality] == PAGE.splitlines()
    # a work's author stated on the author's page: only the paragraph that names the work holds it,
    # although the author's name (the value) is in every paragraph
    author = list(strip_pairs(_question("The Silver Crown by Night", "Thea Rosing"), "Thea Rosing", PAGE, "w0000001"))
    assert [p.label for p in author] == [-1.0, 1.0, -1.0]
    # a one-paragraph passage is already a document pair: no strip pairs
    assert list(strip_pairs(_question("Thea Rosing", "Koradian"), "Thea Rosing", PAGE.splitlines()[0], "p1")) == []


def test_no_strip_pairs_when_switched_off(world_dir):
    _, world = _world(world_dir)
    cfg = EvaluatorTrainConfig(questions=30, negatives=2, retrieve_k=5, strip_pairs=False)
    assert not any(p.kind.startswith("strip_") for p in build_pairs(world, TitleSearcher(world), cfg))


def test_split_is_by_entity_and_written_with_stats(world_dir, tmp_path):
    wcfg, world = _world(world_dir)
    cfg = EvaluatorTrainConfig(questions=80, data_dir=str(tmp_path), heldout_fraction=0.3)
    stats = write_pairs(wcfg, TitleSearcher(world), cfg)
    import pyarrow.parquet as pq

    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    held = pq.read_table(tmp_path / "heldout.parquet").to_pylist()
    assert {r["entity_id"] for r in train}.isdisjoint({r["entity_id"] for r in held})
    assert all(heldout_entity(r["entity_id"], 0.3) for r in held)
    assert stats["train"]["pairs"] == len(train) and stats["heldout"]["pairs"] == len(held) > 0


def test_confusion_matrix_and_accuracy():
    out = confusion([0.9, -0.2, 0.1, -0.8, 0.0], [1, 1, -1, -1, -1])
    assert out["confusion"] == {"relevant": {"relevant": 1, "irrelevant": 1},
                                "irrelevant": {"relevant": 1, "irrelevant": 2}}
    assert out["accuracy"] == pytest.approx(3 / 5)


def test_suggested_thresholds_bound_the_errors_of_each_action():
    negatives = [-0.7 + 0.007 * i for i in range(100)]  # -0.7 .. -0.007
    positives = [-0.5 + 0.01 * i for i in range(40)]  # -0.5 .. -0.11
    got = suggest_thresholds(positives, negatives)
    # upper: at most 1 negative (1%) above it; lower: at most 2 positives (5%) below it
    assert got == {"upper": -0.01, "lower": -0.48}
    assert sum(n > got["upper"] for n in negatives) <= 1 and sum(p < got["lower"] for p in positives) <= 2
    assert sum(n > got["upper"] - 0.01 for n in negatives) > 1  # the lowest such value on the grid
    # scores squashed so that positives overlap negatives: lower is clamped to upper
    assert suggest_thresholds([-0.9, -0.8], [0.2, 0.3])["lower"] <= suggest_thresholds([-0.9, -0.8], [0.2, 0.3])["upper"]
    assert suggest_thresholds([], [0.1]) is None


def test_a_suggested_upper_may_equal_a_negative_score_since_the_trigger_needs_higher_than_upper():
    """Negatives at 0.25 exactly: an upper of 0.25 leaves them Ambiguous (the trigger's strict
    "higher than"), so 0.25 is suggested, not 0.26; likewise a lower of -0.4 with positives at -0.4."""
    got = suggest_thresholds([-0.4] * 20 + [0.5] * 20, [0.25] * 50 + [-0.9] * 50)
    assert got == {"upper": 0.25, "lower": -0.4}
    assert trigger([0.25], got["upper"], got["lower"]) is Action.AMBIGUOUS
    assert trigger([-0.4], got["upper"], got["lower"]) is Action.AMBIGUOUS


class ScoreByText:
    """A scorer whose score is written in the document: 'score=<x>'."""

    def score(self, pairs):
        return [float(d.rsplit("score=", 1)[1]) for _, d in pairs]


def test_the_report_counts_at_the_thresholds_as_the_trigger_does(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    upper, lower = 0.5, -0.5
    positives, negatives = [0.5, 0.51, 0.9, -0.5], [-0.5, -0.51, -0.9, 0.5]
    rows = [{"query": "q", "title": "t", "text": f"score={s}", "label": y, "kind": kind}
            for scores, y, kind in ((positives, 1.0, "positive"), (negatives, -1.0, "retrieved")) for s in scores]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "heldout.parquet")
    got = report(ScoreByText(), tmp_path / "heldout.parquet", upper, lower)["thresholds"]
    # exactly at upper is Ambiguous (not Correct), exactly at lower is not Incorrect: 2 of 4 each way
    assert got["positives_above_upper"] == 0.5 and got["negatives_below_lower"] == 0.5
    assert got["positives_above_upper"] == fmean(trigger([s], upper, lower) is Action.CORRECT for s in positives)
    assert got["negatives_below_lower"] == fmean(trigger([s], upper, lower) is Action.INCORRECT for s in negatives)


def test_steps_per_epoch():
    assert steps_per_epoch(100, 1, 32) == 4
    assert steps_per_epoch(100, 2, 32) == 2
    assert steps_per_epoch(0, 1, 8) == 1


def test_missing_evaluator_checkpoint_is_a_startup_error_naming_the_path(tmp_path):
    where = tmp_path / "no_evaluator"
    with pytest.raises(ModelError, match=str(where)):
        load_evaluator(EvaluatorConfig(path=str(where)))


@pytest.mark.parametrize("job", ["eval", "serve"])
def test_a_job_that_serves_crag_fails_at_its_start_when_the_evaluator_is_missing(job, tmp_path, monkeypatch):
    """Before any Ray actor or Serve replica is started: a replica that fails to load would be
    restarted by Serve over and over, an eval actor only fail after the eval sets were read."""
    from raypipe.config import load_config

    where = tmp_path / "no_evaluator"
    (tmp_path / "config.json").write_text("{}")  # a generator folder, as far as the start checks look
    cfg = load_config(None, [f"crag.evaluator.path={where}", "eval.methods=[crag]", "serve.methods=[crag]",
                             "serve.default_method=crag", f"eval.generator={tmp_path}"])

    def no_ray(*_args, **_kwargs):
        raise AssertionError("Ray was started")

    if job == "eval":
        from raypipe.jobs.eval import run_eval

        monkeypatch.setattr("raypipe.eval.runner.ensure_ray", no_ray)  # the name run_eval calls
        run = run_eval
    else:  # build_app binds deployments and starts nothing
        from raypipe.jobs.serve import serve_sections
        from raypipe.serving.app import build_app

        def run(cfg):
            return build_app(serve_sections(cfg))
    with pytest.raises(ModelError, match=str(where)):
        run(cfg)
