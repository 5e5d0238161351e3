"""A full disk in the middle of the long jobs' writes, on a small tmpfs that fills (tests/small_disk.py):
augmentation's shards, the index files and a training checkpoint's local folder. Each failure names
the path it could not write and leaves nothing half-written that a rerun would take as done; the rerun
after the space is freed writes exactly what an uninterrupted run writes. Also the warnings of a job
that may not fit.

Augmentation runs its real driver (`augment`: resume, shard writer, stats, `_SUCCESS`) over its real
batch functions (validation, Algorithm 3's steps, rendering), fed in this process instead of by Ray
Data, with a critic whose answers are a fixed function of each question; the Ray Data plan itself is
tested in tests/integration/test_augment_pipeline.py. The checkpoint's copy into Ray Train's storage
is tested through Ray Train in tests/integration/test_training_disk_full.py.
"""

from __future__ import annotations

import logging
import tempfile
import zlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from raypipe import disk
from raypipe.augment import pipeline
from raypipe.config import load_config
from raypipe.data.segment import Segmenter
from raypipe.errors import DiskFullError, IndexMismatchError
from raypipe.jobs.augment import augment_sections
from raypipe.models.base_model import count_parameters
from raypipe.prompts import ASPECT_LABELS, CriticExample
from raypipe.retrieval.build import SUCCESS_FILE, assemble_index
from raypipe.retrieval.embed import ShardEmbedder, shard_path, source_stamp
from raypipe.retrieval.manifest import INDEX_FILE, MANIFEST_FILE, PASSAGES_FILE, Manifest
from raypipe.settings.cluster import RayConfig
from raypipe.settings.data import LimitsConfig
from raypipe.settings.retrieval import EncoderConfig, IndexConfig
from raypipe.training import trainer
from raypipe.training.checkpoint import TrainState, save_checkpoint
from raypipe.training.run_snapshot import COPY_FILE, SNAPSHOT_FILE, SnapshotCopy, restore_snapshot
from raypipe.training.strategy import TorchStrategy
from tests.small_disk import PAGE


