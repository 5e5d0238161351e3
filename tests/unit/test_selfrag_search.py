"""Self-RAG decoding with a scripted engine: the beam search must pick what Eq. 3-4 say.

Every generation below is scripted: its tokens, their log-probs (all equal, so the length-normalized
segment probability is exp(logprob)) and the group distributions an engine would report. Expected
scores are computed by hand in the comments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from raypipe.errors import ConfigError
from raypipe.inference.engines.base import Engine, Generation, GenerationParams, GroupProbs
from raypipe.methods import get_method
from raypipe.methods.base import MethodRequest, Toolkit
from raypipe.methods.closed_set import verdict_options
from raypipe.methods.selfrag.method import SelfRAG
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.retrieval.types import Passage
from raypipe.tokens import (
    FULLY_SUPPORTED,
    GROUP_TOKENS,
    IRRELEVANT,
    NO_RETRIEVAL,
    NO_SUPPORT,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    SPECIAL_TOKENS,
    TOKEN_GROUP,
    UTILITY,
    Group,
)

IDS = {t: 100 + i for i, t in enumerate(SPECIAL_TOKENS)}
TEXT_ID, EOS_ID = 7, 2


class FakeTokenizer:
    name_or_path = "fake"

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [IDS[text]] if text in IDS else [TEXT_ID]


def gen(*parts: str | tuple[str, dict[str, float]], p: float = 0.5, rel: dict[str, float] | None = None,
        eos: bool = False) -> Generation:
    """A scripted generation: plain strings are one text token each, (token, probs) a reflection token
    with its group's distribution; every token has probability `p`; `rel` is IsRel at position 0."""
    text, ids, reflections = "", [], []
    if rel is not None:
        reflections.append(GroupProbs(0, Group.IS_REL, rel))
    for position, part in enumerate(parts):
        if isinstance(part, tuple):
            token, probs = part
            ids.append(IDS[token])
            if not (position == 0 and TOKEN_GROUP[token] is Group.IS_REL and rel is not None):
                reflections.append(GroupProbs(position, TOKEN_GROUP[token], probs))
            text += token
        else:
            ids.append(TEXT_ID)
            text += part
    last = TOKEN_GROUP.get(parts[-1][0]) if isinstance(parts[-1], tuple) else None
    finish = "stop" if last in (Group.RETRIEVE, Group.IS_USE) else "length"
    if eos:
        ids.append(EOS_ID)
        finish = "eos"
    return Generation(text=text, token_ids=ids, token_logprobs=[math.log(p)] * len(ids), finish_reason=finish,
                      reflections=reflections)


class FakeEngine(Engine):
    """Answers each prompt with `script(prompt)`; records every call to check batching."""

    def __init__(self, script: Callable[[str], Generation], first: Callable[[str], dict[str, float]] | None = None):
        self.tokenizer = FakeTokenizer()
        self.script, self.first = script, first
        self.generate_calls: list[list[str]] = []
        self.next_calls: list[list[str]] = []

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        self.generate_calls.append(list(prompts))
        return [self.script(p) for p in prompts]

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        assert tokens == GROUP_TOKENS[Group.RETRIEVE]
        self.next_calls.append(list(prompts))
        return [self.first(p) for p in prompts]


def P(pid: str, title: str, text: str) -> Passage:
    return Passage(pid, title, text, 1.0)


class FakeRetriever:
    def __init__(self, passages: dict[str, list[Passage]] | list[Passage]):
        self.passages = passages
        self.queries: list[str] = []
        #: whose each query was, as the searcher was told
        self.requests: list[int | None] = []

    def search(self, queries: list[str], k: int, requests=None) -> list[list[Passage]]:
        self.queries.extend(queries)
        self.requests.extend(requests if requests is not None else [None] * len(queries))
        if isinstance(self.passages, list):
            return [self.passages[:k] for _ in queries]
        return [self.passages[q][:k] for q in queries]


def last_title(prompt: str) -> str | None:
    titles = re.findall(r"<paragraph>(.*?)\n", prompt)
    return titles[-1] if titles else None


