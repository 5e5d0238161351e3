"""Algorithm 3's stages driven by a scripted critic and retriever to exact augmented outputs.

The expected strings are written by hand from the paper's rules (App. A.3): they are what a reader
of Algorithm 3 expects for the scripted judgements, not something the code produced.
"""

from __future__ import annotations

import numpy as np
import pytest

from raypipe import tokens as T
from raypipe.augment import stages
from raypipe.augment.row_sampling import apply_sampling
from raypipe.augment.state import InstanceState
from raypipe.data.segment import Segmenter
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample
from raypipe.retrieval.types import Passage
from raypipe.settings.augment import SamplingConfig
from raypipe.settings.data import SegmentationConfig


class ScriptedCritic:
    """Answers each judgement with probability 1 on the label `rule(example)` picks."""

    def __init__(self, rule):
        self.rule = rule
        self.calls: list[int] = []

    def predict(self, examples: list[CriticExample]) -> list[dict[str, float]]:
        self.calls.append(len(examples))
        out = []
        for ex in examples:
            label = self.rule(ex)
            out.append({t: (0.9 if t == label else 0.1 / (len(ASPECT_LABELS[ex.aspect]) - 1))
                        for t in ASPECT_LABELS[ex.aspect]})
        return out


class ScriptedRetriever:
    def __init__(self, table: dict[str, list[Passage]]):
        self.table = table
        self.queries: list[str] = []

    def search(self, queries: list[str], k: int, requests=None) -> list[list[Passage]]:
        self.queries.extend(queries)
        out = []
        for q in queries:
            hits = next((v for key, v in self.table.items() if key in q), [])
            out.append(hits[:k])
        return out


BIO_BORN = Passage("p1", "Ada Quill", "Ada Quill was born in 1901 in Lowmere.", 0.9)
BIO_DISTRACTOR = Passage("p2", "Ada Quell", "Ada Quell was a sailor.", 0.95)
BIO_WORK = Passage("p3", "Ada Quill (writer)", "Ada Quill wrote Red Harbor in 1930.", 0.8)


def bio_rule(ex: CriticExample) -> str:
    a = Aspect(ex.aspect)
    if a is Aspect.RETRIEVE_INPUT:
        return T.RETRIEVAL if "bio" in ex.instruction else T.NO_RETRIEVAL
    if a is Aspect.RETRIEVE:
        if "born" in ex.output:
            return T.CONTINUE
        if "wrote" in ex.output:
            return T.RETRIEVAL
        if "Later" in ex.output:
            return T.CONTINUE
        return T.NO_RETRIEVAL
    if a is Aspect.IS_REL:
        return T.RELEVANT if "Ada Quill" in (ex.evidence or "") else T.IRRELEVANT
    if a is Aspect.IS_SUP:
        if "1901" in ex.output and "1901" in ex.evidence:
            return T.FULLY_SUPPORTED
        if "Red Harbor" in ex.output and "Red Harbor" in ex.evidence:
            return T.PARTIALLY_SUPPORTED
        return T.NO_SUPPORT
    return T.utility_token(4 if "bio" in ex.instruction else 5)


def make_batch(rows: list[dict[str, str]]) -> dict[str, np.ndarray]:
    cols = ("id", "instruction", "input", "output", "dataset")
    return {c: np.array([r.get(c, "") for r in rows], dtype=object) for c in cols}


def run_all(batch, critic, retriever, k=3, seed=0):
    segmenter = Segmenter(SegmentationConfig())
    batch = stages.decide_retrieval(batch, critic)
    batch = stages.judge_utility(batch, critic)
    batch = stages.segment_outputs(batch, segmenter.split_many)
    batch = stages.first_retrieval(batch, retriever, k)
    batch = stages.decide_segments(batch, critic)
    batch = stages.retrieve_segments(batch, retriever, k)
    batch = stages.critique_passages(batch, critic, seed)
    return [stages.render(InstanceState.from_json(s)) for s in batch["state"]], batch


RETRIEVER_TABLE = {
    "was born in 1901. She wrote": [BIO_BORN],           # first retrieval: input + whole output
    "She wrote Red Harbor.": [BIO_DISTRACTOR, BIO_WORK],  # per-segment retrieval
}


BIO_OUTPUT = "Ada Quill was born in 1901. She wrote Red Harbor. She liked tea."


