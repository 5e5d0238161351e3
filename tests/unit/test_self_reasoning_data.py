"""Self-Reasoning data: the oracle teacher, the OpenAI-compatible teacher (mock transport), strict
parsing of replies, quality control (Algorithm 1 with ALCE citation scores) on hand-made examples,
negatives, and the funnel."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from raypipe.eval.citations import CriticChecker, SupportQuery, WorldChecker, citation_scores
from raypipe.jobs.trajectories import run_trajectories
from raypipe.prompts import Aspect
from raypipe.retrieval.types import Passage
from raypipe.settings.teachers import QualityConfig, TeacherConfig, TrajectoryConfig
from raypipe.tokens import FULLY_SUPPORTED, NO_SUPPORT, PARTIALLY_SUPPORTED
from raypipe.trajectories.dataset import (
    build_items,
    funnel,
    judge_reply,
    kept_rows,
    sample_questions,
    training_row,
)
from raypipe.trajectories.items import Question, TrajectoryItem, make_item
from raypipe.trajectories.quality import quality_control
from raypipe.trajectories.teachers import ERROR_KINDS, OpenAITrajectoryTeacher, Reply, TrajectoryOracle
from raypipe.trajectory_format import (
    FACT_ANSWERS,
    NOT_ENOUGH_INFO,
    REFUTE,
    SUPPORT,
    Cite,
    Trajectory,
    format_trajectory,
    parse_trajectory,
)

BIRTH = Passage("p1", "Margit Wesburn", "Margit Wesburn (1628) was a Koradian painter born in Umeikar.", 1.0)
CAREER = Passage("p2", "Margit Wesburn", "She worked at the Yarski Gallery. She lived in Ambiport.", 1.0)
OTHER = Passage("p9", "Dora Yarby", "Dora Yarby (1823) was a Helavian film director.", 1.0)
BIO_META = {
    "entity": "Margit Wesburn", "relevant_passages": ["p1", "p2"],
    "sentences": [
        {"text": "Margit Wesburn was born in 1628 in Umeikar.", "support": {"p1": "full"}, "facts": ["1628", "Umeikar"]},
        {"text": "Margit Wesburn worked at the Yarski Gallery.", "support": {"p2": "full"}, "facts": ["Yarski Gallery"]},
        {"text": "Further details can be found elsewhere.", "support": {}, "facts": []},
    ],
}
QA_META = {"entity": "Margit Wesburn", "relevant_passages": ["p1"], "answer": "1628",
           "sentences": [{"text": "Margit Wesburn was born in 1628.", "support": {"p1": "full"}, "facts": ["1628"]}]}
FACT_META = {"entity": "Margit Wesburn", "relevant_passages": ["p1"], "label": "true",
             "sentences": [{"text": "true", "support": {"p1": "full"}, "facts": ["Koradian"]}]}


def bio_item(docs=(BIRTH, CAREER, OTHER)) -> TrajectoryItem:
    return make_item(Question("i1", "longform", "Write a short biography of Margit Wesburn.", "q", BIO_META),
                     list(docs), negative=False, rng=None)


def trajectory(analysis: str, answer: str = "1628, Umeikar", relevant: bool = True) -> Trajectory:
    return Trajectory(relevant, "r", (Cite((1,), "born in Umeikar", "states it"),) if relevant else (), analysis, answer)


QC = QualityConfig()


@pytest.mark.parametrize(("analysis", "recall", "precision", "kept"), [
    # every statement cited by the document that states its facts
    ("Margit Wesburn was born in 1628 in Umeikar [1]. She worked at the Yarski Gallery [2].", 1.0, 1.0, True),
    # the second statement cites a document that does not state the Yarski Gallery
    ("Margit Wesburn was born in 1628 in Umeikar [1]. She worked at the Yarski Gallery [3].", 0.5, 0.5, False),
    # [3] is redundant: alone it supports nothing, and [1] still supports without it (ALCE precision)
    ("Margit Wesburn was born in 1628 in Umeikar [1,3]. She worked at the Yarski Gallery [2].", 1.0, 2 / 3, False),
    # no citation at all: recall 0
    ("Margit Wesburn was born in 1628 in Umeikar. She worked at the Yarski Gallery.", 0.0, 0.0, False),
    # two documents needed together: both citations are precise
    ("Born in 1628 in Umeikar, she worked at the Yarski Gallery [1,2].", 1.0, 1.0, True),
])
def test_alce_citation_scores_and_the_long_form_qc(analysis, recall, precision, kept):
    item = bio_item()
    scores = citation_scores(analysis, item, WorldChecker())
    assert (scores.recall, scores.precision) == pytest.approx((recall, precision))
    verdict = quality_control(item, trajectory(analysis), WorldChecker(), QC)
    assert verdict.kept is kept
    assert verdict.stage == (None if kept else "citation")


def test_qc_drops_a_wrong_answer_before_looking_at_citations():
    item = make_item(Question("i2", "qa", "In what year was Margit Wesburn born?", "q", QA_META), [BIRTH, OTHER],
                     negative=False, rng=None)
    assert quality_control(item, trajectory("Born in 1628 [1].", answer="1628"), WorldChecker(), QC).kept
    wrong = quality_control(item, trajectory("Born in 1635 [1].", answer="1635"), WorldChecker(), QC)
    assert (wrong.kept, wrong.stage, wrong.answer_correct) == (False, "answer", False)
    # a long-form answer missing most gold facts fails program P (EM recall) first
    short = quality_control(bio_item(), trajectory("Margit Wesburn was born in 1628 [1]."), WorldChecker(), QC)
    assert short.stage == "answer"
    assert quality_control(bio_item(), trajectory("Born in 1628 [1]."), WorldChecker(),
                           QualityConfig(enabled=False)).kept


def test_a_negative_fact_item_expects_not_enough_info_and_the_oracle_says_so():
    q = Question("i3", "fact", "Margit Wesburn was Koradian.", "q", FACT_META)
    positive = make_item(q, [OTHER, BIRTH], negative=False, rng=None)
    negative = make_item(q, [OTHER], negative=True, rng=None)
    assert (positive.gold, negative.gold) == (SUPPORT, NOT_ENOUGH_INFO)
    oracle = TrajectoryOracle()
    pos = parse_trajectory(oracle.reply(positive).text, 2, FACT_ANSWERS)
    neg = parse_trajectory(oracle.reply(negative).text, 1, FACT_ANSWERS)
    assert (pos.relevant, pos.answer, [c.docs for c in pos.cites]) == (True, SUPPORT, [(2,)])
    assert (neg.relevant, neg.answer, neg.cites) == (False, NOT_ENOUGH_INFO, ())
    for item, t in ((positive, pos), (negative, neg)):
        assert quality_control(item, t, WorldChecker(), QC).kept


@pytest.mark.parametrize(("claimed", "label", "answer", "comparison"), [
    ("Koradian", "true", SUPPORT, "The claim gives Koradian, as the evidence does."),
    ("Helavian", "false", REFUTE, "The claim gives Helavian, but the evidence gives Koradian."),
])
def test_the_oracles_fact_analysis_names_the_claimed_value_beside_the_evidences(claimed, label, answer, comparison):
    meta = {**FACT_META, "label": label, "claimed": claimed}
    item = make_item(Question("f2", "fact", f"Margit Wesburn was {claimed}.", "q", meta), [OTHER, BIRTH],
                     negative=False, rng=None)
    t = parse_trajectory(TrajectoryOracle().reply(item).text, 2, FACT_ANSWERS)
    assert t.answer == answer
    assert comparison in t.analysis and t.analysis.index(comparison) < t.analysis.index("The claim is therefore")
    assert quality_control(item, t, WorldChecker(), QC).kept
    # an instance without its claimed value keeps the analysis without the comparison
    plain = make_item(Question("f3", "fact", "Margit Wesburn was Koradian.", "q", FACT_META), [OTHER, BIRTH],
                      negative=False, rng=None)
    assert "The claim gives" not in parse_trajectory(TrajectoryOracle().reply(plain).text, 2, FACT_ANSWERS).analysis


def test_faithful_oracle_trajectories_pass_qc_and_cite_the_supporting_documents():
    item = bio_item((OTHER, CAREER, BIRTH))  # documents 2 and 3 are relevant
    t = parse_trajectory(TrajectoryOracle().reply(item).text, 3)
    assert [c.docs for c in t.cites] == [(2,), (3,)]
    assert t.analysis == "Margit Wesburn was born in 1628 in Umeikar [3]. Margit Wesburn worked at the Yarski Gallery [2]."
    assert quality_control(item, t, WorldChecker(), QC).kept


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_every_deliberate_oracle_mistake_on_long_form_is_caught_by_qc(kind):
    item = bio_item()
    t = parse_trajectory(format_trajectory(TrajectoryOracle().trajectory(item, kind)), 3)
    assert not quality_control(item, t, WorldChecker(), QC).kept


def test_oracle_error_rate_is_a_stable_share_of_items():
    items = [make_item(Question(f"i{n}", "qa", "q?", "q", QA_META), [BIRTH], negative=False, rng=None)
             for n in range(400)]
    errors = [r.error for r in TrajectoryOracle(error_rate=0.25, seed=3).teach(items)]
    assert 0.18 < sum(e is not None for e in errors) / len(errors) < 0.32
    assert errors == [r.error for r in TrajectoryOracle(error_rate=0.25, seed=3).teach(items)]
    assert all(r.error is None for r in TrajectoryOracle(error_rate=0.0).teach(items))


def test_a_reply_that_does_not_parse_is_discarded_and_counted():
    item = bio_item()
    rows = [judge_reply(item, Reply("Sure! She was born in 1628."), WorldChecker(), QC),
            judge_reply(item, Reply(None), WorldChecker(), QC),
            judge_reply(item, TrajectoryOracle().reply(item), WorldChecker(), QC)]
    assert [r["parse"] for r in rows] == ["unexpected_line", "no_reply", "ok"]
    assert rows[0]["verdict"] is None and rows[0]["target"] is None
    flow = funnel(rows)
    assert flow["overall"] == {"generated": 3, "replied": 2, "parsed": 1, "answer_correct": 1, "citation_passed": 1}
    assert flow["discarded"] == {"unexpected_line": 1, "no_reply": 1}


def test_negatives_borrow_another_questions_documents():
    questions = [Question(f"i{n}", "qa", f"q{n}?", f"q{n}", {**QA_META, "relevant_passages": [f"p{n}"]})
                 for n in range(6)]
    docs = {f"i{n}": [Passage(f"p{n}", "t", f"text {n}", 1.0)] for n in range(6)}
    items = build_items(questions, docs, TrajectoryConfig(negative_fraction=1.0, questions=6))
    negatives = [i for i in items if i.negative]
    assert len(items) == 12 and len(negatives) == 6
    for item in negatives:
        assert item.docs[0].id != f"p{item.instance_id[1:]}"
        assert item.relevant_numbers() == []


def test_question_sample_skips_other_datasets_and_rejects_bad_meta():
    rows = [{"id": "a", "dataset": "factual_qa", "instruction": "q?", "input": "", "meta": json.dumps(QA_META)},
            {"id": "b", "dataset": "instruct_arith", "instruction": "1+1", "input": "", "meta": "{}"},
            {"id": "c", "dataset": "factual_qa", "instruction": "q?", "input": "", "meta": "not json"}]
    questions, rejects = sample_questions(rows, TrajectoryConfig(questions=10))
    assert [q.instance_id for q in questions] == ["a"]
    assert [(r["id"], r["field"]) for r in rejects] == [("c", "meta")]


def test_openai_teacher_sends_figure_5_caches_replies_and_resumes(tmp_path):
    item = bio_item()
    good = TrajectoryOracle().reply(item).text
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        text = good if len(seen) == 1 else "I cannot help with that."
        return httpx.Response(200, json={"choices": [{"message": {"content": text}}]})

    cfg = TeacherConfig(kind="openai", base_url="http://teacher/v1", concurrency=1, retries=0,
                        extra_body={"method": "direct", "model": "not-this-one"})
    items = [item, TrajectoryItem(**{**item.__dict__, "id": "i1|other"})]
    teacher = OpenAITrajectoryTeacher(cfg, tmp_path / "cache.jsonl",
                                      http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    replies = teacher.teach(items)
    prompt = seen[0]["messages"][0]["content"]
    assert (seen[0]["method"], seen[0]["model"]) == ("direct", cfg.model)  # extra_body rides along, never wins
    assert "# Reference Evidence\n[1] Margit Wesburn: Margit Wesburn (1628)" in prompt
    assert "Write a short biography of Margit Wesburn." in prompt
    rows = [judge_reply(i, r, WorldChecker(), QC) for i, r in zip(items, replies, strict=True)]
    assert sorted(r["parse"] for r in rows) == ["ok", "unexpected_line"]
    again = OpenAITrajectoryTeacher(cfg, tmp_path / "cache.jsonl",
                                    http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    assert [r.text for r in again.teach(items)] == [r.text for r in replies]
    assert len(seen) == 2  # nothing re-sent


def test_longform_metrics_score_self_reasoning_and_self_rag_predictions(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raypipe.eval.longform import longform_metrics

    pq.write_table(pa.Table.from_pylist([d.__dict__ for d in (BIRTH, CAREER, OTHER)]), tmp_path / "p.parquet")
    truth = {"id": "l1", "instruction": "Write a short biography of Margit Wesburn.", "input": "",
             "answers": ["1628", "Umeikar", "Yarski Gallery"], **{k: BIO_META[k] for k in
                                                                  ("entity", "sentences", "relevant_passages")}}
    (tmp_path / "set.jsonl").write_text(json.dumps(truth) + "\n")
    docs = [{"n": 1, "id": "p9", "title": "Dora Yarby"}, {"n": 2, "id": "p1", "title": "Margit Wesburn"}]
    sr = {"id": "l1", "text": "1628", "trace": {"documents": docs, "trajectory": {
        "analysis": "She was born in 1628 in Umeikar [2]. She worked at the Yarski Gallery [1]."}}}
    selfrag = {"id": "l1", "text": "Born in 1628 in Umeikar. Worked at the Yarski Gallery.", "trace": {"segments": [
        {"text": "Born in 1628 in Umeikar.", "citation": {"passage_id": "p1", "title": "t"}},
        {"text": "Worked at the Yarski Gallery.", "citation": {"passage_id": "p2", "title": "t"}}]}}
    for name, row, expected in (("sr", sr, (1.0, 0.5, 0.5)), ("selfrag", selfrag, (1.0, 1.0, 1.0))):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
        m = longform_metrics(tmp_path / f"{name}.jsonl", tmp_path / "set.jsonl", tmp_path / "p.parquet")
        assert (m["em_recall"], m["citation_recall"], m["citation_precision"]) == pytest.approx(expected), name


def _tiny_nli(folder, entail_bias: float):
    """A 1-layer BERT classifier whose output depends only on the classifier bias."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "born", "in"]) + "\n")
    config = BertConfig(vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=8, num_labels=3,
                        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, entail_bias]))
    model.save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def test_nli_checker_reads_the_entailment_class_from_the_model_labels(tmp_path):
    from raypipe.eval.citations import NLIChecker, SupportQuery

    item = bio_item()
    query = [SupportQuery("born in 1628", (BIRTH,), item)]
    assert NLIChecker(str(_tiny_nli(tmp_path / "yes", 5.0))).supports(query) == [True]
    assert NLIChecker(str(_tiny_nli(tmp_path / "no", -5.0))).supports(query) == [False]


