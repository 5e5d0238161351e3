"""Config loading: YAML + --set overrides, and errors that name the key path and the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from raypipe.config import EvalConfig, load_config
from raypipe.errors import ConfigError
from raypipe.settings.loader import parse_override

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_configs_validate():
    demo = load_config(ROOT / "configs" / "demo.yaml")
    paper = load_config(ROOT / "configs" / "paper_7b.yaml")
    assert demo.world.instances == 3000
    # the paper's settings (App. B.1): lr 2e-5, 3 epochs, ZeRO-3, bf16, max length 2048, global batch 128
    gen = paper.training.generator
    assert gen.stages[0].lr == 2e-5 and gen.stages[0].epochs == 3
    assert gen.stages[0].mask == ["prompt", "paragraph"]
    assert (gen.zero_stage, gen.precision, gen.max_length) == (3, "bf16", 2048)
    assert gen.micro_batch_size * gen.grad_accum * gen.num_workers == 128
    assert paper.methods.selfrag.threshold == 0.2 and paper.retrieval.top_k == 5


def test_overrides_are_typed_by_yaml_and_nested():
    cfg = load_config(None, ["world.instances=42", "methods.selfrag.forbid=['[No support / Contradictory]']",
                             "retrieval.index.factory=HNSW32", "eval.limit=null"])
    assert cfg.world.instances == 42
    assert cfg.methods.selfrag.forbid == ["[No support / Contradictory]"]
    assert cfg.retrieval.index.factory == "HNSW32"
    assert cfg.eval.limit is None


def test_override_wins_over_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("world:\n  instances: 10\n  seed: 3\n")
    cfg = load_config(path, ["world.instances=11"])
    assert (cfg.world.instances, cfg.world.seed) == (11, 3)


def test_unknown_key_names_path_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("retrieval:\n  index:\n    factroy: Flat\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value)
    assert "retrieval.index.factroy: unknown key" in str(err.value)


def test_wrong_type_names_path_and_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  critic:\n    num_workers: two\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: training\.critic\.num_workers: .*integer"):
        load_config(path)


def test_out_of_range_value_from_override():
    with pytest.raises(ConfigError, match=r"methods\.selfrag\.threshold"):
        load_config(None, ["methods.selfrag.threshold=1.5"])


@pytest.mark.parametrize("item", ["novalue", "=3"])
def test_malformed_override(item):
    with pytest.raises(ConfigError, match="--set"):
        parse_override(item)


def test_override_into_a_scalar_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="world.instances"):
        load_config(None, ["world.instances.x=1"])
    path = tmp_path / "c.yaml"
    path.write_text("world:\n  instances: 10\n")
    with pytest.raises(ConfigError, match="world.instances is not a section"):
        load_config(path, ["world.instances.x=1"])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "b.yaml"
    bad.write_text("world: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_paths_derive_from_the_run_dir_unless_set():
    cfg = load_config(None, ["run_dir=/tmp/run7", "training.generator.out_dir=/models/g"])
    assert cfg.world.out_dir == "/tmp/run7/world"
    assert cfg.retrieval.index.passages == "/tmp/run7/world/passages"
    assert cfg.augment.critic == cfg.training.critic.out_dir == "/tmp/run7/models/critic"
    assert cfg.training.generator.data == "/tmp/run7/gen_data/data"
    # eval and serving follow the trained generator unless told otherwise
    assert cfg.eval.generator == cfg.serve.generator == "/models/g"
    assert cfg.eval.eval_sets[0] == "/tmp/run7/world/eval/heldout_qa.jsonl"
    own = load_config(None, ["run_dir=/tmp/run7", "serve.generator=/models/other"])
    assert own.serve.generator == "/models/other" and own.eval.generator == "/tmp/run7/models/generator"


def test_default_run_dir_reproduces_every_section_default():
    """The sections' own defaults (used when a section is built alone) equal the derivation rules."""
    from raypipe.config import RaypipeConfig
    from raypipe.settings.paths import DERIVED_PATHS, get_path

    derived = RaypipeConfig()
    # every section built alone (a section added later is covered without editing this test); a
    # top-level path is its field's own default
    fresh = {name: type(value)() if isinstance(value := getattr(derived, name), BaseModel)
             else RaypipeConfig.model_fields[name].default for name in RaypipeConfig.model_fields if name != "run_dir"}
    for key, _ in DERIVED_PATHS:
        section, _, rest = key.partition(".")
        standalone = fresh[section]
        for part in filter(None, rest.split(".")):
            standalone = getattr(standalone, part)
        if standalone is not None:
            assert get_path(derived, key) == standalone, key
    assert derived.eval.eval_sets == EvalConfig().eval_sets


