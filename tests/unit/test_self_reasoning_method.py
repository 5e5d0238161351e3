"""The `self_reasoning` method over a scripted engine and a fake retriever: cited numbers mapped to
passage ids, the all-irrelevant path, a malformed trajectory answered from its tail, fact verdicts,
robustness variants, and the registry/serving wiring."""

from __future__ import annotations

import pytest

from raypipe.config import load_config
from raypipe.inference.engines.base import Engine, Generation, GenerationParams
from raypipe.methods import get_method
from raypipe.methods.base import MethodRequest, Toolkit
from raypipe.methods.closed_set import verdict_options
from raypipe.methods.self_reasoning.method import SelfReasoning
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings
from raypipe.retrieval.perturb import NoisySearcher
from raypipe.retrieval.types import Passage
from raypipe.serving.schemas import CONTROLS
from raypipe.trajectory_format import FACT_TASK


def P(pid: str, title: str, text: str) -> Passage:
    return Passage(pid, title, text, 1.0)


class FakeSearcher:
    def __init__(self, corpus: dict[str, list[Passage]]):
        self.corpus, self.calls, self.requests = corpus, [], []

    def search(self, queries, k, requests=None):
        self.calls.append(list(queries))
        self.requests.append(requests)
        return [self.corpus[q][:k] for q in queries]


class ScriptedEngine(Engine):
    """Answers each prompt with the reply whose key the prompt contains (a text, or a (text, finish
    reason) pair); records prompts and params."""

    def __init__(self, replies: dict[str, str | tuple[str, str]]):
        self.replies, self.prompts, self.params = replies, [], []
        self.tokenizer = None

    def generate(self, prompts, params: GenerationParams):
        self.prompts += prompts
        self.params.append(params)
        out = []
        for p in prompts:
            reply = next(v for k, v in self.replies.items() if k in p)
            text, finish = reply if isinstance(reply, tuple) else (reply, "eos")
            out.append(Generation(text, [], [], finish))
        return out

    def next_token_probs(self, prompts, tokens):
        raise AssertionError("self-reasoning reads no token distributions")


CORPUS = {
    "When was Ada born?": [P("p10", "Bob", "Bob was born in 1700."), P("p11", "Ada", "Ada was born in 1815.")],
    "Who painted Ivy?": [P("p20", "Rome", "Rome is a city."), P("p21", "Oslo", "Oslo is a city.")],
    "Ada was Koradian.": [P("p30", "Ada", "Ada was a Koradian poet.")],
    "Broken?": [P("p40", "X", "x.")],
}
REPLIES = {
    "When was Ada born?": ("Relevant: True\nRelevant Reason: document 2 is about Ada.\n"
                           "Cite content: [2] Ada was born in 1815.\nReason to cite: the birth year.\n"
                           "Analysis: Ada was born in 1815 [2].\nFinal Answer: 1815"),
    "Who painted Ivy?": ("Relevant: False\nRelevant Reason: the documents are about cities.\n"
                         "Analysis: From what I know, Ivy was painted by Kal Orr.\nFinal Answer: Kal Orr"),
    "Ada was Koradian.": ("Relevant: True\nRelevant Reason: about Ada.\nCite content: [1] a Koradian poet\n"
                          "Reason to cite: nationality.\nAnalysis: Ada was Koradian [1].\nFinal Answer: SUPPORT"),
    "Broken?": "Relevant: True\nRelevant Reason: yes\nCite content: [7] nothing\nFinal Answer: 42",
}


def run(questions, settings=None, requests=None):
    engine, searcher = ScriptedEngine(REPLIES), FakeSearcher(CORPUS)
    method = SelfReasoning(Toolkit(engine=engine, retriever=searcher))
    requests = requests or [MethodRequest(q) for q in questions]
    return method, engine, searcher, method.decode(requests, settings or SelfReasoningSettings())


