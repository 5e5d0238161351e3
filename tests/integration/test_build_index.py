"""`raypipe index build` on Ray: actor-pool embedding equals local embedding, resume, errors, the IVF
parallel add, the retrieval stage inside Ray Data, and a build over the synthetic world."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raypipe.config import RaypipeConfig
from raypipe.errors import DataError
from raypipe.jobs.index import run_build_index
from raypipe.retrieval import DenseRetriever
from raypipe.retrieval import index as fi
from raypipe.retrieval.build import add_in_parallel, sample_vectors
from raypipe.retrieval.embed import read_vectors, shard_path
from raypipe.retrieval.encoders import build_encoder, passage_texts
from raypipe.settings.retrieval import EncoderConfig, IndexConfig, RetrievalConfig

SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])
ANIMALS = ["otter", "heron", "lynx", "ibex", "wren", "newt", "orca"]


def _rows(start: int, n: int) -> list[dict[str, str]]:
    return [{"id": f"d{i:04d}", "title": f"{ANIMALS[i % 7].title()} {i}",
             "text": f"The {ANIMALS[i % 7]} number {i} lives {i % 5 + 1} km from the river mouth."}
            for i in range(start, start + n)]


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return path


def _cfg(passages: Path, out: Path, **index: object) -> RaypipeConfig:
    return RaypipeConfig(retrieval=RetrievalConfig(index=IndexConfig(passages=str(passages), out_dir=str(out),
                                                                     embed_batch_size=16, **index)))


@pytest.fixture(scope="module")
def encoder():
    return build_encoder(EncoderConfig())


@pytest.fixture(scope="module")
def built(ray_cluster, world_dir, tmp_path_factory):
    """Four small files plus the synthetic world's web corpus, embedded by two actors."""
    root = tmp_path_factory.mktemp("build")
    files = [_write(root / "passages" / f"part-{j}.parquet", _rows(30 * j, 30)) for j in range(4)]
    for web in sorted((world_dir / "web" / "passages").glob("*.parquet")):
        files.append(root / "passages" / f"web-{web.name}")
        files[-1].write_bytes(web.read_bytes())
    cfg = _cfg(root / "passages", root / "index", embed_actors=2)
    return files, cfg, run_build_index(cfg)


def test_actor_pool_embedding_equals_local_embedding(built, encoder):
    files, cfg, stats = built
    n_web = sum(pq.read_metadata(f).num_rows for f in files[4:])
    assert stats["n_passages"] == 120 + n_web
    assert stats["shards_embedded"] == len(files) and stats["shards_skipped"] == 0
    for f in files:
        table = pq.read_table(f)
        local = encoder.encode(passage_texts(table.column("title").to_pylist(), table.column("text").to_pylist(),
                                             True))
        np.testing.assert_allclose(read_vectors(shard_path(Path(cfg.retrieval.index.out_dir), f)), local,
                                   atol=1e-5)
    assert (Path(cfg.retrieval.index.out_dir) / "_SUCCESS").is_file()


def test_world_passages_are_found(built):
    files, cfg, _ = built
    row = pq.read_table(files[-1]).slice(3, 1).to_pylist()[0]
    retriever = DenseRetriever.from_config(cfg.retrieval.encoder, cfg.retrieval.index)
    [[top]] = retriever.search([f"{row['title']} {row['text']}"], 1)
    assert top.id == row["id"]


def test_rerun_skips_current_shards_and_resumes_after_a_duplicate_error(built):
    files, cfg, first = built
    again = run_build_index(cfg)
    assert (again["shards_skipped"], again["shards_embedded"], again["index_skipped"]) == (len(files), 0, True)
    original, stat = files[2].read_bytes(), files[2].stat()
    _write(files[1], [*_rows(30, 30), *_rows(500, 2)])
    _write(files[2], [*_rows(60, 30), _rows(61, 1)[0]])
    with pytest.raises(DataError, match="duplicate") as err:
        run_build_index(cfg)
    assert err.value.row_id == "d0061" and err.value.file == str(files[2])
    files[2].write_bytes(original)
    os.utime(files[2], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    fixed = run_build_index(cfg)  # the failed run already embedded the edited files[1]
    assert (fixed["shards_skipped"], fixed["shards_embedded"], fixed["index_skipped"]) == (len(files), 0, False)
    assert fixed["n_passages"] == first["n_passages"] + 2
    new = _rows(501, 1)[0]
    [[top]] = DenseRetriever.from_config(cfg.retrieval.encoder, cfg.retrieval.index).search(
        [f"{new['title']} {new['text']}"], 1)
    assert top.id == new["id"]


def test_ivf_shards_added_in_parallel_equal_one_sequential_index(built):
    files, cfg, _ = built
    shards = [shard_path(Path(cfg.retrieval.index.out_dir), f) for f in files]
    vectors = np.concatenate([read_vectors(s) for s in shards])
    trained = fi.train(fi.make_index("IVF4,PQ8x4", 384, "ip"),
                       sample_vectors(shards, [len(v) for v in map(read_vectors, shards)], len(vectors), 0),
                       use_gpu=False)
    sequential = fi.deserialize(fi.serialize(trained))
    sequential.add(vectors)
    merged = add_in_parallel(trained, shards, use_gpu=False)
    for index in (sequential, merged):
        fi.set_search_params(index, nprobe=1, ef_search=1, k_factor=1)
    scores_a, positions_a = fi.search(sequential, vectors[::7], 5, "ip")
    scores_b, positions_b = fi.search(merged, vectors[::7], 5, "ip")
    np.testing.assert_array_equal(positions_a, positions_b)
    np.testing.assert_array_equal(scores_a, scores_b)