def bio_row(table: dict[str, list[Passage]]) -> tuple[str, InstanceState]:
    """The three-sentence biography augmented with `table`'s passages: its output and its state."""
    batch = make_batch([{"id": "b", "instruction": "Tell me a bio about Ada Quill.", "output": BIO_OUTPUT}])
    outputs, batch = run_all(batch, ScriptedCritic(bio_rule), ScriptedRetriever(table))
    return outputs[0], InstanceState.from_json(batch["state"][0])


def bio_with_second_passage(passage: str, critique: str) -> str:
    """`BIO_OUTPUT` as Algorithm 3 writes it when its second sentence reads `passage`, judged `critique`."""
    return ("[Retrieval]<paragraph>Ada Quill\nAda Quill was born in 1901 in Lowmere.</paragraph>"
            "[Relevant]Ada Quill was born in 1901.[Fully supported] "
            f"[Retrieval]<paragraph>{passage}</paragraph>{critique} "
            "[No Retrieval]She liked tea.[Utility:4]")


def test_no_retrieval_branch_gets_only_utility():
    batch = make_batch([{"id": "a", "instruction": "Write a poem about the sea.",
                         "output": "Waves roll in. The gulls cry."}])
    critic = ScriptedCritic(bio_rule)
    retriever = ScriptedRetriever(RETRIEVER_TABLE)
    outputs, _ = run_all(batch, critic, retriever)
    assert outputs == ["[No Retrieval]Waves roll in. The gulls cry.[Utility:5]"]
    assert retriever.queries == []  # no retrieval at all for this instance


def test_retrieval_branch_exact_output():
    output = "Ada Quill was born in 1901. She wrote Red Harbor. She liked tea."
    batch = make_batch([{"id": "b", "instruction": "Tell me a bio about Ada Quill.", "output": output}])
    outputs, _ = run_all(batch, ScriptedCritic(bio_rule), ScriptedRetriever(RETRIEVER_TABLE))
    # 1st sentence: [Continue] before any passage was inserted -> the first evidence is inserted;
    # 2nd: new retrieval; the distractor scores higher but is irrelevant, so the relevant, partially
    # supported passage is chosen; 3rd: no retrieval; utility at the end.
    expected = (
        "[Retrieval]<paragraph>Ada Quill\nAda Quill was born in 1901 in Lowmere.</paragraph>"
        "[Relevant]Ada Quill was born in 1901.[Fully supported] "
        "[Retrieval]<paragraph>Ada Quill (writer)\nAda Quill wrote Red Harbor in 1930.</paragraph>"
        "[Relevant]She wrote Red Harbor.[Partially supported] "
        "[No Retrieval]She liked tea.[Utility:4]"
    )
    assert outputs == [expected]
    parsed = T.parse(outputs[0])
    assert T.strip_reflection(outputs[0]) == output
    assert [s.retrieve for s in parsed.segments] == [T.RETRIEVAL, T.RETRIEVAL, T.NO_RETRIEVAL]


def test_continue_after_inserted_passage_and_irrelevant_only():
    output = "Ada Quill was born in 1901. Later she moved."
    batch = make_batch([{"id": "c", "instruction": "Tell me a bio about Ada Quill.", "output": output}])
    table = {"was born in 1901. Later": [BIO_BORN]}
    outputs, _ = run_all(batch, ScriptedCritic(bio_rule), ScriptedRetriever(table))
    assert outputs == [
        "[Retrieval]<paragraph>Ada Quill\nAda Quill was born in 1901 in Lowmere.</paragraph>"
        "[Relevant]Ada Quill was born in 1901.[Fully supported] "
        "[Continue to Use Evidence]Later she moved.[Utility:4]"
    ]


def test_only_irrelevant_passages_pick_a_seeded_random_one_without_issup():
    output = "She wrote Red Harbor."
    rows = [{"id": "d", "instruction": "Tell me a bio about Ada Quill.", "output": output}]
    table = {"She wrote Red Harbor.": [Passage("x1", "Bo", "Bo sails.", 0.5), Passage("x2", "Cy", "Cy rows.", 0.4),
                                       Passage("x3", "Di", "Di swims.", 0.3)]}
    outs = set()
    for extra in ([], [{"id": "e", "instruction": "Write a poem.", "output": "Hi."}]):
        o, batch = run_all(make_batch(rows + extra), ScriptedCritic(bio_rule), ScriptedRetriever(table))
        outs.add(o[0])
        state = InstanceState.from_json(batch["state"][0])
        assert state.segments[0].chosen_by == "random"
        assert "passage[0]" in state.random_draws
    assert len(outs) == 1  # the random choice does not depend on what else is in the batch
    (rendered,) = outs
    seg = T.parse(rendered).segments[0]
    assert seg.is_rel == T.IRRELEVANT and seg.is_sup is None
    assert seg.paragraph in {"Bo\nBo sails.", "Cy\nCy rows.", "Di\nDi swims."}