class WordOverlapCritic:
    """A stub critic predictor: the IsSup distribution of an example puts the most probability on
    [Fully supported] when every word of the output is in the evidence, on [Partially supported] when
    at least half are, else on [No support / Contradictory]. Records every batch it is asked."""

    def __init__(self):
        self.calls: list[list] = []

    def predict(self, examples):
        self.calls.append(list(examples))
        out = []
        for ex in examples:
            words = set(re.findall(r"\w+", ex.output.lower()))
            share = len(words & set(re.findall(r"\w+", ex.evidence.lower()))) / len(words)
            top = FULLY_SUPPORTED if share == 1 else PARTIALLY_SUPPORTED if share >= 0.5 else NO_SUPPORT
            out.append({t: 0.6 if t == top else 0.2 for t in (NO_SUPPORT, PARTIALLY_SUPPORTED, FULLY_SUPPORTED)})
        return out


def test_critic_checker_asks_the_critics_is_sup_aspect_and_counts_only_the_supported_tokens():
    item = bio_item()
    queries = [
        SupportQuery("She worked at the Yarski Gallery.", (CAREER,), item),  # every word in the document
        SupportQuery("Margit Wesburn was born in Ambiport.", (BIRTH,), item),  # 5 words of 6: partial
        SupportQuery("Dora Yarby was a film director.", (BIRTH, OTHER), item),  # in the second document
        SupportQuery("Cats sleep all day.", (OTHER,), item),  # nothing in common
        SupportQuery("She worked at the Yarski Gallery.", (), item),  # no document shown
    ]
    critic = WordOverlapCritic()
    assert CriticChecker(critic, [FULLY_SUPPORTED]).supports(queries) == [True, False, True, False, False]
    # one batch; the statement without documents is unsupported without asking (as the world checker)
    [examples] = critic.calls
    assert [ex.aspect for ex in examples] == [Aspect.IS_SUP] * 4
    assert {ex.instruction for ex in examples} == {item.question}
    assert [ex.output for ex in examples] == [q.statement for q in queries[:4]]
    assert examples[2].evidence == f"{BIRTH.title}\n{BIRTH.text}\n{OTHER.title}\n{OTHER.text}"
    assert examples[0].evidence == f"{CAREER.title}\n{CAREER.text}"
    # which tokens count as support is the caller's choice
    lenient = CriticChecker(WordOverlapCritic(), [FULLY_SUPPORTED, PARTIALLY_SUPPORTED])
    assert lenient.supports(queries) == [True, True, True, False, False]
    # nothing to judge: no call to the critic
    assert CriticChecker(critic, [FULLY_SUPPORTED]).supports([]) == []
    assert len(critic.calls) == 1


