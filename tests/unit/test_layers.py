"""The package layers of ARCHITECTURE.md §2 hold: imports run only downward, and no method imports Ray.

Read from the source with `ast`, so a new upward import fails here before it closes a cycle at run
time. Imports under `if TYPE_CHECKING:` are annotations only (a job entry typed with the composed
`RaypipeConfig`) and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "raypipe"

#: top-level module or package -> layer; a lower layer never imports a higher one
LAYERS: dict[str, int] = {
    **dict.fromkeys(["errors", "tokens", "prompts", "trajectory_format", "settings", "logs", "http_retry", "disk"], 0),
    **dict.fromkeys(["data", "models", "inference", "retrieval", "clients", "runtime", "reaper", "heap",
                     "provenance"], 1),
    "methods": 2,
    "tools": 3,
    **dict.fromkeys(["config", "config_docs", "critic", "augment", "training", "evaluator_training", "trajectories",
                     "eval", "serving", "readme_results"], 4),
    **dict.fromkeys(["jobs", "cli", "demo"], 5),
}

#: layer 4 in its own order, lowest first: a package imports only those before it (ARCHITECTURE.md §2).
#: config.py holds the eval, serve and method sections beside the composed config; the training
#: harness serves the offline jobs' libraries; eval scores what trajectories' quality control reads;
#: serving reuses eval's metrics; the README's figures and the config manual read everything below them.
LAYER_4_ORDER = ["config", "training", "critic", "augment", "evaluator_training", "eval", "trajectories", "serving",
                 "readme_results", "config_docs"]


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def _runtime_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(imported module, line) for every import that runs, i.e. not under `if TYPE_CHECKING:`."""
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
                   for stmt in node.body for n in ast.walk(stmt)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = ([f"raypipe.{a.name}" for a in node.names] if node.module == "raypipe" else [node.module])
            found += [(n, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return found


def _layer(module: str) -> int:
    top = module.split(".")[1]
    if top not in LAYERS:
        pytest.fail(f"{module}: raypipe.{top} has no layer; add it to LAYERS and ARCHITECTURE.md §2")
    return LAYERS[top]


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_imports_run_only_downward():
    upward = []
    for path in _sources():
        me = _module_name(path)
        for target, line in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target.startswith("raypipe.") and _layer(target) > _layer(me):
                upward.append(f"{me} (layer {_layer(me)}) imports {target} (layer {_layer(target)}), line {line}")
    assert not upward, "\n".join(upward)


def _out_of_order(imports: list[tuple[str, str, int]]) -> list[str]:
    """Of (importing module, imported module, line), those where a layer-4 package imports one after
    it in LAYER_4_ORDER."""
    rank = {name: i for i, name in enumerate(LAYER_4_ORDER)}
    found = []
    for me, target, line in imports:
        mine, theirs = me.split(".")[1], target.split(".")[1]
        if mine in rank and theirs in rank and rank[theirs] > rank[mine]:
            found.append(f"{me} imports {target}, line {line}: {theirs} is above {mine} in LAYER_4_ORDER")
    return found


def _all_imports() -> list[tuple[str, str, int]]:
    return [(me, target, line) for path in _sources() if (me := _module_name(path)).count(".")
            for target, line in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
            if target.startswith("raypipe.")]


def test_layer_4_runs_in_one_order():
    assert sorted(LAYER_4_ORDER) == sorted(k for k, v in LAYERS.items() if v == 4)
    assert not (broken := _out_of_order(_all_imports())), "\n".join(broken)


def test_the_order_check_sees_a_planted_back_import():
    planted = [("raypipe.training.trainer", "raypipe.critic.encoder_train", 9),
               ("raypipe.critic.encoder_train", "raypipe.training.classifier", 3)]
    assert _out_of_order(planted) == ["raypipe.training.trainer imports raypipe.critic.encoder_train, line 9: "
                                      "critic is above training in LAYER_4_ORDER"]


#: layer-4 packages that serve a job: they take sections, as layers 0-3 do
TAKE_SECTIONS = {"training", "critic", "augment", "evaluator_training", "eval", "trajectories", "serving"}


def test_below_the_jobs_only_sections_are_taken():
    """Layers 0-3 and the libraries in TAKE_SECTIONS take their own sections: not even an annotation
    names `RaypipeConfig`, so a job entry taking the whole config cannot creep back into them."""
    naming = []
    for path in _sources():
        me = _module_name(path)
        if _layer(me) <= 3 or me.split(".")[1] in TAKE_SECTIONS:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            naming += [f"{me} line {node.lineno}" for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.module == "raypipe.config"
                       and {"RaypipeConfig", "load_config"} & {a.name for a in node.names}]
    assert not naming, naming


def _module_circles(imports: list[tuple[str, str, int]]) -> list[list[str]]:
    """The import circles among raypipe's modules (strongly connected components of more than one),
    a module's import of its own package's `__init__` left out."""
    graph: dict[str, set[str]] = {}
    for me, target, _ in imports:
        if target != me and not me.startswith(target + "."):
            graph.setdefault(me, set()).add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _module_imports() -> list[tuple[str, str, int]]:
    """(module, imported raypipe module, line) for every import that runs, `from pkg import module`
    counted as an import of that module."""
    known = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    found = _all_imports()
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("raypipe"):
                found += [(_module_name(path), f"{node.module}.{a.name}", node.lineno) for a in node.names
                          if f"{node.module}.{a.name}" in known]
    return [(me, target, line) for me, target, line in found if target in known]


def test_no_module_imports_in_a_circle():
    assert not (circles := _module_circles(_module_imports())), circles


def test_the_circle_check_sees_a_planted_circle():
    planted = [("raypipe.critic.predict", "raypipe.critic.encoder", 1),
               ("raypipe.critic.encoder", "raypipe.critic.predict", 2), ("raypipe.critic.encoder", "raypipe.prompts", 3)]
    assert _module_circles(planted) == [["raypipe.critic.encoder", "raypipe.critic.predict"]]


def test_methods_import_no_ray():
    offenders = [f"{_module_name(p)} line {line}" for p in (PACKAGE / "methods").rglob("*.py")
                 for target, line in _runtime_imports(ast.parse(p.read_text(encoding="utf-8")))
                 if target == "ray" or target.startswith("ray.")]
    assert not offenders, offenders


def test_checker_sees_an_upward_import():
    """The walk must find a plain import and skip a TYPE_CHECKING one (else the tests above prove nothing)."""
    tree = ast.parse("from typing import TYPE_CHECKING\nfrom raypipe.eval import runner\n"
                     "if TYPE_CHECKING:\n    from raypipe.config import RaypipeConfig\n")
    assert _runtime_imports(tree) == [("typing", 1), ("raypipe.eval", 2)]


#: a method package that builds on others (Self-CRAG is CRAG's corrector around Self-RAG's beam, CRAG §5)
COMPOSES: dict[str, set[str]] = {"selfcrag": {"selfrag", "crag"}}
#: modules that name every method by design: the registry and the settings union
GATHERERS = {"raypipe.methods", "raypipe.methods.settings"}


def _method_package(module: str) -> str | None:
    """`crag` for `raypipe.methods.crag.knowledge`; None for the shared modules (base, closed_set, ...)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["raypipe", "methods"] or not (PACKAGE / "methods" / parts[2]).is_dir():
        return None
    return parts[2]


def test_a_method_imports_another_only_where_it_composes_it():
    """A helper one method shares with another belongs in a shared module, not in the method that wrote
    it first: RAG reading CRAG's package for a prompt helper made RAG depend on CRAG's tools."""
    crossings = []
    for path in sorted((PACKAGE / "methods").rglob("*.py")):
        me = _module_name(path)
        if me in GATHERERS:
            continue
        mine = _method_package(me)
        for target, line in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            theirs = _method_package(target)
            if theirs and theirs != mine and theirs not in COMPOSES.get(mine or "", set()):
                crossings.append(f"{me} imports {target}, line {line}")
    assert not crossings, "\n".join(crossings)
