"""The eval job on vLLM: its Ray Data actor holds a vLLM engine in process (as `make demo` runs it) and
writes the predictions the HF engine writes, in fp32, for Self-RAG's variants and plain RAG."""

from __future__ import annotations

import json

import pytest

from raypipe.config import RaypipeConfig
from raypipe.jobs.eval import run_eval

pytestmark = pytest.mark.slow


def _run(kind: str, out, world_dir, tiny_model_dir, keyword_searcher) -> dict[str, list[dict]]:
    sets = [str(world_dir / "eval" / f"heldout_{s}.jsonl") for s in ("qa", "mc")]
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 2},
        "engine": {"kind": kind, "precision": "fp32"},
        "instruct_lm": str(tiny_model_dir),
        "methods": {"selfrag": {"max_new_tokens": 8, "max_depth": 2, "beam_width": 2},
                    "rag": {"max_new_tokens": 8}},
        "eval": {"generator": str(tiny_model_dir), "eval_sets": sets, "out_dir": str(out), "limit": 4,
                 "methods": ["selfrag", "rag"], "sweeps": {"selfrag": {"threshold": [0.5]}}, "batch_size": 4},
    })
    run_eval(cfg, searcher_factory=keyword_searcher)
    return {f.stem: [json.loads(line) for line in f.read_text().splitlines()]
            for f in sorted((out / "predictions").glob("*.jsonl"))}


def test_eval_on_vllm_writes_what_eval_on_hf_writes(ray_cluster, world_dir, tiny_model_dir, keyword_searcher, tmp_path):
    on_hf = _run("hf", tmp_path / "hf", world_dir, tiny_model_dir, keyword_searcher)
    on_vllm = _run("vllm", tmp_path / "vllm", world_dir, tiny_model_dir, keyword_searcher)
    assert set(on_vllm) == set(on_hf) and {"adaptive", "always", "rag"} <= set(on_hf)
    for variant, rows in on_hf.items():
        assert len(on_vllm[variant]) == len(rows) == 8
        for got, want in zip(on_vllm[variant], rows, strict=True):
            assert (got["id"], got["text"], got.get("option")) == (want["id"], want["text"], want.get("option"))
            assert got["n_retrievals"] == want["n_retrievals"]