def test_one_search_and_one_engine_call_per_batch_and_cited_numbers_map_to_passage_ids():
    method, engine, searcher, (ada, ivy) = run(["When was Ada born?", "Who painted Ivy?"])
    assert len(searcher.calls) == 1 and len(engine.prompts) == 2 and engine.params[0].return_probs is False
    assert searcher.requests == [[0, 1]]
    assert "[1] Bob\nBob was born in 1700.\n[2] Ada\nAda was born in 1815." in engine.prompts[0]
    assert ada.text == "1815"
    assert [(c.passage_id, c.title) for c in ada.citations] == [("p11", "Ada")]
    assert ada.trace["trajectory"]["cites"][0]["docs"] == [2]
    assert ada.n_retrievals == 1 and ada.trace["internal_knowledge"] is False


def test_all_irrelevant_answers_from_internal_knowledge_and_cites_nothing():
    _, _, _, (ivy,) = run(["Who painted Ivy?"])
    assert (ivy.text, ivy.citations, ivy.trace["internal_knowledge"]) == ("Kal Orr", [], True)


def test_a_malformed_trajectory_is_answered_from_its_tail_and_counted():
    method, _, _, (broken,) = run(["Broken?"])
    assert broken.text == "42"
    assert broken.trace["parse_reason"] == "bad_citation" and broken.trace["trajectory"] is None
    assert broken.citations == []
    assert method.parse_failures == {"bad_citation": 1}


def test_fact_verdicts_map_to_the_eval_options():
    request = MethodRequest("Is the following statement correct?", "Ada was Koradian.", verdict_options(),
                            query="Ada was Koradian.")
    _, engine, _, (fact,) = run([], requests=[request])
    assert f"### Instruction:\n{FACT_TASK}\n\nAda was Koradian.\n\n### Input:\n[1] Ada" in engine.prompts[0]
    assert (fact.option, fact.option_scores) == ("true", {"true": 1.0})


@pytest.mark.parametrize(("answer", "option"), [("SUPPORT", "true"), ("REFUTE", "false"), ("NOT ENOUGH INFO", "false")])
def test_not_enough_info_is_false_on_a_true_false_set(answer, option):
    reply = ("Relevant: True\nRelevant Reason: about Ada.\nCite content: [1] a Koradian poet\n"
             f"Reason to cite: nationality.\nAnalysis: See [1].\nFinal Answer: {answer}")
    method = SelfReasoning(Toolkit(engine=ScriptedEngine({"Ada": reply}), retriever=FakeSearcher(CORPUS)))
    request = MethodRequest("Is it correct?", "Ada was Koradian.", verdict_options(), query="Ada was Koradian.")
    [result] = method.decode([request], SelfReasoningSettings())
    assert (result.text, result.option) == (answer, option)


def test_decoding_stops_after_the_answer_line_with_the_penalty_of_the_settings():
    _, engine, _, _ = run(["When was Ada born?"])
    assert (engine.params[0].stop_line, engine.params[0].frequency_penalty) == ("Final Answer:", 0.1)
    _, engine, _, _ = run(["When was Ada born?"], SelfReasoningSettings(frequency_penalty=0))
    assert engine.params[0].frequency_penalty == 0


def test_parse_failures_are_counted_by_cause():
    """The token cap comes first (in a loop or not); otherwise the parser's reason."""
    loop = "Relevant: True\nRelevant Reason: Tavasvik" + ", Tavasvik" * 30
    replies = {"Q1": (loop, "length"), "Q2": ("Relevant: True\nRelevant Reason: it is about the painter and", "length"),
               "Q3": ("Relevant: False\nRelevant Reason: no.\nAnalysis: x.\nFinal Answer: 1\nFinal Answer: 2", "eos")}
    corpus = {q: [P("p", "T", "t.")] for q in replies}
    method = SelfReasoning(Toolkit(engine=ScriptedEngine(replies), retriever=FakeSearcher(corpus)))
    results = method.decode([MethodRequest(q) for q in replies], SelfReasoningSettings())
    assert [r.trace["parse_cause"] for r in results] == ["loop", "token_cap", "trailing_text"]
    assert results[0].trace["parse_reason"] == "no_evidence"  # the parser's view of a cut-off text
    assert results[2].text == "1"  # the first answer
    assert method.parse_failures == {"loop": 1, "token_cap": 1, "trailing_text": 1}


