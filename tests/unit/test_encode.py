"""Loss masks and truncation of the training encoder (Self-RAG Eq. 1 and 2, Self-Reasoning stages).

Expected labels are built here from the token ids (positions of the prompt's ids and of the
<paragraph> / </paragraph> ids), never by calling the encoder.
"""

from __future__ import annotations

import pytest

from raypipe.errors import DataError
from raypipe.prompts import format_generator_prompt
from raypipe.tokens import (
    FULLY_SUPPORTED,
    IRRELEVANT,
    NO_RETRIEVAL,
    PARAGRAPH_CLOSE,
    PARAGRAPH_OPEN,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
)
from raypipe.training.encode import IGNORE_INDEX, encode_example, encode_row, row_prompt_target
from raypipe.training.spans import find_spans, register_span_kind

GEN_MASK = ["prompt", "paragraph"]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from raypipe.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=True)["input_ids"]


def _expected_generator_labels(tokenizer, prompt: str, target: str) -> list[int]:
    """Prompt ids masked, ids strictly between each <paragraph> id and the next </paragraph> id
    masked, EOS appended in the loss."""
    full = _ids(tokenizer, prompt + target)
    n_prompt = len(_ids(tokenizer, prompt))
    open_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_OPEN)
    close_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_CLOSE)
    labels, inside = [], False
    for pos, tok in enumerate(full):
        if tok == close_id:
            inside = False
        labels.append(IGNORE_INDEX if pos < n_prompt or inside else tok)
        if tok == open_id:
            inside = True
    return labels + [tokenizer.eos_token_id]


def _gen_row(output: str) -> dict[str, str]:
    return {"id": "g1", "instruction": "Who founded the city of Velmora?", "input": "", "output": output}


def test_critic_row_masks_the_whole_prompt_and_keeps_target_and_eos(tokenizer):
    prompt = format_generator_prompt("Is the passage relevant to the question?", "Question: who?")
    enc = encode_example(prompt, RELEVANT, tokenizer, ["prompt"], max_length=512)
    n_prompt = len(_ids(tokenizer, prompt))
    relevant_id = tokenizer.convert_tokens_to_ids(RELEVANT)
    assert enc.input_ids == _ids(tokenizer, prompt + RELEVANT) + [tokenizer.eos_token_id]
    assert enc.labels == [IGNORE_INDEX] * n_prompt + [relevant_id, tokenizer.eos_token_id]
    assert not enc.truncated


def test_no_paragraph_output_keeps_every_output_token(tokenizer):
    output = f"{NO_RETRIEVAL}Seven plus five is twelve.{UTILITY[4]}"
    prompt, target = row_prompt_target(_gen_row(output))
    enc = encode_example(prompt, target, tokenizer, GEN_MASK, max_length=512)
    n_prompt = len(_ids(tokenizer, prompt))
    full = _ids(tokenizer, prompt + target)
    assert enc.labels == [IGNORE_INDEX] * n_prompt + full[n_prompt:] + [tokenizer.eos_token_id]


def test_one_paragraph_masks_its_content_but_not_its_markers(tokenizer):
    output = (f"{RETRIEVAL}{PARAGRAPH_OPEN}Velmora\nVelmora was founded by Ada Quill.{PARAGRAPH_CLOSE}"
              f"{RELEVANT}Ada Quill founded it.{FULLY_SUPPORTED}{UTILITY[4]}")
    prompt, target = row_prompt_target(_gen_row(output))
    enc = encode_example(prompt, target, tokenizer, GEN_MASK, max_length=512)
    assert enc.labels == _expected_generator_labels(tokenizer, prompt, target)
    open_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_OPEN)
    close_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_CLOSE)
    assert open_id in enc.labels and close_id in enc.labels
    start, end = enc.input_ids.index(open_id), enc.input_ids.index(close_id)
    assert end - start > 2 and set(enc.labels[start + 1 : end]) == {IGNORE_INDEX}


