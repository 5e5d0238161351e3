"""Where every artifact lives: the run folder (`run_dir`) and the paths that derive from it.

A path is spelled once, as a rule in `DERIVED_PATHS`: the whole config fills every path it does not
set from its `run_dir` (`derive_paths`), and a section built alone gets the same rule applied to
`DEFAULT_RUN_DIR` as its field default (`default_path`), so the two can never disagree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

#: where every artifact lives unless a path is set: the default of `run_dir`
DEFAULT_RUN_DIR = "runs/demo"

#: Artifact paths and where their defaults come from, in dependency order: a path relative to
#: `run_dir`, or another path key (so that training, eval and serving point at the same model unless
#: told otherwise). A key set in the file or by --set keeps its value; the sections' own defaults are
#: these rules applied to DEFAULT_RUN_DIR (`default_path`).
DERIVED_PATHS: tuple[tuple[str, str], ...] = (
    ("world.out_dir", "{run}/world"),
    ("tiny_model.out_dir", "{run}/models/base"),
    ("lm_import.out_dir", "{run}/models/smollm2"),
    ("retrieval.index.passages", "{world.out_dir}/passages"),
    ("retrieval.index.out_dir", "{run}/index"),
    ("retrieval.fallback.index_dir", "{run}/web_index"),
    ("label.instances", "{world.out_dir}/instances"),
    ("label.passages", "{world.out_dir}/passages"),
    ("label.out_dir", "{run}/critic_data"),
    ("training.critic.base_model", "{tiny_model.out_dir}"),
    ("training.critic.data", "{label.out_dir}/train"),
    ("training.critic.out_dir", "{run}/models/critic"),
    ("augment.instances", "{world.out_dir}/instances"),
    ("augment.critic", "{training.critic.out_dir}"),
    ("augment.out_dir", "{run}/gen_data"),
    ("training.generator.base_model", "{tiny_model.out_dir}"),
    ("training.generator.data", "{augment.out_dir}/data"),
    ("training.generator.out_dir", "{run}/models/generator"),
    ("trajectories.instances", "{world.out_dir}/instances"),
    ("trajectories.out_dir", "{run}/trajectories"),
    ("trajectories.qc.critic", "{training.critic.out_dir}"),
    ("training.self_reasoning.base_model", "{lm_import.out_dir}"),
    ("training.self_reasoning.data", "{trajectories.out_dir}/train"),
    ("training.self_reasoning.out_dir", "{run}/models/self_reasoning"),
    ("eval.generator", "{training.generator.out_dir}"),
    ("eval.out_dir", "{run}/eval"),
    ("serve.generator", "{training.generator.out_dir}"),
    ("instruct_lm", "{lm_import.out_dir}"),
    ("crag.train.data_dir", "{run}/evaluator_data"),
    ("crag.train.out_dir", "{run}/models/evaluator"),
    ("crag.evaluator.path", "{crag.train.out_dir}"),
)

#: the eval sets a world writes (raypipe.data.world), the default of `eval.eval_sets`
HELDOUT_SETS = ("heldout_qa.jsonl", "heldout_fact.jsonl", "heldout_mc.jsonl", "heldout_noret.jsonl")


_RULES = dict(DERIVED_PATHS)


def eval_set_paths(world_dir: str) -> list[str]:
    """The eval sets a world written to `world_dir` holds: the default of `eval.eval_sets`."""
    return [f"{world_dir}/eval/{name}" for name in HELDOUT_SETS]


def default_path(key: str) -> str:
    """`key`'s rule applied to DEFAULT_RUN_DIR: the field's default when its section is built alone."""
    return _expand(_RULES[key], DEFAULT_RUN_DIR, _DefaultPaths())


def derive_paths(root: BaseModel) -> None:
    """Fill every path of DERIVED_PATHS that `root` does not set from its `run_dir`, in rule order (a
    rule may name an earlier key), and expand a set path that names `{run}` or another path key, e.g.
    "{lm_import.out_dir}". A derived path stays out of `model_fields_set`: it is still "not set"."""
    run = root.run_dir.rstrip("/") or "."
    for key, rule in DERIVED_PATHS:
        if not _is_set(root, key):
            _assign(root, key, _expand(rule, run, root))
        elif "{" in (value := get_path(root, key)):
            try:
                _assign(root, key, _expand(value, run, root))
            except (AttributeError, ValueError, IndexError) as exc:
                raise ValueError(f"{key}: cannot expand {value!r}: {exc}") from None
    if not _is_set(root, "eval.eval_sets"):
        _assign(root, "eval.eval_sets", eval_set_paths(get_path(root, "world.out_dir")))


def get_path(root: Any, dotted: str) -> Any:
    """The value at `a.b.c` of a config."""
    node: Any = root
    for key in dotted.split("."):
        node = getattr(node, key)
    return node


def _is_set(root: BaseModel, dotted: str) -> bool:
    *parents, leaf = dotted.split(".")
    node: Any = root
    for key in parents:
        if key not in node.model_fields_set:
            return False
        node = getattr(node, key)
    return leaf in node.model_fields_set


def _assign(root: BaseModel, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node: Any = root
    for key in parents:
        node = getattr(node, key)
    # object.__setattr__ keeps the key out of model_fields_set: a derived path is still "not set"
    object.__setattr__(node, leaf, value)


def _expand(value: str, run: str, root: Any) -> str:
    """`value` with `{run}` replaced by `run` and every `{a.b.c}` by that path of `root`."""
    return value.replace("{run}", run).format_map(_PathLookup(root))


class _PathLookup(dict):
    """`str.format_map` source that resolves `{a.b.c}` against a config: format looks up `a` here and
    reads `.b.c` as attributes."""

    def __init__(self, root: Any):
        super().__init__()
        self.root = root

    def __missing__(self, key: str) -> Any:
        return getattr(self.root, key)


class _DefaultPaths:
    """The rules' own defaults as a tree of attributes (`.world.out_dir`), the root a rule is expanded
    against when no config exists yet (a section's field defaults)."""

    def __init__(self, prefix: str = ""):
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        key = self._prefix + name
        return default_path(key) if key in _RULES else _DefaultPaths(key + ".")