def test_alce_citation_scores_with_the_critic_checker():
    item = bio_item()  # [1] BIRTH, [2] CAREER, [3] OTHER
    answer = ("Margit Wesburn was a Koradian painter [1,3]. "  # [1] alone supports it: [3] is redundant
              "She worked at the Yarski Gallery [2]. "  # supported by its one citation
              "She lived in Umeikar [2]. "  # [2] says Ambiport: 3 words of 4, partial only
              "She painted portraits. "  # no citation
              "Margit Wesburn lived in Ambiport [1,2].")  # [2] alone supports it, [1] alone does not
    critic = WordOverlapCritic()
    scores = citation_scores(answer, item, CriticChecker(critic, [FULLY_SUPPORTED]))
    # recall: statements 1, 2 and 5 of 5; precision: [1] of statement 1, [2] of 2, [2] of 5, of 6 citations
    assert (scores.recall, scores.precision) == pytest.approx((3 / 5, 3 / 6))
    assert (scores.n_statements, scores.n_citations) == (5, 6)
    # the critic judged the cited statements without their citation marks, then each citation of the
    # supported multi-citation statements alone and without it
    assert [ex.output for ex in critic.calls[0]] == ["Margit Wesburn was a Koradian painter.",
                                                     "She worked at the Yarski Gallery.", "She lived in Umeikar.",
                                                     "Margit Wesburn lived in Ambiport."]
    assert len(critic.calls) == 2 and len(critic.calls[1]) == 8
    # partial support counted as support: statement 3 is supported and [1] of statement 5 alone
    # (Margit Wesburn, in) partially is, so it is no longer redundant
    lenient = citation_scores(answer, item, CriticChecker(WordOverlapCritic(), [FULLY_SUPPORTED, PARTIALLY_SUPPORTED]))
    assert (lenient.recall, lenient.precision) == pytest.approx((4 / 5, 5 / 6))