def test_critic_called_once_per_stage_batch():
    rows = [{"id": str(i), "instruction": "Tell me a bio about Ada Quill.",
             "output": "Ada Quill was born in 1901. She wrote Red Harbor. She liked tea."} for i in range(4)]
    critic = ScriptedCritic(bio_rule)
    run_all(make_batch(rows), critic, ScriptedRetriever(RETRIEVER_TABLE))
    # decide, utility, segment decisions (4 x 3), IsRel (4 x (1 + 2)), IsSup for the relevant ones
    assert critic.calls == [4, 4, 12, 12, 8]


@pytest.mark.parametrize("augmented,dataset,expect_drop_possible,expect_copies", [
    ("[No Retrieval]Hi.[Utility:5]", "instruct_creative", True, 1),
    ("[Retrieval]<paragraph>A\nb</paragraph>[Irrelevant]x.[Utility:3]", "factual_qa", False, 3),
    ("[Retrieval]<paragraph>A\nb</paragraph>[Irrelevant]x.[Utility:3]", "bio", False, 1),
])
def test_sampling_policy(augmented, dataset, expect_drop_possible, expect_copies):
    cfg = SamplingConfig(drop_no_retrieval=0.5, upsample_irrelevant_qa=2.0, qa_datasets=["factual_qa"])
    kept = 0
    for i in range(2000):
        state = InstanceState()
        apply_sampling(state, f"row{i}", dataset, augmented, cfg)
        kept += state.keep
        if state.keep:
            assert state.copies == expect_copies
    if expect_drop_possible:
        assert 900 < kept < 1100  # half of the no-retrieval rows dropped
    else:
        assert kept == 2000


def test_sampling_fractional_upsampling_rate():
    cfg = SamplingConfig(upsample_irrelevant_qa=0.25, qa_datasets=["factual_qa"])
    copies = []
    for i in range(4000):
        state = InstanceState()
        apply_sampling(state, f"q{i}", "factual_qa", "[Retrieval]<paragraph>A\nb</paragraph>[Irrelevant]x.", cfg)
        copies.append(state.copies)
    assert set(copies) == {1, 2}
    assert 0.2 < (np.mean(copies) - 1) < 0.3


def test_contrast_copy_reads_the_rejected_namesake_where_the_row_read_the_chosen_passage():
    output, state = bio_row(RETRIEVER_TABLE)
    # the 2nd sentence's retrieval offered the namesake (judged [Irrelevant]) beside the chosen passage
    assert stages.contrast_segment(state) == (1, 0)
    expected = bio_with_second_passage("Ada Quell\nAda Quell was a sailor.", "[Irrelevant]She wrote Red Harbor.")
    assert stages.render_contrast(state) == expected
    assert T.strip_reflection(expected) == BIO_OUTPUT
    assert stages.render(state) == output  # the row itself is untouched


def test_a_one_sentence_answer_continuing_the_first_evidence_is_offered_the_initial_top_k():
    # A QA row: its only sentence is judged [Continue] (the first evidence verifies it), so it inserts
    # from the initial retrieval; its top-K holds a namesake above the gold passage, which the critic
    # rejects: the gold is chosen, and the namesake is there for a contrast copy.
    output = "Ada Quill was born in 1901."
    batch = make_batch([{"id": "q", "instruction": "Tell me a bio about Ada Quill.", "output": output}])
    table = {"was born in 1901.": [BIO_DISTRACTOR, BIO_BORN]}
    retriever = ScriptedRetriever(table)
    outputs, batch = run_all(batch, ScriptedCritic(bio_rule), retriever, k=2)
    assert len(retriever.queries) == 1  # no second search: the segment reads the initial top-K
    assert outputs == ["[Retrieval]<paragraph>Ada Quill\nAda Quill was born in 1901 in Lowmere.</paragraph>"
                       "[Relevant]Ada Quill was born in 1901.[Fully supported][Utility:4]"]
    state = InstanceState.from_json(batch["state"][0])
    assert [p.id for p in state.segments[0].passages] == ["p2", "p1"]
    assert state.segments[0].is_rel == [T.IRRELEVANT, T.RELEVANT]
    assert stages.contrast_segment(state) == (0, 0)
    assert stages.render_contrast(state) == (
        "[Retrieval]<paragraph>Ada Quell\nAda Quell was a sailor.</paragraph>"
        "[Irrelevant]Ada Quill was born in 1901.[Utility:4]")


