"""Index assembly and search without Ray: shards written by the embedding actor's own code, then the
corpus checks, the index, the retriever, the Ray Data stage callable and the local search backend."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raypipe.errors import DataError, IndexMismatchError
from raypipe.models import minilm_path
from raypipe.retrieval import DenseRetriever, build_search_backend
from raypipe.retrieval.build import assemble_index, check_corpus, sample_vectors
from raypipe.retrieval.embed import ShardEmbedder, is_current, read_vectors, shard_path, source_stamp
from raypipe.retrieval.encoders import HFEncoder, passage_texts
from raypipe.settings.retrieval import EncoderConfig, IndexConfig, RetrievalConfig, SearchBackendConfig

CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Hanoi", "Quito", "Perth", "Tunis"]
JOBS = ["painter", "chemist", "sailor", "architect", "poet", "astronomer"]


def _rows(start: int, n: int) -> list[dict[str, str]]:
    return [{"id": f"p{i:04d}", "title": f"Person {i}",
             "text": f"Person {i} was a {JOBS[i % len(JOBS)]} born in {CITIES[i % len(CITIES)]} in {1800 + i}."}
            for i in range(start, start + n)]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([(k, pa.string()) for k in ("id", "title", "text")])),
                   path)
    return path


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return ShardEmbedder(EncoderConfig(), batch_size=16, threads=2,
                         rejects_dir=str(tmp_path_factory.mktemp("rejects")))


def _embed(embedder: ShardEmbedder, files: list[Path], out: Path) -> list[dict]:
    return [embedder.embed_file(f, shard_path(out, f), source_stamp(f, EncoderConfig())) for f in files]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("corpus")
    files = [_write(root / "passages" / f"part-{j}.parquet", _rows(20 * j, 20)) for j in range(3)]
    out = root / "index"
    _embed(embedder, files, out)
    return files, out


@pytest.fixture(scope="module")
def built(corpus):
    files, out = corpus
    cfg = IndexConfig(passages=str(files[0].parent), out_dir=str(out), factory="Flat")
    assemble_index(out, files, True, cfg)
    return RetrievalConfig(index=cfg)


def test_shard_holds_the_encoder_vectors_of_title_and_text(corpus, embedder):
    files, out = corpus
    table = pq.read_table(files[1])
    expected = embedder.encoder.encode(passage_texts(table.column("title").to_pylist(),
                                                     table.column("text").to_pylist(), True))
    np.testing.assert_allclose(read_vectors(shard_path(out, files[1])), expected, atol=1e-5)
    assert pq.read_table(shard_path(out, files[1]), columns=["id"]).column("id").to_pylist() == \
        table.column("id").to_pylist()


def test_shard_goes_stale_when_its_source_or_encoder_changes(tmp_path, embedder):
    source = _write(tmp_path / "a.parquet", _rows(0, 3))
    _embed(embedder, [source], tmp_path / "out")
    shard = shard_path(tmp_path / "out", source)
    assert is_current(shard, source_stamp(source, EncoderConfig()))
    assert not is_current(shard, source_stamp(source, EncoderConfig(pooling="cls")))
    _write(source, _rows(0, 4))
    os.utime(source, ns=(1, 1))
    assert not is_current(shard, source_stamp(source, EncoderConfig()))


def test_duplicate_id_inside_a_file_stops_before_embedding(tmp_path, embedder):
    rows = _rows(0, 3)
    source = _write(tmp_path / "dup.parquet", [*rows, {**rows[2], "text": "another text"}])
    [result] = _embed(embedder, [source], tmp_path / "out")
    assert result["duplicate_id"] == "p0002"
    assert not shard_path(tmp_path / "out", source).exists()


def test_an_id_in_two_files_is_a_data_error_naming_both(tmp_path, embedder):
    files = [_write(tmp_path / "a.parquet", _rows(0, 3)), _write(tmp_path / "b.parquet", _rows(2, 3))]
    _embed(embedder, files, tmp_path / "out")
    with pytest.raises(DataError, match="a.parquet, b.parquet") as err:
        check_corpus(files, [shard_path(tmp_path / "out", f) for f in files], str(tmp_path))
    assert err.value.row_id == "p0002" and err.value.field == "id"


def test_empty_corpus_is_a_data_error(tmp_path, embedder):
    files = [_write(tmp_path / "empty.parquet", [])]
    _embed(embedder, files, tmp_path / "out")
    with pytest.raises(DataError, match="corpus is empty") as err:
        check_corpus(files, [shard_path(tmp_path / "out", f) for f in files], "the/passages")
    assert err.value.file == "the/passages"


def test_training_sample_is_distinct_real_rows_and_seeded(corpus):
    files, out = corpus
    shards = [shard_path(out, f) for f in files]
    every = np.concatenate([read_vectors(s) for s in shards])
    sample = sample_vectors(shards, [20, 20, 20], 25, seed=3)
    assert sample.shape == (25, 384)
    matches = [np.flatnonzero((every == row).all(axis=1)) for row in sample]
    assert all(len(m) == 1 for m in matches) and len({int(m[0]) for m in matches}) == 25
    np.testing.assert_array_equal(sample, sample_vectors(shards, [20, 20, 20], 25, seed=3))
    assert len(sample_vectors(shards, [20, 20, 20], 1000, seed=0)) == 60


def test_retriever_exact_search_equals_numpy_over_the_shards(corpus, built, embedder):
    files, out = corpus
    retriever = DenseRetriever.from_config(built.encoder, built.index)
    vectors = np.concatenate([read_vectors(shard_path(out, f)) for f in files])
    ids = [r["id"] for j in range(3) for r in _rows(20 * j, 20)]
    queries = ["Who was the astronomer born in Lima?", "a poet from Oslo", "Person 33"]
    hits = retriever.search(queries, 4)
    reference = embedder.encoder.encode(queries) @ vectors.T
    for row, scores in zip(hits, reference, strict=True):
        order = np.argsort(-scores)[:4]
        assert [h.id for h in row] == [ids[i] for i in order]
        np.testing.assert_allclose([h.score for h in row], scores[order], atol=1e-4)


def test_retriever_returns_the_passage_it_is_given(built):
    retriever = DenseRetriever.from_config(built.encoder, built.index)
    target = _rows(47, 1)[0]
    [[top, *_]] = retriever.search([f"{target['title']} {target['text']}"], 3)
    assert top.as_dict() | {"score": 0} == {**target, "score": 0}
    assert top.score == pytest.approx(1.0, abs=1e-4)


def test_retriever_with_another_encoder_is_refused(built):
    out = built.index.out_dir
    cls = HFEncoder(minilm_path(), name="all-MiniLM-L6-v2", pooling="cls", device="cpu")
    with pytest.raises(IndexMismatchError, match="encoder"):
        DenseRetriever(out, cls, normalize=True)
    with pytest.raises(IndexMismatchError, match="normalize"):
        DenseRetriever.from_config(EncoderConfig(normalize=False), built.index)


def _copy_shards(corpus, dest: Path) -> Path:
    """The corpus' embedding shards in another index dir, so a test can build there freely."""
    files, out = corpus
    for f in files:
        shard_path(dest, f).parent.mkdir(parents=True, exist_ok=True)
        shard_path(dest, f).write_bytes(shard_path(out, f).read_bytes())
    return dest