def _pages(*files: Path) -> int:
    """Bytes tmpfs charges for `files`: whole pages each."""
    return sum(-(-f.stat().st_size // PAGE) * PAGE for f in files)


def _tree(root: Path, folders: tuple[str, ...]) -> dict[str, bytes]:
    return {f"{d}/{f.name}": f.read_bytes() for d in folders for f in sorted((root / d).glob("*"))}


def _temp_files(root: Path) -> list[Path]:
    return list(root.rglob("*.tmp"))


# --- augmentation ---------------------------------------------------------------------------------


class HashCritic:
    """Each judgement's label is a fixed function of its question: the same labels on every run."""

    def predict(self, examples: list[CriticExample]) -> list[dict[str, float]]:
        out = []
        for ex in examples:
            labels = ASPECT_LABELS[ex.aspect]
            pick = zlib.crc32(repr(ex).encode()) % len(labels)
            out.append({t: 0.9 if i == pick else 0.1 / (len(labels) - 1) for i, t in enumerate(labels)})
        return out


class LocalPlan:
    """`build_dataset`'s plan run in this process, in input order: the same functions (validation,
    Algorithm 3's steps in one StepRunner, rendering) on batches of the same size."""

    def __init__(self, files: list[str], s: pipeline.AugmentSections):
        self.files, self.s = files, s
        self.runner = pipeline.StepRunner(pipeline.algorithm_steps(s.augment, s.retrieval.top_k, s.limits), s)

    def iter_batches(self, batch_format: str, batch_size: int):
        for f in self.files:
            table = pq.read_table(f)
            table = table.append_column(pipeline.SOURCE, pa.array([f] * table.num_rows))
            for batch in table.to_batches(max_chunksize=batch_size):
                rows = pipeline.validate(pa.Table.from_batches([batch]), self.s.limits)
                yield pd.DataFrame(pipeline.render(self.runner(rows), self.s.augment))

    def stats(self) -> str:
        return ""


@pytest.fixture
def augment_job(tmp_path, world_dir, keyword_searcher, monkeypatch):
    """Three input shards of 12 instances, and `run(out)`: the augment job into `out` on the plan above."""
    rows = pq.read_table(world_dir / "instances").to_pylist()
    instances = tmp_path / "instances"
    instances.mkdir()
    for j, name in enumerate(("part-a", "part-b", "part-c")):
        pq.write_table(pa.Table.from_pylist(rows[12 * j:12 * (j + 1)]), instances / f"{name}.parquet")
    models = {"critic": HashCritic(), "retriever": keyword_searcher(),
              "split_many": Segmenter(load_config(None).segmentation).split_many}
    monkeypatch.setattr(pipeline, "load_models", lambda kinds, s: {k: models[k] for k in kinds})
    monkeypatch.setattr(pipeline, "build_dataset", LocalPlan)
    monkeypatch.setattr("raypipe.runtime.ensure_ray", lambda cfg: None)

    def run(out: Path) -> dict:
        cfg = load_config(None, [f"augment.instances={instances}", f"augment.out_dir={out}", "augment.batch_size=8",
                                 "retrieval.top_k=2", "augment.collapse_check.sample_rows=0"])
        return pipeline.augment(augment_sections(cfg), RayConfig(), progress_every_s=3600)

    return run


SHARD_FOLDERS = ("data", "jsonl", "rejects", "shard_counts")


@pytest.mark.parametrize("fails_at", ["first file", "parquet"])
def test_augment_on_a_full_disk_names_the_shard_keeps_no_half_and_resumes_to_the_same_bytes(
        augment_job, tmp_path, small_disk, monkeypatch, fails_at):
    clean_out = tmp_path / "clean"
    clean = augment_job(clean_out)
    # room for shard b's other files, so that the write that fails is its parquet: the shard's marker
    others = [clean_out / "rejects" / "part-b.rejects.jsonl", clean_out / "shard_counts" / "part-b.json",
              clean_out / "jsonl" / "part-b.jsonl"]
    leave = 0 if fails_at == "first file" else _pages(*others)
    real_flush = pipeline.ShardWriter.flush

    def flush_then_fill(self, src):
        real_flush(self, src)
        if self.written == ["part-a"]:
            small_disk.fill(leave)

    monkeypatch.setattr(pipeline.ShardWriter, "flush", flush_then_fill)
    out = small_disk.root / "gen"
    with pytest.raises(DiskFullError) as raised:
        augment_job(out)
    failed = out / "shard_counts" / "part-b.json" if fails_at == "first file" else out / "data" / "part-b.parquet"
    assert raised.value.path == str(failed)
    assert sorted(p.name for p in (out / "data").iterdir()) == ["part-a.parquet"]  # b is not marked done
    assert not _temp_files(out) and not (out / "_SUCCESS").exists()

    small_disk.free()
    monkeypatch.setattr(pipeline.ShardWriter, "flush", real_flush)
    resumed = augment_job(out)
    assert (resumed["shards_skipped"], resumed["shards_written"]) == (1, 2)
    assert _tree(out, SHARD_FOLDERS) == _tree(clean_out, SHARD_FOLDERS)
    assert resumed["rows_written"] == clean["rows_written"] > 0 and (out / "_SUCCESS").exists()


def test_augment_warns_before_it_starts_when_its_output_may_not_fit(augment_job, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="raypipe.disk")
    monkeypatch.setattr(disk, "free_bytes", lambda path: 1000)
    out = tmp_path / "gen"
    augment_job(out)
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("augment may write up to")]
    assert len(warned) == 1 and f"into {out}, which has 1000.0 B free" in warned[0]
    caplog.clear()
    augment_job(out)  # a rerun with every shard done writes no shard, so it has nothing to warn of
    assert not caplog.records


def test_the_augment_estimate_counts_the_text_twice_and_the_passages_each_row_records(tmp_path):
    shard = tmp_path / "a.parquet"
    shard.write_bytes(b"x" * 10_000)
    # 10 rows, K = 5: 5 lists of 5 passages of 800 bytes each per row
    assert pipeline.output_bytes_estimate([str(shard)], 10, 5) == 2 * 10_000 + 10 * 5 * 5 * 800


# --- the index ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return ShardEmbedder(EncoderConfig(), batch_size=16, threads=1, rejects_dir=str(tmp_path_factory.mktemp("rejects")))


@pytest.fixture
def passage_files(tmp_path) -> list[Path]:
    files = []
    for j in range(3):
        rows = [{"id": f"p{i}", "title": f"Person {i}", "text": f"Person {i} was born in {1800 + i} in Lowmere."}
                for i in range(20 * j, 20 * (j + 1))]
        files.append(tmp_path / "passages" / f"part-{j}.parquet")
        files[-1].parent.mkdir(exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), files[-1])
    return files


