"""`raypipe config show`: the resolved config as YAML that loads back to the config, with each value's
source (default, a derived path's rule, the file that set it through `extends`, or the --set)."""

from __future__ import annotations

import re

import yaml

from raypipe import cli
from raypipe.config import load_config
from raypipe.settings.sources import DEFAULT, source_of, value_sources


def _write(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("run_dir: runs/base\nworld:\n  instances: 10\n  seed: 4\n")
    top = tmp_path / "sub" / "top.yaml"
    top.parent.mkdir()
    top.write_text("extends: ../base.yaml\nworld:\n  seed: 5\nmethods:\n  selfrag:\n    max_depth: 2\n"
                   "eval:\n  methods: [selfrag, rag]\n")
    return base, top


def _sources(text: str) -> dict[str, tuple[str, str]]:
    """`a.b.c` -> (value text, source) of every value line of the shown YAML."""
    out, stack = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        key, _, rest = line.strip().partition(":")
        stack[depth:] = [key]
        if rest.strip():
            value, _, source = rest.partition("  # ")
            out[".".join(stack)] = (value.strip(), source.strip())
    return out


def test_config_show_names_each_values_source(tmp_path, capsys):
    base, top = _write(tmp_path)
    assert cli.main(["config", "show", "-c", str(top), "--set", "eval.limit=7"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"# config: {top} + 1 override(s); run_dir runs/base"
    shown = _sources(text)
    assert shown["run_dir"] == ("runs/base", f"file {base}")
    assert shown["world.instances"] == ("10", f"file {base}")
    assert shown["world.seed"] == ("5", f"file {top}")  # the extending file wins
    assert shown["methods.selfrag.max_depth"] == ("2", f"file {top}")
    assert shown["methods.selfrag.beam_width"] == ("2", DEFAULT)
    assert shown["eval.methods"] == ("[selfrag, rag]", f"file {top}")
    assert shown["eval.limit"] == ("7", "--set eval.limit=7")
    assert shown["eval.out_dir"] == ("runs/base/eval", "default ({run}/eval)")
    assert shown["serve.generator"] == ("runs/base/models/generator", "default ({training.generator.out_dir})")


def test_shown_yaml_loads_back_to_the_resolved_config(tmp_path, capsys):
    _, top = _write(tmp_path)
    overrides = ["serve.methods=[selfrag, crag]", "retrieval.index.factory=HNSW32", "label.teacher.kind=oracle"]
    cli.main(["config", "show", "-c", str(top), *(a for o in overrides for a in ("--set", o))])
    text = capsys.readouterr().out
    assert yaml.safe_load(text) == load_config(top, overrides).model_dump(mode="json")
    values = [line for line in text.splitlines()[1:] if not line.endswith(":")]  # not the section headers
    assert len(values) > 300 and all(re.search(r"\S +# (default|file |--set )", line) for line in values)


def test_bare_config_show_is_the_demo_config(capsys):
    cli.main(["config", "show"])
    shown = _sources(capsys.readouterr().out)
    assert shown["retrieval.top_k"][0] == "3" and shown["retrieval.top_k"][1].endswith("raypipe/demo.yaml")


def test_a_set_of_a_whole_mapping_replaces_it_and_its_unset_keys_are_defaults(tmp_path):
    _, top = _write(tmp_path)
    item = "methods.selfrag={threshold: 0.3}"
    cfg = load_config(top, [item])
    tree = value_sources(top, [item])
    # the file's max_depth 2 is gone with the mapping: the loader and the sources agree
    assert cfg.methods.selfrag.max_depth == 3
    assert source_of(tree, ("methods", "selfrag", "max_depth")) == DEFAULT
    assert source_of(tree, ("methods", "selfrag", "threshold")) == f"--set {item}"


def test_a_set_list_or_scalar_covers_the_keys_under_it(tmp_path):
    _, top = _write(tmp_path)
    tree = value_sources(top, ["eval.methods=[crag]"])
    assert source_of(tree, ("eval", "methods")) == "--set eval.methods=[crag]"
    assert source_of(tree, ("eval", "methods", "0")) == "--set eval.methods=[crag]"
    assert source_of(tree, ("eval", "limit")) == DEFAULT
    assert source_of(value_sources(None), ("world", "seed")) == DEFAULT