def sup(full: float, partial: float, none: float) -> dict[str, float]:
    return {FULLY_SUPPORTED: full, PARTIALLY_SUPPORTED: partial, NO_SUPPORT: none}


def use(score: int) -> tuple[str, dict[str, float]]:
    return UTILITY[score - 1], {u: float(i == score - 1) for i, u in enumerate(UTILITY)}


def rel(r: float) -> dict[str, float]:
    return {RELEVANT: r, IRRELEVANT: 1 - r}


PASSAGES = [P("p1", "One", "first passage"), P("p2", "Two", "second passage"), P("p3", "Three", "third passage")]
# Segment scores with the default weights (1, 1, 0.5), segment probability = p:
#   One:   0.8 + 0.9 + (0.2 + 0.5*0.6) + 0.5*0.5 = 2.45
#   Two:   0.4 + 0.6 + 1.0             + 0.5*1.0 = 2.5
#   Three: 0.9 + 0.1 + 0.5             + 0.5*0.0 = 1.5
# With w_IsSup = 0: One 1.95, Two 1.5, Three 1.0.
THREE_WAY = {
    "One": gen((RELEVANT, rel(0.9)), "Answer one.", (PARTIALLY_SUPPORTED, sup(0.2, 0.6, 0.2)), use(4), p=0.8,
               rel=rel(0.9)),
    "Two": gen((RELEVANT, rel(0.6)), "Answer two.", (FULLY_SUPPORTED, sup(1.0, 0.0, 0.0)), use(5), p=0.4,
               rel=rel(0.6)),
    "Three": gen((IRRELEVANT, rel(0.1)), "Answer three.", (FULLY_SUPPORTED, sup(0.5, 0.0, 0.5)), use(3), p=0.9,
                 rel=rel(0.1)),
}


QUESTION = MethodRequest("Who wrote it?")
def config(**settings) -> SelfRAGSettings:
    """Self-RAG settings, K (`top_k`) among them, as eval and serving resolve them."""
    return SelfRAGSettings(**settings)


def decode(cfg: SelfRAGSettings, engine: FakeEngine, retriever: FakeRetriever | None, requests: list[MethodRequest]):
    return SelfRAG(Toolkit(engine=engine, retriever=retriever)).decode(requests, cfg)


def decode_one(cfg: SelfRAGSettings, engine: FakeEngine, retriever: FakeRetriever | None,
               request: MethodRequest = QUESTION):
    return decode(cfg, engine, retriever, [request])[0]


def test_beam_search_picks_the_best_scoring_passage():
    engine = FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)])
    result = decode_one(config(mode="always", top_k=3, max_depth=1), engine, FakeRetriever(PASSAGES))
    assert result.text == "Answer two."
    assert [c.passage_id for c in result.citations] == ["p2"]
    assert result.trace["score"] == pytest.approx(2.5)
    scores = result.trace["segments"][0]["scores"]
    assert scores["segment_prob"] == pytest.approx(0.4)
    assert scores["is_rel"] == pytest.approx(0.6)
    assert scores["is_sup"] == pytest.approx(1.0)
    assert scores["is_use"] == pytest.approx(1.0)
    assert result.trace["segments"][0]["reflections"]["is_rel"] == rel(0.6)
    assert result.n_retrievals == 1


def test_critique_weights_change_the_choice():
    engine = FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)])
    result = decode_one(config(mode="always", top_k=3, max_depth=1, w_is_sup=0.0), engine,
                        FakeRetriever(PASSAGES))
    assert result.text == "Answer one."
    assert result.trace["score"] == pytest.approx(1.95)


def test_k_passages_are_expanded_in_one_engine_call():
    engine = FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)])
    decode_one(config(mode="always", top_k=3, max_depth=1), engine, FakeRetriever(PASSAGES))
    assert len(engine.generate_calls) == 1
    prompts = engine.generate_calls[0]
    assert len(prompts) == 3
    assert prompts[1].endswith("### Response:\n[Retrieval]<paragraph>Two\nsecond passage</paragraph>")