def test_two_paragraphs_keep_the_sentence_and_tokens_between_them(tokenizer):
    between = "It lies on the river Ost."
    output = (f"{RETRIEVAL}{PARAGRAPH_OPEN}Velmora\nVelmora was founded by Ada Quill.{PARAGRAPH_CLOSE}"
              f"{RELEVANT}Ada Quill founded it.{FULLY_SUPPORTED}"
              f"{RETRIEVAL}{PARAGRAPH_OPEN}Ost\nThe Ost flows through Velmora.{PARAGRAPH_CLOSE}"
              f"{IRRELEVANT}{between}{FULLY_SUPPORTED}{UTILITY[3]}")
    prompt, target = row_prompt_target(_gen_row(output))
    enc = encode_example(prompt, target, tokenizer, GEN_MASK, max_length=512)
    assert enc.labels == _expected_generator_labels(tokenizer, prompt, target)
    # the text between the two passages is predicted (Self-RAG's finetune.py masked it)
    close_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_CLOSE)
    first_close = enc.input_ids.index(close_id)
    second_open = enc.input_ids.index(tokenizer.convert_tokens_to_ids(PARAGRAPH_OPEN), first_close)
    kept_between = [t for t in enc.labels[first_close + 1 : second_open] if t != IGNORE_INDEX]
    assert tokenizer.decode(kept_between) == f"{RELEVANT}Ada Quill founded it.{FULLY_SUPPORTED}{RETRIEVAL}"


def test_truncation_keeps_the_head_and_is_flagged(tokenizer):
    output = f"{NO_RETRIEVAL}A long answer that goes on and on about the city.{UTILITY[2]}"
    prompt, target = row_prompt_target(_gen_row(output))
    full = encode_example(prompt, target, tokenizer, GEN_MASK, max_length=512)
    n_prompt = len(_ids(tokenizer, prompt))
    cut = n_prompt + 4
    enc = encode_example(prompt, target, tokenizer, GEN_MASK, max_length=cut)
    expected_ids = _ids(tokenizer, prompt + target)[:cut]
    assert enc.truncated and not full.truncated
    assert enc.input_ids == expected_ids
    assert enc.labels == [IGNORE_INDEX] * n_prompt + expected_ids[n_prompt:]
    assert tokenizer.eos_token_id not in enc.labels


