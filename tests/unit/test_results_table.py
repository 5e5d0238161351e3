"""One results table: every method's own variant on every eval set, the papers' rows and orderings
beside it (assembled from a fixed metrics.json), and the eval job's per-method generators."""

from __future__ import annotations

import pytest

from raypipe.config import load_config
from raypipe.errors import ModelError
from raypipe.eval.results_table import results_markdown
from raypipe.eval.runner import eval_variants, method_rows, variants_by_generator
from raypipe.jobs.eval import eval_sections, run_eval

#: our score per method on each set (accuracy %, FactScore % for biographies)
SCORES = {
    "heldout_qa": {"direct": 10, "rag": 68, "crag": 78, "selfrag": 60, "selfcrag": 54, "self_reasoning": 40},
    "heldout_fact": {"direct": 50, "rag": 43, "crag": 41, "selfrag": 58, "selfcrag": 57, "self_reasoning": 61},
    "heldout_mc": {"direct": 25, "rag": 31, "crag": 30, "selfrag": 27, "selfcrag": 28, "self_reasoning": 26},
    "heldout_longform": {"direct": 20, "rag": 30, "crag": 31, "selfrag": 33, "selfcrag": 35, "self_reasoning": 29},
    "heldout_noret": {"direct": 22, "rag": 3, "crag": 5, "selfrag": 22, "selfcrag": 21, "self_reasoning": 4},
}
#: the variant each method's row comes from (Self-RAG's is its configured mode)
VARIANTS = {"direct": "direct", "rag": "rag", "crag": "crag", "selfrag": "adaptive", "selfcrag": "selfcrag",
            "self_reasoning": "self_reasoning"}


def _summary(set_name: str, score: float, retrieves: bool) -> dict:
    longform = set_name == "heldout_longform"
    return {"n": 200, "accuracy": None if longform else score / 100, "factscore": score / 100 if longform else None,
            "retrieval_frequency": 1.0 if retrieves else 0.0}


def _metrics() -> dict:
    # sets in file-name order and methods in the config's order: the table orders both itself
    per_set = {s: {VARIANTS[m]: _summary(s, v, m != "direct") for m, v in SCORES[s].items()}
               for s in sorted(SCORES)}
    for s in per_set:
        per_set[s]["never"] = _summary(s, 0, False)  # a sweep variant: not a row
    rows = {m: {"variant": VARIANTS[m], "model": "runs/ls_lm/models/smollm2" if m in ("direct", "rag", "crag")
                else f"runs/ls_lm/models/{'self_reasoning' if m == 'self_reasoning' else 'generator'}",
                "generator": "lm" if m in ("direct", "rag", "crag") else None}
            for m in ("self_reasoning", "selfcrag", "selfrag", "crag", "rag", "direct")}
    run = {"date": "2026-11-28T10:00:00+00:00", "cpu": "AMD EPYC, AVX2", "command": "raypipe eval -c configs/results_table.yaml",
           "retriever": "minilm over runs/ls_lm/index (Flat), K = 5", "limit": 200}
    return {"per_set": per_set, "method_rows": rows, "run": run}