def test_hard_constraint_drops_unsupported_continuations():
    # A: 0.95 + 0.9 + (0.3 + 0.5*0.3) = 2.3, wrote [No support]; B: 0.3 + 0.5 + (0.6 + 0.5*0.2) = 1.5
    script = {
        "One": gen((RELEVANT, rel(0.9)), "Claim A.", (NO_SUPPORT, sup(0.3, 0.3, 0.4)), p=0.95, rel=rel(0.9), eos=True),
        "Two": gen((RELEVANT, rel(0.5)), "Claim B.", (FULLY_SUPPORTED, sup(0.6, 0.2, 0.2)), p=0.3, rel=rel(0.5),
                   eos=True),
    }
    cfg = config(mode="always", top_k=2, max_depth=1, w_is_use=0.0)
    free = decode_one(cfg, FakeEngine(lambda p: script[last_title(p)]), FakeRetriever(PASSAGES))
    assert (free.text, free.trace["score"]) == ("Claim A.", pytest.approx(2.3))
    constrained = decode_one(cfg.model_copy(update={"forbid": [NO_SUPPORT]}),
                             FakeEngine(lambda p: script[last_title(p)]), FakeRetriever(PASSAGES))
    assert (constrained.text, constrained.trace["score"]) == ("Claim B.", pytest.approx(1.5))
    assert not constrained.trace["constraints_relaxed"]
    # every continuation broken: they are kept (and flagged) rather than answering nothing
    everything = decode_one(cfg.model_copy(update={"forbid": [NO_SUPPORT, FULLY_SUPPORTED]}),
                            FakeEngine(lambda p: script[last_title(p)]), FakeRetriever(PASSAGES))
    assert everything.text == "Claim A." and everything.trace["constraints_relaxed"]


def test_forbid_must_name_reflection_tokens():
    with pytest.raises(ValidationError, match=r"\['\[Nope\]'\] are not reflection tokens"):
        SelfRAGSettings(mode="never", forbid=["[Nope]"])


def test_retrieving_without_a_retriever_is_a_config_error():
    with pytest.raises(ConfigError, match="method 'selfrag' needs a retriever"):
        decode_one(config(mode="always"), FakeEngine(lambda p: gen("x")), None)
    assert decode_one(config(mode="never"), FakeEngine(lambda p: gen("x")), None).text == "x"


def test_the_registry_finds_selfrag_and_lists_the_known_methods():
    assert get_method("selfrag") is SelfRAG
    with pytest.raises(ConfigError, match="unknown method 'nope'; known methods: selfrag"):
        get_method("nope")


# --- retrieval modes ----------------------------------------------------------------------------


def plain_answer(prompt: str) -> Generation:
    if last_title(prompt):
        return gen((RELEVANT, rel(0.9)), "From the passage.", (FULLY_SUPPORTED, sup(1, 0, 0)), use(5), rel=rel(0.9))
    return gen("From memory.", use(3))


def test_never_mode_does_not_retrieve():
    engine, retriever = FakeEngine(plain_answer), FakeRetriever(PASSAGES)
    result = decode_one(config(mode="never"), engine, retriever)
    assert result.text == "From memory." and result.n_retrievals == 0 and not result.retrieved
    assert retriever.queries == [] and engine.next_calls == []
    assert engine.generate_calls == [["### Instruction:\nWho wrote it?\n\n### Response:\n[No Retrieval]"]]
    assert result.trace["raw"] == "[No Retrieval]From memory.[Utility:3]"


def test_always_mode_retrieves_without_asking_the_model():
    engine, retriever = FakeEngine(plain_answer), FakeRetriever(PASSAGES)
    result = decode_one(config(mode="always", top_k=2), engine, retriever)
    assert result.text == "From the passage." and result.retrieved
    assert retriever.queries == ["Who wrote it?"] and engine.next_calls == []


def test_a_request_query_replaces_instruction_and_input_as_x():
    retriever = FakeRetriever(PASSAGES)
    decode_one(config(mode="always", top_k=2), FakeEngine(plain_answer), retriever,
               MethodRequest("Say true or false.", "Ada wrote it.", query="Ada wrote it."))
    assert retriever.queries == ["Ada wrote it."]