class CharTokenizer:
    """One token per character (ids = code points), no BOS: reflection tokens span many ids, as in a
    base tokenizer that lacks them, which is what the truncation rule must protect."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        return {"input_ids": [ord(c) for c in text], "offset_mapping": [(i, i + 1) for i in range(len(text))]}


def test_truncation_never_splits_a_multi_id_reflection_token():
    prompt, target = "Q:\n", f"Yes.{UTILITY[4]}"
    start = len(prompt) + len("Yes.")  # first character of "[Utility:5]"
    enc = encode_example(prompt, target, CharTokenizer(), ["prompt"], max_length=start + 5)
    assert enc.truncated
    assert enc.input_ids == [ord(c) for c in (prompt + target)[:start]]
    assert enc.labels == [IGNORE_INDEX] * len(prompt) + [ord(c) for c in "Yes."]


def test_eos_follows_the_mask_of_the_last_target_character():
    prompt = "Q:\n"
    target = "Relevant: True\nAnalysis: because.\nFinal Answer: 2002"
    enc = encode_example(prompt, target, CharTokenizer(), ["prompt", "analysis"], max_length=512)
    analysis = len(prompt) + target.index("Analysis:")
    # the masked analysis and its masked EOS come after the last loss token: a causal LM's loss never
    # reads them, so they are not fed at all
    assert enc.labels == [IGNORE_INDEX] * len(prompt) + [ord(c) for c in target[: analysis - len(prompt)]]
    assert enc.input_ids == [ord(c) for c in (prompt + target)[:analysis]]
    kept = encode_example(prompt, target, CharTokenizer(), ["prompt"], max_length=512)
    assert kept.labels[-1] == kept.input_ids[-1] == CharTokenizer.eos_token_id


def test_a_masked_tail_that_overflows_max_length_is_dropped_not_truncated():
    prompt = "Q:\n"
    target = "Relevant: True\nAnalysis: " + "x" * 100
    enc = encode_example(prompt, target, CharTokenizer(), ["prompt", "analysis"], max_length=40)
    assert not enc.truncated
    assert "".join(chr(t) for t in enc.labels if t != IGNORE_INDEX) == "Relevant: True\n"


TRAJECTORY = (
    "Relevant: True\nRelevant Reason: the documents name the film.\n"
    "Cite content: [1] filming began in 2002\nReason to cite: gives the date.\n"
    "Cite content: [3] released in 1989\nReason to cite: another film.\n"
    "Analysis: It was made in 2002 [1].\nFinal Answer: 2002"
)


@pytest.mark.parametrize(
    ("kind", "start_label", "end_label"),
    [("relevance", "Relevant:", "Cite content:"), ("evidence", "Cite content:", "Analysis:"),
     ("analysis", "Analysis:", None)],
)
def test_self_reasoning_spans_cover_one_process_each(kind, start_label, end_label):
    prompt = "### Instruction:\nWhen was it made?\n\n### Response:\n"
    start = len(prompt) + TRAJECTORY.index(start_label)
    end = len(prompt) + (TRAJECTORY.index(end_label) if end_label else len(TRAJECTORY))
    assert find_spans([kind], prompt, TRAJECTORY) == [(start, end)]


def test_self_reasoning_gradual_stage_masks_later_processes():
    prompt = "Q:\n"
    stage1 = encode_example(prompt, TRAJECTORY, CharTokenizer(), ["prompt", "evidence", "analysis"], 4096)
    stage2 = encode_example(prompt, TRAJECTORY, CharTokenizer(), ["prompt", "analysis"], 4096)
    kept1 = "".join(chr(t) for t in stage1.labels if t != IGNORE_INDEX)
    kept2 = "".join(chr(t) for t in stage2.labels if t != IGNORE_INDEX)
    cite, analysis = TRAJECTORY.index("Cite content:"), TRAJECTORY.index("Analysis:")
    assert kept1 == TRAJECTORY[:cite]
    assert kept2 == TRAJECTORY[:analysis]


def test_unknown_and_duplicate_span_kinds_are_refused():
    with pytest.raises(KeyError, match="nonexistent"):
        find_spans(["nonexistent"], "a", "b")
    with pytest.raises(ValueError, match="already registered"):
        register_span_kind("paragraph")(lambda prompt, target: [])


def test_bad_rows_name_the_row_field_and_file(tokenizer):
    with pytest.raises(DataError) as err:
        encode_row({"id": "x7", "prompt": "P", "target": "  "}, tokenizer, ["prompt"], 64, file="d.parquet")
    assert (err.value.row_id, err.value.field, err.value.file) == ("x7", "target", "d.parquet")
    unclosed = _gen_row(f"{RETRIEVAL}{PARAGRAPH_OPEN}Velmora\nno end{RELEVANT}Yes.{UTILITY[4]}")
    for mask in (GEN_MASK, ["prompt"]):  # malformed whether or not the stage masks paragraphs
        with pytest.raises(DataError) as err:
            encode_row({**unclosed, "path": "g.parquet"}, tokenizer, mask, 64)
        assert (err.value.row_id, err.value.field, err.value.file) == ("g1", "output", "g.parquet")
        assert "unclosed <paragraph>" in str(err.value)
    # a critic target is not an augmented output, but a paragraph mask still needs closed markers
    with pytest.raises(DataError, match="not closed"):
        encode_row({"id": "c1", "prompt": "P", "target": f"{PARAGRAPH_OPEN}x"}, tokenizer, GEN_MASK, 64)
    with pytest.raises(DataError, match="prompt/target, instruction/input/output"):
        encode_row({"id": "z", "text": "hello"}, tokenizer, ["prompt"], 64)


def test_training_datasets_select_rows_by_their_dataset_column(tiny_model_dir, tokenizer):
    """`training.*.datasets`: rows of other datasets are marked unselected (counted, not encoded);
    selected rows encode exactly as encode_row does."""
    import pyarrow as pa

    from raypipe.training.data import encode_table

    rows = [{**_gen_row(f"{NO_RETRIEVAL}Seven.{UTILITY[4]}"), "id": "a", "dataset": "instruct_arith"},
            {**_gen_row(f"{NO_RETRIEVAL}A poem.{UTILITY[4]}"), "id": "b", "dataset": "instruct_creative"},
            {**_gen_row(f"{NO_RETRIEVAL}Ada.{UTILITY[4]}"), "id": "c", "dataset": "factual_qa"}]
    out = encode_table(pa.Table.from_pylist(rows), tokenizer_path=str(tiny_model_dir), mask=GEN_MASK,
                       max_length=128, seed=0, datasets=["factual_qa", "instruct_arith"]).to_pylist()
    assert [r["selected"] for r in out] == [1, 0, 1]
    assert [r["rejected"] for r in out] == [0, 0, 0]
    assert out[1]["input_ids"] == [] and out[1]["n_tokens"] == 0
    assert out[2]["input_ids"] == encode_row(rows[2], tokenizer, GEN_MASK, 128).input_ids
    everything = encode_table(pa.Table.from_pylist(rows), tokenizer_path=str(tiny_model_dir), mask=GEN_MASK,
                              max_length=128, seed=0).to_pylist()
    assert [r["selected"] for r in everything] == [1, 1, 1]