@pytest.mark.parametrize(("old", "new"), [
    ("decode.top_k=3", "retrieval.top_k"), ("augment.top_k=3", "retrieval.top_k"),
    ("decode.mode=never", "methods.selfrag.mode"), ("decode.engine=hf", "engine.kind"),
    ("eval.threshold_sweep=[0.5]", "eval.sweeps.selfrag.threshold"), ("crag.lm=models/lm", "instruct_lm"),
])
def test_a_moved_key_names_its_new_place(tmp_path, old, new):
    key, value = old.split("=")
    section, leaf = key.split(".")
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {leaf}: {value}\n")
    with pytest.raises(ConfigError, match=rf"old\.yaml: {key}: this key moved to {new}"):
        load_config(path)


def test_the_openai_rewriters_endpoint_moved_to_crag_rewriter_and_is_required_by_it(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("methods:\n  selfcrag:\n    rewriter_url: http://lm.local/v1\n")
    with pytest.raises(ConfigError, match=r"methods\.selfcrag\.rewriter_url: this key moved to crag\.rewriter\.url"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"methods\.crag\.rewriter=openai needs crag\.rewriter\.url"):
        load_config(None, ["methods.crag.rewriter=openai"])
    cfg = load_config(None, ["methods.crag.rewriter=openai", "crag.rewriter.url=http://lm.local/v1"])
    assert cfg.crag.rewriter.url == "http://lm.local/v1"


def test_a_set_path_may_name_another_path_key(tmp_path):
    """configs/demo.yaml trains the generator from "{lm_import.out_dir}", so run_dir moves both."""
    cfg = load_config(None, ["run_dir=runs/x", 'training.generator.base_model="{lm_import.out_dir}"'])
    assert cfg.lm_import.out_dir == "runs/x/models/smollm2"
    assert cfg.training.generator.base_model == "runs/x/models/smollm2"
    assert cfg.training.critic.base_model == "runs/x/models/base"
    with pytest.raises(ConfigError, match=r"training.generator.base_model: cannot expand '\{nope.x\}'"):
        load_config(None, ['training.generator.base_model="{nope.x}"'])


def test_a_moved_key_from_set_blames_the_set_not_the_file(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("world:\n  instances: 10\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["decode.top_k=3"])
    assert str(err.value) == "--set decode.top_k=3: this key moved to retrieval.top_k"


def test_a_file_extends_another_key_by_key(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "a.yaml").write_text("run_dir: runs/a\nretrieval: {top_k: 7, index: {factory: Flat}}\n"
                                              "eval: {methods: [selfrag, rag]}\n")
    (tmp_path / "b.yaml").write_text("extends: base/a.yaml\nretrieval: {index: {nprobe: 3}}\n"
                                     "eval: {methods: [rag]}\n")
    cfg = load_config(tmp_path / "b.yaml", ["retrieval.top_k=2"])
    # mappings merge, lists and scalars replace, --set wins over both files
    assert (cfg.run_dir, cfg.retrieval.index.factory, cfg.retrieval.index.nprobe) == ("runs/a", "Flat", 3)
    assert cfg.eval.methods == ["rag"] and cfg.retrieval.top_k == 2


def test_a_missing_or_circular_parent_names_the_files(tmp_path):
    (tmp_path / "orphan.yaml").write_text("extends: gone.yaml\n")
    with pytest.raises(ConfigError, match=r"gone\.yaml \(extended by .*orphan\.yaml\)"):
        load_config(tmp_path / "orphan.yaml")
    (tmp_path / "x.yaml").write_text("extends: y.yaml\n")
    (tmp_path / "y.yaml").write_text("extends: x.yaml\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "x.yaml")
    (tmp_path / "list.yaml").write_text("extends: [x.yaml]\n")
    with pytest.raises(ConfigError, match="list.yaml: extends must be a file path"):
        load_config(tmp_path / "list.yaml")


#: Self-Reasoning's Table 2 ablations: file -> (trajectory processes, stage names, quality control on)
SR_ABLATIONS = {
    "wo_rap": (["evidence", "analysis"], ["eap", "all_1"], True),
    "wo_eap": (["relevance", "analysis"], ["rap", "all_1"], True),
    "wo_tap": (["relevance", "evidence"], ["rap", "rap_eap", "all_1"], True),
    "wo_gl": (["relevance", "evidence", "analysis"], ["all"], True),
    "wo_qc": (["relevance", "evidence", "analysis"], ["rap", "rap_eap", "all_1"], False),
}


def test_self_reasoning_ablation_configs_change_one_thing_and_write_apart():
    base = load_config(ROOT / "configs" / "self_reasoning.yaml")
    models = {base.training.self_reasoning.out_dir}
    for name, (processes, stages, qc) in SR_ABLATIONS.items():
        cfg = load_config(ROOT / "configs" / "self_reasoning_ablations" / f"{name}.yaml")
        sr = cfg.training.self_reasoning
        assert (cfg.methods.self_reasoning.processes, [s.name for s in sr.stages], cfg.trajectories.qc.enabled) == \
            (processes, stages, qc), name
        # the same world, index, base model and questions as the method's own run
        assert (cfg.world, cfg.retrieval, sr.base_model, cfg.eval.eval_sets) == \
            (base.world, base.retrieval, base.training.self_reasoning.base_model, base.eval.eval_sets), name
        assert cfg.eval.generator == sr.out_dir and sr.out_dir not in models, name
        models.add(sr.out_dir)
        # w/o GL trains on the method's own trajectories; every other ablation writes its own
        assert (sr.data == base.training.self_reasoning.data) == (name == "wo_gl"), name


@pytest.mark.parametrize("processes", [[], ["evidence", "relevance"], ["analysis", "analysis"], ["answer"]])
def test_trajectory_processes_must_be_distinct_and_in_order(processes):
    with pytest.raises(ConfigError, match="methods.self_reasoning.processes"):
        load_config(None, [f"methods.self_reasoning.processes={processes}"])


def test_critic_support_tokens_must_be_is_sup_tokens():
    with pytest.raises(ConfigError, match="trajectories.qc.critic_supported"):
        load_config(None, ['trajectories.qc.critic_supported=["[Fully Supported]"]'])
    cfg = load_config(None, ['trajectories.qc.critic_supported=["[Fully supported]", "[Partially supported]"]'])
    assert cfg.trajectories.qc.critic_supported == ["[Fully supported]", "[Partially supported]"]


def test_self_reasoning_demo_config_compares_on_the_demos_own_questions_and_retriever():
    """Self-Reasoning against Self-RAG is only the paper's Table 1 ordering when both read the same
    world, index and K and Self-RAG is the demo's own generator; each stage-3 stage is one whole epoch,
    so its export is the model after n epochs (the measured curve)."""
    demo = load_config(ROOT / "configs" / "demo.yaml")
    cfg = load_config(ROOT / "configs" / "self_reasoning_demo.yaml")
    assert (cfg.world, cfg.retrieval, cfg.run_dir) == (demo.world, demo.retrieval, demo.run_dir)
    assert cfg.eval.generator == demo.training.generator.out_dir
    assert cfg.eval.generators["self_reasoning"] == cfg.training.self_reasoning.out_dir
    assert {"self_reasoning", "selfrag"} <= set(cfg.eval.methods)
    sets = [Path(s).name for s in cfg.eval.eval_sets]
    assert sets == ["heldout_qa.jsonl", "heldout_fact.jsonl", "heldout_longform.jsonl"]
    assert all(Path(s).parent == Path(demo.world.out_dir) / "eval" for s in cfg.eval.eval_sets)
    sr = cfg.training.self_reasoning
    answer_stages = [s for s in sr.stages if s.mask == ["prompt"]]
    assert len(answer_stages) >= 2 and all(s.epochs == 1 for s in answer_stages)
    # the stages that teach the answer train the whole model (the measured lever), the format stages not
    assert all(s.layers(sr.trainable_layers) is None for s in answer_stages)
    assert all(s.layers(sr.trainable_layers) is not None for s in sr.stages if s not in answer_stages)
    assert cfg.eval.out_dir != demo.eval.out_dir
