"""faiss helpers, the memory-mapped passage store and the manifest check (no encoder, no Ray)."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pytest

from raypipe.errors import IndexMismatchError
from raypipe.retrieval import index as fi
from raypipe.retrieval.manifest import Manifest
from raypipe.retrieval.store import PassageStore, write_passages


def _vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_exact_search_equals_numpy(metric):
    base, queries = _vectors(500), _vectors(20, seed=1)
    index = fi.make_index("Flat", 32, metric)
    index.add(base)
    scores, positions = fi.search(index, queries, 5, metric)
    if metric == "ip":
        reference = queries @ base.T
    else:
        reference = -((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1)
    expected = np.argsort(-reference, axis=1)[:, :5]
    np.testing.assert_array_equal(positions, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(reference, expected, axis=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF8,Flat"])
@pytest.mark.parametrize("mmap", [False, True])
def test_write_read_round_trip_gives_identical_results(tmp_path, factory, mmap):
    base, queries = _vectors(400), _vectors(10, seed=2)
    index = fi.train(fi.make_index(factory, 32, "ip"), base, use_gpu=False)
    index.add(base)
    fi.set_search_params(index, nprobe=2, ef_search=16, k_factor=1)
    before = fi.search(index, queries, 7, "ip")
    fi.write(index, tmp_path / "index.faiss")
    loaded = fi.read(tmp_path / "index.faiss", mmap=mmap)
    fi.set_search_params(loaded, nprobe=2, ef_search=16, k_factor=1)
    after = fi.search(loaded, queries, 7, "ip")
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[0], after[0])


def test_search_params_reach_nested_indexes():
    ivf_hnsw = fi.make_index("IVF64_HNSW8,PQ4", 32, "ip")
    refine = fi.make_index("IVF16,PQ4,RFlat", 32, "ip")
    hnsw = fi.make_index("HNSW8", 32, "ip")
    for index in (ivf_hnsw, refine, hnsw):
        fi.set_search_params(index, nprobe=9, ef_search=77, k_factor=3)
    assert faiss.extract_index_ivf(ivf_hnsw).nprobe == 9
    assert faiss.downcast_index(faiss.extract_index_ivf(ivf_hnsw).quantizer).hnsw.efSearch == 77
    assert faiss.extract_index_ivf(refine).nprobe == 9
    assert faiss.downcast_index(refine).k_factor == 3
    assert faiss.downcast_index(hnsw).hnsw.efSearch == 77
    fi.set_search_params(refine, nprobe=500, ef_search=1, k_factor=1)
    assert faiss.extract_index_ivf(refine).nprobe == 16  # capped at nlist


def test_ef_construction_reaches_every_hnsw_graph():
    flat_hnsw, ivf_hnsw = fi.make_index("HNSW8", 32, "ip"), fi.make_index("IVF64_HNSW8,Flat", 32, "ip")
    for index in (flat_hnsw, ivf_hnsw):
        fi.set_build_params(index, ef_construction=91)
    assert faiss.downcast_index(flat_hnsw).hnsw.efConstruction == 91
    assert faiss.downcast_index(faiss.extract_index_ivf(ivf_hnsw).quantizer).hnsw.efConstruction == 91


def test_only_bare_ivf_indexes_merge_shard_wise():
    assert fi.is_ivf(fi.make_index("IVF8,PQ4", 32, "ip"))
    assert not fi.is_ivf(fi.make_index("IVF8,PQ4,RFlat", 32, "ip"))
    assert not fi.is_ivf(fi.make_index("HNSW8", 32, "ip"))


def test_bad_factory_is_named():
    with pytest.raises(ValueError, match="NotAnIndex"):
        fi.make_index("NotAnIndex", 32, "ip")


def test_no_gpu_on_this_machine_keeps_the_index_on_cpu():
    index = fi.make_index("Flat", 8, "ip")
    assert not fi.gpu_available()
    assert fi.train(index, _vectors(10, dim=8), use_gpu=True) is index


def test_passage_store_returns_rows_by_position(tmp_path: Path):
    rows = [{"id": f"p{i}", "title": f"T{i}", "text": f"text {i}"} for i in range(7)]
    parts = [pa.Table.from_pylist(rows[:3]), pa.Table.from_pylist(rows[3:])]
    assert write_passages(parts, tmp_path / "passages.arrow") == 7
    store = PassageStore(tmp_path / "passages.arrow")
    assert len(store) == 7
    assert store.lookup(np.array([6, 0, 3, 3])) == [rows[6], rows[0], rows[3], rows[3]]


def _manifest() -> Manifest:
    return Manifest(encoder="all-MiniLM-L6-v2:mean", dim=384, normalize=True, metric="ip", factory="Flat",
                    count=3)


def test_manifest_round_trip_and_matching_check(tmp_path: Path):
    _manifest().write(tmp_path)
    loaded = Manifest.read(tmp_path)
    assert loaded == _manifest()
    loaded.check(encoder="all-MiniLM-L6-v2:mean", dim=384, normalize=True, metric="ip", where=tmp_path)


def test_manifest_mismatch_names_every_differing_field(tmp_path: Path):
    with pytest.raises(IndexMismatchError) as err:
        _manifest().check(encoder="contriever:mean", dim=768, normalize=True, metric="ip", where=tmp_path)
    message = str(err.value)
    assert "encoder" in message and "contriever:mean" in message and "dim" in message
    assert "normalize:" not in message and "metric:" not in message


def test_missing_manifest_is_a_mismatch_error(tmp_path: Path):
    with pytest.raises(IndexMismatchError, match="no manifest.json"):
        Manifest.read(tmp_path)