def _embed(embedder: ShardEmbedder, files: list[Path], out: Path) -> list[dict]:
    return [embedder.embed_file(f, shard_path(out, f), source_stamp(f, EncoderConfig())) for f in files]


def test_the_index_estimate_counts_the_text_three_times_and_every_vector_twice(passage_files, tmp_path):
    from raypipe.retrieval.build import WIDEST_ENCODER_DIM, index_bytes_estimate

    text = sum(f.stat().st_size for f in passage_files)
    assert index_bytes_estimate(passage_files, EncoderConfig()) == 3 * text + 2 * 60 * 384 * 4
    lines = tmp_path / "more.jsonl"  # jsonl rows are its lines
    lines.write_text("".join(f'{{"id": "q{i}", "title": "", "text": "x"}}\n' for i in range(7)))
    hf = EncoderConfig(kind="hf", path="/an/encoder")
    assert index_bytes_estimate([lines], hf) == 3 * lines.stat().st_size + 2 * 7 * WIDEST_ENCODER_DIM * 4


def test_the_index_build_warns_before_it_embeds_when_its_output_may_not_fit(passage_files, tmp_path, monkeypatch,
                                                                           caplog):
    from raypipe.retrieval import build

    class Embedding(Exception):
        """Raised where the build would start embedding: the check comes before."""

    def embed(*args, **kwargs):
        raise Embedding

    caplog.set_level(logging.WARNING, logger="raypipe.disk")
    monkeypatch.setattr(disk, "free_bytes", lambda path: 1000)
    monkeypatch.setattr(build, "embed_shards", embed)
    out = tmp_path / "index"
    with pytest.raises(Embedding):
        build.build_index_folder(EncoderConfig(), IndexConfig(passages=str(passage_files[0].parent), out_dir=str(out)),
                                 LimitsConfig())
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("index build may write up to")]
    assert len(warned) == 1 and f"into {out}, which has 1000.0 B free" in warned[0]


def test_an_embedding_shard_that_cannot_be_written_is_reported_with_its_path(embedder, passage_files, small_disk):
    small_disk.fill()
    result = _embed(embedder, passage_files[:1], small_disk.root)[0]
    assert result["disk_full"] == str(shard_path(small_disk.root, passage_files[0]))
    assert small_disk.files() == []  # no shard, no temp: the rerun embeds the file again


#: where the disk fills, and the factory of a finished index already in the folder (a rebuild) or None.
#: Over a previous index the new passages file always fits: the replaced index file frees its pages
@pytest.mark.parametrize(("fails_at", "previous"), [(INDEX_FILE, "HNSW16"), (PASSAGES_FILE, None)])
def test_an_index_save_on_a_full_disk_names_the_file_leaves_no_index_to_load_and_resumes(
        embedder, passage_files, tmp_path, small_disk, fails_at, previous):
    cfg = IndexConfig(factory="Flat")
    clean = tmp_path / "clean"
    _embed(embedder, passage_files, clean)
    assemble_index(clean, passage_files, True, cfg)
    out = small_disk.root / "index"
    _embed(embedder, passage_files, out)
    if previous:
        assemble_index(out, passage_files, True, IndexConfig(factory=previous))
        (out / SUCCESS_FILE).touch()  # finished, as `build_index_folder` leaves it
    # room for index.faiss alone, so that the write that fails is the passages file after it
    small_disk.fill(leave=0 if fails_at == INDEX_FILE else _pages(clean / INDEX_FILE))
    with pytest.raises(DiskFullError) as raised:
        assemble_index(out, passage_files, True, cfg)
    assert raised.value.path == str(out / fails_at)
    assert not _temp_files(out) and not (out / MANIFEST_FILE).exists() and not (out / SUCCESS_FILE).exists()
    with pytest.raises(IndexMismatchError, match="no manifest.json"):
        Manifest.read(out)  # what a retriever reads first: the half-built index is not loaded

    small_disk.free()
    built = assemble_index(out, passage_files, True, cfg)
    assert not built.skipped and built.manifest.count == 60
    assert all((out / f).read_bytes() == (clean / f).read_bytes() for f in (INDEX_FILE, PASSAGES_FILE))
    assert built.manifest.shards == Manifest.read(clean).shards