@pytest.mark.parametrize(("threshold", "retrieves"), [(0.2, True), (0.25, False), (0.3, False)])
def test_adaptive_mode_retrieves_above_the_threshold(threshold, retrieves):
    # p(Retrieval) / (p(Retrieval) + p(No Retrieval)) = 0.2 / 0.8 = 0.25
    engine = FakeEngine(plain_answer, first=lambda p: {RETRIEVAL: 0.2, NO_RETRIEVAL: 0.6, "[Continue to Use Evidence]": 0.2})
    result = decode_one(config(mode="adaptive", threshold=threshold, top_k=2), engine, FakeRetriever(PASSAGES))
    assert result.retrieved is retrieves
    assert result.trace["segments"][0]["reflections"]["retrieve"][RETRIEVAL] == 0.2


def test_all_retrieve_mass_on_continue_means_no_retrieval_not_a_crash():
    # p(Retrieval) + p(No Retrieval) underflows to 0: the ratio is undefined, and the model asked for
    # no new passage, so the request goes on without retrieving (it used to fail the whole batch)
    engine = FakeEngine(plain_answer, first=lambda p: {RETRIEVAL: 0.0, NO_RETRIEVAL: 0.0,
                                                        "[Continue to Use Evidence]": 1.0})
    retriever = FakeRetriever(PASSAGES)
    result = decode_one(config(mode="adaptive", threshold=0.0, top_k=2), engine, retriever)
    assert not result.retrieved and retriever.queries == []
    assert result.text == "From memory."


def test_a_retrieve_token_starts_the_next_segment_with_the_previous_segment_as_query():
    def script(prompt: str) -> Generation:
        if last_title(prompt) == "Doc":
            return gen((RELEVANT, rel(0.8)), " Born in Paris.", (FULLY_SUPPORTED, sup(1, 0, 0)), use(5), rel=rel(0.8))
        return gen("Ada is a writer.", (RETRIEVAL, {RETRIEVAL: 0.9, NO_RETRIEVAL: 0.1, "[Continue to Use Evidence]": 0.0}))

    engine = FakeEngine(script, first=lambda p: {RETRIEVAL: 0.1, NO_RETRIEVAL: 0.9, "[Continue to Use Evidence]": 0.0})
    query = "Tell me about Ada.\nAda is a writer."
    retriever = FakeRetriever({query: [P("d1", "Doc", "Ada was born in Paris.")]})
    result = decode_one(config(mode="adaptive", max_depth=3), engine, retriever,
                        MethodRequest("Tell me about Ada."))
    assert retriever.queries == [query] and retriever.requests == [0]  # x + previous segment, still request 0
    assert result.text == "Ada is a writer. Born in Paris."
    assert result.trace["raw"] == ("[No Retrieval]Ada is a writer.[Retrieval]<paragraph>Doc\nAda was born in Paris."
                          "</paragraph>[Relevant] Born in Paris.[Fully supported][Utility:5]")
    segments = result.trace["segments"]
    assert [s["citation"]["passage_id"] if s["citation"] else None for s in segments] == [None, "d1"]
    assert segments[1]["reflections"]["retrieve"][RETRIEVAL] == 0.9
    assert len(engine.generate_calls) == 2  # one engine call per segment step


def test_beam_width_keeps_the_top_b_hypotheses_per_step():
    # THREE_WAY without the utility token, each segment asking for the next one with [No Retrieval]:
    #   One 0.8 + 0.9 + 0.5 = 2.2, Two 0.4 + 0.6 + 1.0 = 2.0, Three 0.9 + 0.1 + 0.5 = 1.5 -> keep One, Two
    # then " Done.[Utility:5]" at p = 1: 1.0 + 0.5 * 1.0 = 1.5; paths: One (2.2 + 1.5) / 2 = 1.85 > Two 1.75
    def script(prompt: str) -> Generation:
        if prompt.endswith("[No Retrieval]"):
            return gen(" Done.", use(5), p=1.0)
        base = THREE_WAY[last_title(prompt)]
        ids = base.token_ids[:-1] + [IDS[NO_RETRIEVAL]]
        reflections = [r for r in base.reflections if r.group is not Group.IS_USE]
        boundary = GroupProbs(len(ids) - 1, Group.RETRIEVE, {RETRIEVAL: 0.0, NO_RETRIEVAL: 1.0})
        return Generation(base.text.rsplit("[Utility", 1)[0] + NO_RETRIEVAL, ids, base.token_logprobs, "stop",
                          [*reflections, boundary])

    engine = FakeEngine(script, first=lambda p: {RETRIEVAL: 1.0, NO_RETRIEVAL: 0.0})
    result = decode_one(config(mode="adaptive", top_k=3, beam_width=2, max_depth=2), engine,
                        FakeRetriever(PASSAGES))
    second = engine.generate_calls[1]
    assert [last_title(p) for p in second] == ["One", "Two"]  # best first, Three dropped
    assert all(p.endswith("[No Retrieval]") for p in second)
    assert result.text == "Answer one. Done."
    assert result.trace["score"] == pytest.approx(1.85)