def test_analysis_text_setting_returns_the_long_answer():
    _, _, _, (ada,) = run(["When was Ada born?"], SelfReasoningSettings(text="analysis"))
    assert ada.text == "Ada was born in 1815 [2]."


def test_auto_text_answers_long_form_requests_with_the_analysis_and_the_others_with_the_answer():
    short, long = MethodRequest("When was Ada born?"), MethodRequest("When was Ada born?", long_form=True)
    _, _, _, (short_result, long_result) = run([], requests=[short, long])
    assert (short_result.text, long_result.text) == ("1815", "Ada was born in 1815 [2].")
    _, _, _, (forced,) = run([], SelfReasoningSettings(text="answer"), requests=[long])
    assert forced.text == "1815"


def test_noise_replaces_half_of_the_documents_with_another_questions():
    corpus = {"a": [P(f"a{i}", "A", "a") for i in range(4)], "b": [P(f"b{i}", "B", "b") for i in range(4)]}
    noisy = NoisySearcher(FakeSearcher(corpus), noise_fraction=0.5, seed=1)
    a, b = noisy.search(["a", "b"], 4)
    assert sum(p.id.startswith("b") for p in a) == 2 and sum(p.id.startswith("a") for p in b) == 2
    assert [p.id for p in a if p.id.startswith("a")] == [p.id for p in corpus["a"] if p in a]  # order kept
    assert noisy.search(["a", "b"], 4) == [a, b]  # seeded
    alone = NoisySearcher(FakeSearcher(corpus), noise_fraction=0.5)
    assert alone.search(["a"], 4) == [corpus["a"]] and alone.unperturbed == 1
    shuffled = NoisySearcher(FakeSearcher(corpus), shuffle=True, seed=2).search(["a"], 4)[0]
    assert sorted(p.id for p in shuffled) == ["a0", "a1", "a2", "a3"]


def test_registry_variants_config_and_serving_controls():
    assert get_method("self_reasoning") is SelfReasoning
    cfg = load_config(None, ["methods.self_reasoning.max_new_tokens=200", "serve.methods=[selfrag,self_reasoning]"])
    variants = SelfReasoning.variants(cfg.methods.self_reasoning, cfg.eval.sweeps.self_reasoning)
    assert [(v.name, v.sweep) for v in variants] == [("self_reasoning", "method"),
                                                     ("self_reasoning_shuffled", "robustness"),
                                                     ("self_reasoning_noise50", "robustness")]
    assert variants[2].settings.noise_fraction == 0.5 and variants[2].settings.max_new_tokens == 200
    controls = CONTROLS["self_reasoning"](max_tokens=64, text="analysis")
    settings = controls.to_settings(cfg.methods.self_reasoning)
    assert (settings.max_new_tokens, settings.text) == (64, "analysis")
    with pytest.raises(ValueError):
        CONTROLS["self_reasoning"](noise_fraction=2.0)


def test_an_ablation_model_is_parsed_in_its_own_format():
    """w/o TAP: the trajectory has no analysis, so a long-form request gets the short answer; the full
    format's text is a parse failure for it."""
    no_tap = {"When was Ada born?": "Relevant: True\nRelevant Reason: about Ada.\n"
                                    "Cite content: [2] Ada was born in 1815.\nReason to cite: the year.\nFinal Answer: 1815"}
    settings = SelfReasoningSettings(processes=["relevance", "evidence"])
    method = SelfReasoning(Toolkit(engine=ScriptedEngine(no_tap), retriever=FakeSearcher(CORPUS)))
    [r] = method.decode([MethodRequest("When was Ada born?", long_form=True)], settings)
    assert (r.text, [c.passage_id for c in r.citations], r.trace["trajectory"]["analysis"]) == ("1815", ["p11"], "")
    full, *_ = run(["When was Ada born?"], settings)
    assert full.parse_failures == {"unexpected_line": 1}