def _table(text: str, first_cell: str) -> list[list[str]]:
    """The markdown table whose header starts with `first_cell`, as rows of cells (header included)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_table_lists_each_method_on_each_set_qa_first_with_the_questions_and_the_command():
    text = results_markdown(_metrics())
    assert "Run 2026-11-28 on AMD EPYC, AVX2 with `raypipe eval -c configs/results_table.yaml`" in text
    assert "minilm over runs/ls_lm/index (Flat), K = 5" in text and "first 200 questions" in text
    ours = _table(text, "method")
    assert ours[0] == ["method", "model", "QA", "fact verification", "multiple choice", "biographies",
                       "plain instructions"]
    assert ours[1] == ["questions", "", "200", "200", "200", "200", "200"]
    assert [row[0] for row in ours[2:]] == ["no retrieval", "RAG", "CRAG", "Self-RAG", "Self-CRAG", "Self-Reasoning"]
    selfrag = ours[5]
    assert selfrag == ["Self-RAG", "`runs/ls_lm/models/generator`", "60.0 (100)", "58.0 (100)", "27.0 (100)",
                       "FS 33.0 (100)", "22.0 (100)"]
    assert ours[2][2] == "10.0 (0)"  # no retrieval never retrieves


def test_closed_sets_show_the_majority_baseline_and_mark_a_collapsed_method():
    """An accuracy that is only the always-the-same-answer baseline must read as such in the table."""
    metrics = _metrics()
    for s in ("heldout_fact", "heldout_mc"):
        for variant, summary in metrics["per_set"][s].items():
            collapsed = s == "heldout_fact" and variant == "self_reasoning"
            summary["answers"] = {"top_answer": "true", "top_answer_share": 0.98 if collapsed else 0.5,
                                  "majority_label": "true", "majority_baseline": 0.66 if s == "heldout_fact" else 0.38,
                                  "collapsed": collapsed}
    ours = _table(results_markdown(metrics), "method")
    assert ours[2] == ["always the most frequent gold", "", "-", "66.0", "38.0", "-", "-"]
    by_method = {row[0]: row for row in ours[3:]}
    assert by_method["Self-Reasoning"][3] == "61.0 ! (100)" and by_method["Self-RAG"][3] == "58.0 (100)"
    assert by_method["Self-Reasoning"][4] == "26.0 (100)"


def test_the_papers_rows_follow_each_methods_generator_and_name_their_table():
    text = results_markdown(_metrics())
    papers = _table(text[text.index("## Beside the papers"):], "method")
    assert papers[0] == ["method", "paper row", "QA: PopQA", "fact verification: PubHealth",
                         "multiple choice: ARC-Challenge", "biographies: Bio (FactScore)"]
    by_method = {row[0]: row[1:] for row in papers[1:]}
    # RAG and CRAG with the instruct LM stand beside CRAG's LLaMA2-hf-7b block
    assert by_method["RAG"] == ["CRAG Table 1, RAG on LLaMA2-hf-7b", "50.5", "48.9", "43.4", "44.9"]
    assert by_method["CRAG"] == ["CRAG Table 1, CRAG on LLaMA2-hf-7b", "54.9", "59.5", "53.7", "47.7"]
    assert by_method["Self-Reasoning"] == ["Self-Reasoning Table 1, Self-Reasoning 7B", "54.2", "78.6 (FEVER)",
                                          "-", "-"]
    with_engine = _metrics()
    with_engine["method_rows"]["rag"]["generator"] = "engine"
    engine_text = results_markdown(with_engine)
    rag = {row[0]: row[1:] for row in _table(engine_text[engine_text.index("## Beside"):], "method")}
    assert rag["RAG"] == ["CRAG Table 1, RAG on SelfRAG-LLaMA2-7b", "52.8", "39.0", "53.2", "59.2"]


def test_each_set_shows_both_orderings_and_the_pairs_in_the_papers_order():
    orderings = {row[0]: row[1:] for row in _table(results_markdown(_metrics()), "set")[1:]}
    assert list(orderings) == ["QA", "fact verification", "multiple choice", "biographies"]  # no paper figure
    ours, theirs, pairs = orderings["QA"]
    assert ours == ("CRAG 78.0 > RAG 68.0 > Self-RAG 60.0 > Self-CRAG 54.0 > Self-Reasoning 40.0 > "
                    "no retrieval 10.0")
    assert theirs == ("Self-CRAG 61.8 > CRAG 54.9 = Self-RAG 54.9 > Self-Reasoning 54.2 > RAG 50.5 > "
                      "no retrieval 23.6")
    # 15 pairs, CRAG / Self-RAG tied in the papers: 14; counted by hand, 9 in the papers' order
    assert pairs == "9 of 14"
    # Self-Reasoning has no ARC figure, and its fact figure is on FEVER, not PubHealth: both sets
    # order the other five (10 pairs)
    assert orderings["multiple choice"][2].endswith("of 10") and orderings["fact verification"][2].endswith("of 10")
    assert "Self-Reasoning" not in orderings["fact verification"][1]


def test_one_eval_runs_each_method_on_its_own_generator(tmp_path):
    cfg = load_config(None, ["eval.methods=[selfrag,rag,self_reasoning]",
                             f"eval.generators.self_reasoning={tmp_path / 'sr'}"])
    variants = eval_variants(eval_sections(cfg))
    groups = variants_by_generator(eval_sections(cfg), variants)
    assert {g: sorted({v.method for v in vs}) for g, vs in groups.items()} == {
        cfg.eval.generator: ["rag", "selfrag"], str(tmp_path / "sr"): ["self_reasoning"]}
    rows = method_rows(eval_sections(cfg), variants)
    assert rows["selfrag"] == {"variant": "adaptive", "model": cfg.eval.generator, "generator": None}
    assert rows["rag"] == {"variant": "rag", "model": cfg.instruct_lm, "generator": "lm"}
    assert rows["self_reasoning"]["model"] == str(tmp_path / "sr")


def test_a_missing_per_method_generator_is_a_start_error_naming_its_key(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")  # the Self-RAG generator, as far as the start check looks
    cfg = load_config(None, ["eval.methods=[selfrag,self_reasoning]", f"eval.generator={tmp_path}",
                             f"eval.generators.self_reasoning={tmp_path / 'missing'}"])
    monkeypatch.setattr("raypipe.eval.runner.ensure_ray", lambda *_: pytest.fail("Ray was started"))
    with pytest.raises(ModelError, match=r"^eval.generators.self_reasoning: no model folder at .*missing$"):
        run_eval(cfg)


@pytest.mark.parametrize(("table", "world_config", "trainer"), [
    ("results_table.yaml", "learning_signal.yaml", "self_reasoning.yaml"),
    ("results_table_demo.yaml", "demo.yaml", "self_reasoning_demo.yaml"),
])
def test_a_results_config_runs_every_method_once_on_its_worlds_sets(table, world_config, trainer):
    from pathlib import Path

    from raypipe.methods import REGISTRY
    from raypipe.settings.paths import HELDOUT_SETS

    configs = Path(__file__).resolve().parents[2] / "configs"
    cfg = load_config(configs / table)
    world = load_config(configs / world_config).world
    assert cfg.world == world
    assert sorted(cfg.eval.methods) == sorted(REGISTRY)
    variants = eval_variants(eval_sections(cfg))
    assert len(variants) == len(REGISTRY) and set(method_rows(eval_sections(cfg), variants)) == set(REGISTRY)
    assert sorted(Path(p).name for p in cfg.eval.eval_sets) == sorted([*HELDOUT_SETS, "heldout_longform.jsonl"])
    assert all(Path(p).parent == Path(world.out_dir) / "eval" for p in cfg.eval.eval_sets)
    # Self-Reasoning answers with the model its own config trains
    trained = load_config(configs / trainer).training.self_reasoning.out_dir
    assert cfg.eval.generators == {"self_reasoning": trained}


def test_the_results_header_names_each_methods_k_when_they_differ():
    from raypipe.eval.runner import _k_of

    shared = load_config(None, ["eval.methods=[selfrag,rag]", "retrieval.top_k=4"])
    assert _k_of(eval_sections(shared)) == "K = 4"
    own = load_config(None, ["eval.methods=[selfrag,rag]", "retrieval.top_k=4", "methods.rag.top_k=2"])
    assert _k_of(eval_sections(own)) == "K per method: selfrag 4, rag 2"
