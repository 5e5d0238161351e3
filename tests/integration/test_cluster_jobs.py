"""`ray job submit` against a real head: the synth -> index -> augment chain as a user runs it.

A head started with `ray start --head` on 127.0.0.1 (its own temp dir and ports, token auth off as in
the Makefile) takes each job with `--working-dir .` from the repository root; the test waits for each
to succeed, checks its outputs and its logs, checks what Ray uploaded (the package Ray unpacked on the
head: code and configs, no venv, no run folders), and checks that a job with a bad config ends FAILED
with the error in its logs instead of hanging. The critic is the session's tiny model: what is tested
is the submission path, not label quality.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ray.job_submission import JobSubmissionClient

from tests.cluster_nodes import ROOT, SECTION_DEFAULTS, base_env, start_local_head

pytestmark = pytest.mark.slow

JOB_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    work = tmp_path_factory.mktemp("head")
    node, dashboard = start_local_head(work, num_cpus=2)
    try:
        yield node, dashboard
    finally:
        node.stop()


def _ray(*args: str, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "ray"), *args], cwd=ROOT, env=base_env(),
                          capture_output=True, text=True, timeout=timeout)


def _submit(dashboard: str, entrypoint: list[str]) -> tuple[str, str, str]:
    """Submit from the repository root and follow the job to its end; returns (id, status, logs)."""
    job_id = f"raypipe-test-{uuid.uuid4().hex[:8]}"
    submitted = _ray("job", "submit", "--address", dashboard, "--working-dir", ".", "--submission-id", job_id,
                     "--", *entrypoint)
    client = JobSubmissionClient(dashboard)
    status = client.get_job_status(job_id)
    assert status.is_terminal(), f"`ray job submit` returned with {job_id} still {status}: {submitted.stderr[-2000:]}"
    return job_id, str(status.value), client.get_job_logs(job_id)


def _uploaded_package(node) -> Path:
    unpacked = sorted(p for p in node.temp_dir.glob("session_*/runtime_resources/working_dir_files/_ray_pkg_*")
                      if p.is_dir())  # not the `.zip.lock` files beside the unpacked folders
    assert unpacked, "Ray unpacked no working_dir package on the head"
    return unpacked[-1]


def test_synth_index_augment_chain_as_submitted_jobs(head, tiny_model_dir, tmp_path):
    node, dashboard = head
    world, index, gen = tmp_path / "world", tmp_path / "index", tmp_path / "gen"
    common = [SECTION_DEFAULTS, f"--set=retrieval.index.passages={world / 'passages'}",
              f"--set=retrieval.index.out_dir={index}"]

    _, status, logs = _submit(dashboard, ["python", "jobs/synth.py", SECTION_DEFAULTS, f"--set=world.out_dir={world}",
                                          "--set=world.instances=48", "--set=world.eval_instances=10",
                                          "--set=world.shard_size=16", "--set=world.seed=3"])
    assert status == "SUCCEEDED", logs[-3000:]
    instances = pq.read_table(world / "instances")
    assert instances.num_rows == 48
    assert (world / "_SUCCESS").exists()

    _, status, logs = _submit(dashboard, ["python", "jobs/build_index.py", *common])
    assert status == "SUCCEEDED", logs[-3000:]
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["count"] == pq.read_table(world / "passages").num_rows

    _, status, logs = _submit(dashboard, ["python", "jobs/augment.py", *common,
                                          f"--set=augment.instances={world / 'instances'}",
                                          f"--set=augment.critic={tiny_model_dir}", "--set=augment.critic_engine=hf", f"--set=augment.out_dir={gen}",
                                          "--set=augment.batch_size=8", "--set=augment.sampling.drop_no_retrieval=0",
                                          "--set=augment.sampling.upsample_irrelevant_qa=0"])
    assert status == "SUCCEEDED", logs[-3000:]
    out = pq.read_table(gen / "data")
    stats = json.loads((gen / "stats.json").read_text())
    assert stats["instances_processed"] == 48
    assert sorted(out.column("id").to_pylist()) == sorted(instances.column("id").to_pylist())
    assert "instances_processed" in logs and "48" in logs  # the job's summary table reached the job log

    # what Ray uploaded from the repository root: the code and configs, not the venv or run folders
    package = _uploaded_package(node)
    assert (package / "jobs" / "augment.py").is_file() and (package / "configs" / "demo.yaml").is_file()
    assert (package / "raypipe" / "cli.py").is_file()
    local_state = [d for d in (".venv", "runs", ".cache", "benchmarks/results") if (ROOT / d).exists()]
    assert local_state, "nothing local to exclude here: the check below would prove nothing"
    for folder in local_state:
        assert not (package / folder).exists(), f"{folder} was uploaded with the working dir"


def test_a_job_with_a_bad_config_ends_failed_with_the_error_in_its_logs(head):
    _, dashboard = head
    _, status, logs = _submit(dashboard, ["python", "jobs/augment.py", "--set=augment.workers=0"])
    assert status == "FAILED"
    assert "augment.workers" in logs