def test_no_contrast_copy_without_a_rejected_passage_beside_a_relevant_choice():
    _, state = bio_row({**RETRIEVER_TABLE, "She wrote Red Harbor.": [BIO_WORK]})
    assert stages.contrast_segment(state) is None
    with pytest.raises(ValueError, match="no rejected passage"):
        stages.render_contrast(state)


def test_unsupported_copy_reads_the_subjects_other_passage_and_says_no_support():
    # the 2nd sentence's retrieval offers the birth passage (about the subject: [Relevant], but it does
    # not say who wrote Red Harbor) above the work's passage, which is chosen as the supporting one
    output, state = bio_row({**RETRIEVER_TABLE, "She wrote Red Harbor.": [BIO_BORN, BIO_WORK]})
    assert stages.contrast_segment(state) is None  # nothing was rejected
    assert stages.unsupported_segment(state) == (1, 0)
    expected = bio_with_second_passage("Ada Quill\nAda Quill was born in 1901 in Lowmere.",
                                       "[Relevant]She wrote Red Harbor.[No support / Contradictory]")
    assert stages.render_unsupported(state) == expected
    assert T.strip_reflection(expected) == BIO_OUTPUT
    assert "[Partially supported]" in output  # the row itself keeps the supporting passage


def test_no_unsupported_copy_where_every_other_passage_is_rejected():
    _, state = bio_row(RETRIEVER_TABLE)
    assert stages.unsupported_segment(state) is None  # the namesake is [Irrelevant]: no IsSup to teach
    with pytest.raises(ValueError, match="no unsupporting relevant passage"):
        stages.render_unsupported(state)
    cfg = SamplingConfig(drop_no_retrieval=0.0, contrast_unsupported=1.0)
    apply_sampling(state, "b", "bio", stages.render(state), cfg)
    assert not state.unsupported


def test_sampling_marks_unsupported_copies_in_any_dataset_at_the_configured_share():
    output, state = bio_row({**RETRIEVER_TABLE, "She wrote Red Harbor.": [BIO_BORN, BIO_WORK]})
    shares = []
    for share in (0.0, 0.25):
        cfg = SamplingConfig(drop_no_retrieval=0.0, contrast_unsupported=share)
        hits = 0
        for i in range(2000):
            copy = InstanceState.from_json(state.to_json())
            apply_sampling(copy, f"row{i}", "bio", output, cfg)
            hits += copy.unsupported
        shares.append(hits / 2000)
    assert shares[0] == 0.0 and 0.2 < shares[1] < 0.3


def test_sampling_marks_contrast_copies_for_qa_rows_at_the_configured_share():
    output, row_state = bio_row(RETRIEVER_TABLE)

    def marked(dataset: str, share: float, n: int = 2000) -> float:
        cfg = SamplingConfig(drop_no_retrieval=0.0, contrast_irrelevant_qa=share, qa_datasets=["factual_qa"])
        hits = 0
        for i in range(n):
            state = InstanceState.from_json(row_state.to_json())
            apply_sampling(state, f"row{i}", dataset, output, cfg)
            hits += state.contrast
        return hits / n

    assert 0.2 < marked("factual_qa", 0.25) < 0.3
    assert marked("factual_qa", 0.0) == 0.0 and marked("bio", 1.0) == 0.0


def test_contrast_datasets_narrow_the_contrast_copies_and_leave_the_upsampling():
    output, row_state = bio_row(RETRIEVER_TABLE)
    output_irrelevant = output.replace(T.RELEVANT, T.IRRELEVANT, 1)
    assert output_irrelevant != output
    both = ["factual_qa", "multiple_choice"]
    copies = {}
    for contrast_datasets, contrasted in ((None, {"factual_qa", "multiple_choice"}), (["factual_qa"], {"factual_qa"})):
        cfg = SamplingConfig(drop_no_retrieval=0.0, contrast_irrelevant_qa=1.0, upsample_irrelevant_qa=1.0,
                             qa_datasets=both, contrast_datasets=contrast_datasets)
        for dataset in both:
            state = InstanceState.from_json(row_state.to_json())
            apply_sampling(state, "row0", dataset, output_irrelevant, cfg)
            assert state.contrast == (dataset in contrasted), (contrast_datasets, dataset)
            copies.setdefault(dataset, set()).add(state.copies)
    assert copies == {"factual_qa": {2}, "multiple_choice": {2}}  # the up-sampling as before