def test_requests_share_engine_calls_and_match_one_by_one():
    engine = FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)])
    cfg = config(mode="always", top_k=3, max_depth=1)
    requests = [MethodRequest("First?"), MethodRequest("Second?", input="context")]
    retriever = FakeRetriever(PASSAGES)
    together = decode(cfg, engine, retriever, requests)
    assert len(engine.generate_calls) == 1 and len(engine.generate_calls[0]) == 6
    assert retriever.queries == ["First?", "Second?\ncontext"] and retriever.requests == [0, 1]
    alone = [decode_one(cfg, FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)]), FakeRetriever(PASSAGES), r)
             for r in requests]
    assert [r.as_dict() for r in together] == [r.as_dict() for r in alone]


# --- closed-set tasks -----------------------------------------------------------------------------


def test_closed_set_sums_scores_per_option():
    # scores (w_IsUse 0, segment prob p, IsRel, IsSup Full):
    #   One "false": 0.9 + 1.0 + 1.0 = 2.9 (the best single output)
    #   Two "true":  0.5 + 0.7 + 1.0 = 2.2,  Three "True": 0.4 + 0.6 + 1.0 = 2.0  -> true sums to 4.2
    script = {
        "One": gen((RELEVANT, rel(1.0)), "false", (FULLY_SUPPORTED, sup(1, 0, 0)), p=0.9, rel=rel(1.0), eos=True),
        "Two": gen((RELEVANT, rel(0.7)), "true", (FULLY_SUPPORTED, sup(1, 0, 0)), p=0.5, rel=rel(0.7), eos=True),
        "Three": gen((RELEVANT, rel(0.6)), "True", (FULLY_SUPPORTED, sup(1, 0, 0)), p=0.4, rel=rel(0.6), eos=True),
    }
    engine = FakeEngine(lambda prompt: script[last_title(prompt)])
    cfg = config(mode="always", top_k=3, max_depth=1, beam_width=1, w_is_use=0.0)
    result = decode_one(cfg, engine, FakeRetriever(PASSAGES), MethodRequest("Is it?", "claim", verdict_options()))
    assert result.text == "false"
    assert result.option == "true"
    assert result.option_scores == {"false": pytest.approx(2.9), "true": pytest.approx(4.2)}


def test_memo_engine_lets_variants_share_engine_calls():
    from raypipe.eval.memo import MemoEngine, MemoSearcher

    inner = FakeEngine(lambda prompt: THREE_WAY[last_title(prompt)],
                       first=lambda p: {RETRIEVAL: 0.5, NO_RETRIEVAL: 0.5})
    engine, retriever = MemoEngine(inner), MemoSearcher(FakeRetriever(PASSAGES))
    always = decode(config(mode="always", top_k=3, max_depth=1), engine, retriever, [QUESTION])
    adaptive = decode(config(mode="adaptive", threshold=0.2, top_k=3, max_depth=1), engine, retriever,
                      [QUESTION, QUESTION])
    assert len(inner.generate_calls) == 1  # the adaptive run retrieved the same passages: all cached
    assert len(inner.next_calls) == 1 and inner.next_calls[0] == [inner.generate_calls[0][0].split("[Retrieval]")[0]]
    assert adaptive[0].text == adaptive[1].text == always[0].text == "Answer two."
    assert retriever.retriever.queries == ["Who wrote it?"]