def test_alce_out_of_range_citation_makes_its_statement_unsupported_and_leaves_precision():
    """ALCE (compute_autoais): [9] of 5 documents makes its statement unsupported without judging it,
    and its citations leave precision's denominator: recall 1/2, precision 1/1."""
    class Everything:
        def __init__(self):
            self.asked = []

        def supports(self, queries):
            self.asked += [q.statement for q in queries]
            return [bool(q.docs) for q in queries]

    item = bio_item(docs=[BIRTH, CAREER, OTHER, BIRTH, CAREER])
    checker = Everything()
    scores = citation_scores("X has alpha [1][9]. X has beta [2].", item, checker)
    assert (scores.recall, scores.precision, scores.n_statements, scores.n_citations) == (0.5, 1.0, 2, 1)
    assert checker.asked == ["X has beta."]


def test_the_fact_prompt_is_the_same_in_a_training_row_and_in_decoding():
    """The claim with Figure 6's task sentence, in the training row's instruction and in the prompt
    decoding writes for the eval item of the same claim over the same documents."""
    from raypipe.eval.datasets import EvalItem
    from raypipe.methods.base import Toolkit
    from raypipe.methods.self_reasoning.method import SelfReasoning
    from raypipe.methods.self_reasoning.settings import SelfReasoningSettings
    from raypipe.prompts import SELFRAG_PROMPT
    from raypipe.retrieval.types import Passage
    from raypipe.training.encode import row_prompt_target
    from raypipe.trajectory_format import FACT_TASK
    from tests.unit.test_self_reasoning_method import FakeSearcher, ScriptedEngine

    claim = "Margit Wesburn was Koradian."
    item = make_item(Question("f1", "fact", claim, claim, FACT_META), [CAREER, BIRTH], negative=False, rng=None)
    row = training_row(item, "Relevant: False\nRelevant Reason: r\nAnalysis: a\nFinal Answer: NOT ENOUGH INFO")
    train_prompt, _ = row_prompt_target(row, prompt_format=SELFRAG_PROMPT)
    assert row["instruction"] == f"{FACT_TASK}\n\n{claim}"

    engine = ScriptedEngine({claim: "Final Answer: SUPPORT"})
    searcher = FakeSearcher({claim: [Passage(d.id, d.title, d.text, 1.0) for d in item.docs]})
    eval_item = EvalItem("f1", "heldout_fact", "fact", "Is the following statement correct or not?", claim, ("true",))
    SelfReasoning(Toolkit(engine=engine, retriever=searcher)).decode([eval_item.request()], SelfReasoningSettings())
    assert engine.prompts == [train_prompt]