# --- training -------------------------------------------------------------------------------------


def test_a_checkpoint_that_cannot_be_saved_is_named_and_leaves_no_folder(small_disk, monkeypatch):
    import ray.train
    import ray.train.torch

    monkeypatch.setattr(ray.train.torch, "prepare_model", lambda model: model)  # one process, no DDP
    reported: list[dict] = []
    monkeypatch.setattr(ray.train, "report", lambda metrics, **kw: reported.append(kw))
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk.root))  # where the local checkpoint folder goes
    model = torch.nn.Linear(256, 256)
    strategy = TorchStrategy("fp32", grad_clip=1.0)
    strategy.prepare(model, torch.optim.AdamW(model.parameters()), 0, 4, use_gpu=False)
    small_disk.fill()
    with pytest.raises(DiskFullError) as raised:
        save_checkpoint(strategy, TrainState(step=3), {"loss": 1.0}, rank=0)
    assert Path(raised.value.path).parent == small_disk.root
    assert Path(raised.value.path).name.startswith("raypipe-ckpt-")
    assert small_disk.files() == [] and not list(small_disk.root.glob("raypipe-ckpt-*"))
    assert reported == []  # nothing reached Ray Train: no checkpoint of this step is registered


def test_a_run_snapshot_cut_short_by_a_full_disk_is_restored_from_its_last_whole_copy(tmp_path, caplog):
    import ray.train

    snapshot, copy = tmp_path / SNAPSHOT_FILE, tmp_path / COPY_FILE
    snapshot.write_text('{"checkpoint_results": ["checkpoint_a"]}')
    keeper = SnapshotCopy(tmp_path)
    keeper.after_report(None, [{"step": 1}], checkpoint=None)  # a report without a checkpoint: nothing to copy
    assert not copy.exists()
    keeper.after_report(None, [{"step": 2}], checkpoint=ray.train.Checkpoint(str(tmp_path)))
    assert copy.read_text() == snapshot.read_text()

    restore_snapshot(tmp_path)  # whole: left as it is
    assert snapshot.read_text() == '{"checkpoint_results": ["checkpoint_a"]}'
    snapshot.write_text('{"checkpoint_res')  # what Ray's in-place rewrite leaves when the disk fills
    restore_snapshot(tmp_path)
    assert snapshot.read_text() == copy.read_text() and "restored its last whole copy" in caplog.text
    copy.unlink()
    snapshot.write_text("")
    restore_snapshot(tmp_path)  # the first registration failed: no checkpoint to resume from
    assert not snapshot.exists()


def test_the_training_estimate_counts_every_stages_checkpoints_one_in_flight_and_the_exports():
    tc = load_config(None, ["training.generator.keep_checkpoints=2",
                            "training.generator.stages=[{name: a}, {name: b}]"]).training.generator
    # 2 stages x 2 kept + 1 being written + its local copy, 14 bytes per parameter; 2 exports of 4
    assert trainer.disk_estimate(tc, 1000) == 1000 * (14 * 6 + 4 * 2)


def test_training_checks_its_estimate_against_the_free_space_before_it_starts(tiny_model_dir, tmp_path,
                                                                                monkeypatch):
    class Started(Exception):
        """Raised where the run would start Ray: the check comes before."""

    def start(cfg):
        raise Started

    checked: list[tuple] = []
    monkeypatch.setattr(trainer, "warn_if_short_of_space", lambda *args: checked.append(args))
    monkeypatch.setattr("raypipe.runtime.ensure_ray", start)
    out = tmp_path / "gen"
    tc = load_config(None, [f"training.generator.base_model={tiny_model_dir}",
                            f"training.generator.out_dir={out}"]).training.generator
    with pytest.raises(Started):
        trainer.train_lm(tc, "generator", RayConfig())
    assert checked == [(out, trainer.disk_estimate(tc, count_parameters(tiny_model_dir)), "training.generator")]
    assert checked[0][1] > count_parameters(tiny_model_dir) > 0
