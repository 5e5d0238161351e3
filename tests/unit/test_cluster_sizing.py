"""The cluster files give configs/paper_7b.yaml the GPU its sizing assumes.

The paper config names the GPU type its training workers need (`training.*.accelerator_type`); the
capacity plan (docs/cluster.md) counts 16 bytes of ZeRO-3 model state per parameter over the workers.
Every GPU node the launcher and the KubeRay manifests ask for must be that GPU, and declare it as Ray
resource when Ray cannot detect it (Ray names an A100 of either size `A100`), so the workers can be
placed at all. The facts about instance types and GPU labels are the vendors' (listed here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from raypipe.config import RaypipeConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "cluster" / "ray-cluster.yaml"
KUBERAY = sorted((ROOT / "cluster" / "kuberay").glob("*.yaml"))

#: memory (GB) of each GPU, by the accelerator type Ray schedules on
GPU_MEMORY_GB = {"A100-80G": 80, "A100-40G": 40, "A10G": 24, "L4": 24, "H100": 80}
#: EC2 GPU instance types: (GPU, GPUs per node)
EC2_GPUS = {"p4de.24xlarge": ("A100-80G", 8), "p4d.24xlarge": ("A100-40G", 8), "g5.12xlarge": ("A10G", 4),
            "g6.12xlarge": ("L4", 4), "p5.48xlarge": ("H100", 8)}
#: the NVIDIA GPU Operator's `nvidia.com/gpu.product` node label -> GPU
GPU_PRODUCTS = {"NVIDIA-A100-SXM4-80GB": "A100-80G", "NVIDIA-A100-SXM4-40GB": "A100-40G", "NVIDIA-A10G": "A10G"}
#: Llama-2-7B's parameters, as the capacity plan counts them
PARAMS = 7e9
#: ZeRO-3 model state per parameter in bf16 mixed precision: bf16 weights and gradients (2 + 2), the
#: fp32 master weights and Adam's two moments (4 + 4 + 4)
ZERO3_BYTES_PER_PARAM = 16


@pytest.fixture(scope="module")
def paper() -> RaypipeConfig:
    return load_config(ROOT / "configs" / "paper_7b.yaml")


def _gpu(paper: RaypipeConfig) -> str:
    types = {paper.training.critic.accelerator_type, paper.training.generator.accelerator_type}
    assert len(types) == 1 and None not in types, f"the paper's 7B runs name one GPU type, got {types}"
    return types.pop()


def _declared(resources: dict[str, Any], gpu: str) -> bool:
    return resources.get(f"accelerator_type:{gpu}", 0) > 0


def test_the_paper_config_names_a_gpu_whose_memory_holds_its_zero3_state(paper):
    gpu = _gpu(paper)
    workers = paper.training.generator.num_workers
    assert paper.training.generator.zero_stage == 3 and paper.training.generator.precision == "bf16"
    per_gpu_gb = PARAMS * ZERO3_BYTES_PER_PARAM / workers / 1e9
    # the model state leaves at least half the GPU for activations (2,048 tokens x micro-batch 8)
    assert per_gpu_gb <= GPU_MEMORY_GB[gpu] / 2, (gpu, per_gpu_gb)
    plan = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    assert f"{per_gpu_gb:.0f} GB per GPU" in plan and "A100 80 GB" in plan


def test_the_launchers_gpu_nodes_are_that_gpu_and_declare_it(paper):
    gpu = _gpu(paper)
    nodes = yaml.safe_load(LAUNCHER.read_text())["available_node_types"]
    gpu_nodes = {name: n for name, n in nodes.items() if n["node_config"]["InstanceType"].startswith(("p", "g"))}
    assert gpu_nodes, "cluster/ray-cluster.yaml has no GPU node type"
    for name, node in gpu_nodes.items():
        instance = node["node_config"]["InstanceType"]
        assert instance in EC2_GPUS, f"{name}: {instance} is not a known GPU instance type"
        node_gpu, per_node = EC2_GPUS[instance]
        assert node_gpu == gpu, f"{name}: {instance} has {node_gpu} GPUs, the paper config is sized for {gpu}"
        assert _declared(node.get("resources", {}), gpu), f"{name}: resources must declare accelerator_type:{gpu}"
        # a training run fits one node, so ZeRO-3's per-layer gathers stay on the node's NVLink
        assert paper.training.generator.num_workers <= per_node


def _worker_groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    cluster = {"RayCluster": spec, "RayJob": spec.get("rayClusterSpec"),
               "RayService": spec.get("rayClusterConfig")}.get(doc["kind"])
    return (cluster or {}).get("workerGroupSpecs", [])


def _gpus(group: dict[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
               for c in group["template"]["spec"]["containers"])


def test_every_kuberay_gpu_group_runs_on_that_gpu_and_training_clusters_declare_it(paper):
    gpu = _gpu(paper)
    seen = 0
    for path in KUBERAY:
        for doc in yaml.safe_load_all(path.read_text()):
            for group in (g for g in _worker_groups(doc) if _gpus(g) > 0):
                seen += 1
                where = f"{path.name} group {group['groupName']}"
                product = group["template"]["spec"].get("nodeSelector", {}).get("nvidia.com/gpu.product")
                assert GPU_PRODUCTS.get(product) == gpu, f"{where}: nodeSelector {product!r}, expected {gpu}"
                if doc["kind"] != "RayService":  # the clusters training jobs are submitted to
                    # rayStartParams values are strings; `resources` holds a JSON string of JSON
                    resources = json.loads(json.loads(group["rayStartParams"].get("resources", '"{}"')))
                    assert _declared(resources, gpu), f"{where}: rayStartParams.resources must declare {gpu}"
    assert seen >= 3