def test_rebuild_is_skipped_until_the_index_settings_change(corpus, tmp_path):
    files, out = corpus[0], _copy_shards(corpus, tmp_path)
    cfg = IndexConfig(out_dir=str(out), factory="Flat")
    assert assemble_index(out, files, True, cfg).skipped is False
    assert assemble_index(out, files, True, cfg).skipped is False  # no _SUCCESS: the job did not finish
    (out / "_SUCCESS").touch()
    assert assemble_index(out, files, True, cfg).skipped is True
    rebuilt = assemble_index(out, files, True, cfg.model_copy(update={"factory": "HNSW16"}))
    assert rebuilt.skipped is False and rebuilt.manifest.factory == "HNSW16"
    assert not (out / "_SUCCESS").exists()
    (out / "_SUCCESS").touch()
    hnsw = cfg.model_copy(update={"factory": "HNSW16", "ef_construction": 99})
    assert assemble_index(out, files, True, hnsw).skipped is False


def test_ivf_index_with_all_lists_probed_is_exact(corpus, built, tmp_path):
    files, ivf_dir = corpus[0], _copy_shards(corpus, tmp_path)
    cfg = IndexConfig(out_dir=str(ivf_dir), factory="IVF4,Flat", nprobe=4)
    manifest = assemble_index(ivf_dir, files[:1], True, cfg).manifest  # one shard: no Ray tasks
    assert manifest.count == 20
    exact = DenseRetriever.from_config(built.encoder, built.index)
    ivf = DenseRetriever.from_config(built.encoder, cfg)
    queries = ["a chemist from Nairobi", "sailor"]
    exact_ids = [[h.id for h in row if h.id < "p0020"][:3] for row in exact.search(queries, 60)]
    assert [[h.id for h in row] for row in ivf.search(queries, 3)] == exact_ids



def test_local_fallback_backend_searches_its_own_index(built):
    cfg = RetrievalConfig(fallback=SearchBackendConfig(kind="local", index_dir=built.index.out_dir))
    backend = build_search_backend(cfg)
    target = _rows(12, 1)[0]
    [[top]] = backend.search([f"{target['title']} {target['text']}"], 1)
    assert top.id == target["id"]


def test_run_search_lists_the_top_hits_per_query(built):
    from raypipe.config import RaypipeConfig
    from raypipe.jobs.index import run_search

    target = _rows(7, 1)[0]
    query = f"{target['title']} {target['text']}"
    shown = run_search(RaypipeConfig(retrieval=built.model_copy(update={"top_k": 2})), [query])
    assert list(shown) == [query] and len(shown[query]) == 2
    assert shown[query][0].startswith(f"{target['title']} [{target['id']}] ")