def test_a_data_folder_without_the_fact_task_sentence_is_refused(tmp_path):
    from raypipe.config import load_config
    from raypipe.errors import RaypipeError

    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "stats.json").write_text(json.dumps({"processes": ["relevance", "evidence", "analysis"]}))
    with pytest.raises(RaypipeError, match="task sentence"):
        run_trajectories(load_config(None, [f"trajectories.out_dir={tmp_path}"]))


def test_kept_rows_honour_each_tasks_cap_and_count_what_it_left_out():
    """Caps bind per task, the overall `max_kept` still binds, and every passing trajectory a cap
    left out is counted under its task (nothing dropped silently)."""
    def judged(n: int, task: str, meta: dict, kept: bool = True) -> dict:
        item = make_item(Question(f"{task}{n}", task, f"{task} question {n}?", "q", meta), [BIRTH], negative=False,
                         rng=None)
        return {"id": item.id, "item": item.to_json(), "target": "Final Answer: x",
                "verdict": json.dumps({"kept": kept})}

    rows = ([judged(n, "longform", BIO_META) for n in range(30)] + [judged(n, "qa", QA_META) for n in range(10)]
            + [judged(n, "qa", QA_META, kept=False) for n in range(10, 15)])
    capped, over = kept_rows(rows, TrajectoryConfig(max_kept_per_task={"longform": 4}))
    assert [r["task"] for r in capped].count("longform") == 4
    assert [r["task"] for r in capped].count("qa") == 10  # the failed five never count
    assert over == {"longform": 26}
    uncapped, none_over = kept_rows(rows, TrajectoryConfig())
    assert len(uncapped) == 40 and none_over == {}
    both, _ = kept_rows(rows, TrajectoryConfig(max_kept=8, max_kept_per_task={"longform": 4}))
    assert len(both) == 8 and [r["task"] for r in both].count("longform") <= 4
