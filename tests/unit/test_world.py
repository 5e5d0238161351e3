"""The synthetic knowledge world: determinism, ground-truth consistency, held-out hygiene, reruns."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from raypipe.config import load_config
from raypipe.data import world_vocab as vocab
from raypipe.data.schemas import INSTANCE_SCHEMA, PASSAGE_SCHEMA
from raypipe.data.world import synthesize
from raypipe.data.world_tasks import check_mix
from raypipe.errors import ConfigError
from raypipe.methods.closed_set import choice_options, match_option, verdict_options
from raypipe.settings.data import MIX_PRESETS, WorldConfig

SMALL = dict(instances=600, seed=11, heldout_fraction=0.2, web_only_fraction=0.5, eval_instances=60,
             shard_size=250)


def _cfg(out: Path, **kw) -> WorldConfig:
    return WorldConfig(out_dir=str(out), **{**SMALL, **kw})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("world")
    synthesize(_cfg(out))
    return out


@pytest.fixture(scope="module")
def instances(world) -> list[dict]:
    rows = pq.read_table(world / "instances").to_pylist()
    for row in rows:
        row["meta"] = json.loads(row["meta"])
    return rows


@pytest.fixture(scope="module")
def passages(world) -> dict[str, dict]:
    tables = (pq.read_table(world / "passages"), pq.read_table(world / "web" / "passages"))
    return {r["id"]: r for table in tables for r in table.to_pylist()}


def _eval(world: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (world / "eval" / f"{split}.jsonl").read_text().splitlines()]


def _file_digests(out: Path) -> dict[str, str]:
    digests = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "world.json":  # its timing entry is the one thing allowed to differ
            stats = json.loads(data)
            stats.pop("timing")
            data = json.dumps(stats).encode()
        digests[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return digests


# --- determinism ----------------------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_other_content(tmp_path):
    cfg = dict(instances=300, eval_instances=20, shard_size=120)
    synthesize(_cfg(tmp_path / "a", **cfg))
    synthesize(_cfg(tmp_path / "b", **cfg))
    synthesize(_cfg(tmp_path / "c", **cfg, seed=12))
    a, b, c = (_file_digests(tmp_path / x) for x in "abc")
    assert a == b
    assert {"instances/part-00002.parquet", "passages/part-00000.parquet", "web/passages/part-00000.parquet",
            "eval/heldout_qa.jsonl", "eval/heldout_noret.jsonl", "_SUCCESS"} <= a.keys()
    data_files = [k for k in a if k.endswith((".parquet", ".jsonl"))]
    assert all(a[k] != c[k] for k in data_files)


# --- layout and schema --------------------------------------------------------------------------


def test_layout_schemas_ids_and_stats(world, instances, passages):
    for folder, schema in (("instances", INSTANCE_SCHEMA), ("passages", PASSAGE_SCHEMA),
                           ("web/passages", PASSAGE_SCHEMA)):
        for path in (world / folder).glob("part-*.parquet"):
            assert pq.read_schema(path).remove_metadata().equals(schema), path
    assert sorted(p.name for p in (world / "instances").glob("*.parquet")) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert len(instances) == SMALL["instances"]
    assert len({r["id"] for r in instances}) == len(instances)
    assert all(re.fullmatch(r"[pw]\d{7}", pid) for pid in passages)
    stats = json.loads((world / "world.json").read_text())
    assert stats["n_passages"] + stats["n_web_passages"] == len(passages)
    assert sum(stats["counts"]["dataset"].values()) == len(instances)
    assert stats["counts"]["dataset"] == dict(Counter(r["dataset"] for r in instances))


def test_mix_follows_self_rag_table_3(instances):
    datasets = Counter(r["dataset"] for r in instances)
    tasks = {r["dataset"]: r["task"] for r in instances}
    assert set(datasets) == set(WorldConfig().mix)
    assert (tasks["factual_qa"], tasks["bio"], tasks["instruct_arith"]) == ("qa", "longform", "instruction")
    instruction_share = sum(n for d, n in datasets.items() if tasks[d] == "instruction") / len(instances)
    assert 0.55 < instruction_share < 0.71  # Table 3: 63% instruction-following
    # instruction following mostly needs no retrieval, knowledge-intensive QA always does
    for r in instances:
        if r["dataset"] in ("instruct_creative", "instruct_arith", "instruct_string"):
            assert r["meta"]["needs_retrieval"] is False
        if r["dataset"] in ("factual_qa", "bio", "fact_verification", "instruct_explain"):
            assert r["meta"]["needs_retrieval"] is True
    assert {r["meta"]["utility"] for r in instances} == {1, 2, 3, 4, 5}


# --- ground truth -----------------------------------------------------------------------------------


def test_output_is_its_sentences_and_spacy_splits_it_exactly(instances):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    for r, doc in zip(instances, nlp.pipe(r["output"] for r in instances), strict=True):
        sentences = [s["text"] for s in r["meta"]["sentences"]]
        assert r["output"] == " ".join(sentences)
        assert [s.text for s in doc.sents] == sentences, r["id"]


def test_every_supported_sentence_is_stated_by_its_passages(instances, passages):
    n_full = n_partial = 0
    for r in instances:
        meta = r["meta"]
        for s in meta["sentences"]:
            if not s["needs_retrieval"]:
                assert s["support"] == {} and s["facts"] == []
                continue
            assert s["support"], r["id"]
            for pid, label in s["support"].items():
                text = passages[pid]["text"]
                assert meta["entity"] in text, (r["id"], pid)
                found = [f in text for f in s["facts"]]
                if label == "full":
                    n_full += 1
                    assert all(found), (r["id"], pid, s)
                else:
                    assert label == "partial"
                    n_partial += 1
                    assert any(found) and not all(found), (r["id"], pid, s)
    assert n_full > 100 and n_partial > 10


def test_task_answers_match_ground_truth(instances, passages):
    for r in instances:
        meta = r["meta"]
        if r["dataset"] == "factual_qa" and meta["utility"] == 5:
            assert meta["answer"] in r["output"]
            assert all(meta["answer"] in passages[p]["text"] for p in meta["relevant_passages"])
        elif r["dataset"] == "fact_verification":
            # the verdict rests on the true value, stated first; the eval's matcher reads the label
            assert meta["label"] in ("true", "false")
            assert match_option(r["output"], verdict_options()) == meta["label"]
            assert r["output"].index(meta["sentences"][0]["facts"][0]) < r["output"].index(meta["label"])
            truth = meta["sentences"][0]["facts"][0]
            assert (truth in r["input"]) == (meta["label"] == "true"), r["id"]
            # the value the claim states, recorded for the verdicts that compare it with the passage's
            assert meta["claimed"] in r["input"] and (meta["claimed"] == truth) == (meta["label"] == "true")
        elif r["dataset"] == "multiple_choice":
            # the eval's matcher reads the training answer as the gold option (by the choice's text)
            assert sorted(meta["choices"]) == ["A", "B", "C", "D"]
            assert match_option(r["output"], choice_options(meta["choices"])) == meta["answerKey"]
            assert meta["choices"][meta["answerKey"]] in r["output"]
            if meta["needs_retrieval"]:
                assert meta["choices"][meta["answerKey"]] == meta["sentences"][0]["facts"][0]


def test_distractor_passages_have_near_duplicate_names(passages):
    titles = {p["title"] for p in passages.values() if p["id"].startswith("p")}
    near = [t for t in titles if t.endswith("e") and t[:-1] in titles]
    assert len(near) >= 10
    by_title = {p["title"]: p["text"] for p in passages.values() if p["id"].startswith("p")}
    for t in near:
        assert t not in by_title[t[:-1]] and t[:-1] not in by_title[t].replace(t, "")


# --- held-out entities ------------------------------------------------------------------------------


def test_heldout_entities_never_in_training_and_answerable_from_passages(world, instances, passages):
    stats = json.loads((world / "world.json").read_text())
    items = {split: _eval(world, split) for split in ("heldout_qa", "heldout_fact", "heldout_mc")}
    assert all(len(v) == SMALL["eval_instances"] for v in items.values())
    heldout = {item["entity"] for v in items.values() for item in v}
    # eval_instances >= n_heldout and the splits deal round by round, so every held-out person is asked about
    assert len(heldout) == stats["n_heldout"] > 0
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(heldout))) + r")\b")
    for r in instances:
        assert not pattern.search("\n".join((r["instruction"], r["input"], r["output"]))), r["id"]
        assert r["meta"]["entity"] not in heldout
    for item in items["heldout_qa"]:
        texts = [passages[p]["text"] for p in item["passage_ids"]]
        assert texts and all(item["answers"][0] in t for t in texts), item
    for item in items["heldout_mc"]:
        answer = item["choices"][item["answerKey"]]
        assert all(answer in passages[p]["text"] for p in item["passage_ids"]), item
    assert {item["label"] for item in items["heldout_fact"]} == {"true", "false"}
    for item in items["heldout_fact"]:
        assert any(item["entity"] in passages[p]["text"] for p in item["passage_ids"]), item


def test_a_contradicting_twin_differs_from_its_claim_only_in_the_value_and_the_label(tmp_path):
    shard = 150
    synthesize(_cfg(tmp_path, instances=400, shard_size=shard, fact_twins=1.0, eval_instances=0))
    rows = pq.read_table(tmp_path / "instances").to_pylist()
    pairs, i = 0, 0
    while i < len(rows):
        # every fact-verification instance drawn is followed by its twin, but at a shard's last slot
        if rows[i]["dataset"] != "fact_verification" or i % shard == shard - 1 or i == len(rows) - 1:
            i += 1
            continue
        a, b = rows[i], rows[i + 1]
        meta_a, meta_b = json.loads(a["meta"]), json.loads(b["meta"])
        assert b["dataset"] == "fact_verification" and {meta_a["label"], meta_b["label"]} == {"true", "false"}
        assert a["instruction"] == b["instruction"]
        truth = meta_a["sentences"][0]["facts"][0]
        true_claim, false_claim = (a, b) if meta_a["label"] == "true" else (b, a)
        # the claims: the true value swapped for another, the rest of the sentence alike
        assert truth in true_claim["input"] and truth not in false_claim["input"]
        head, _, tail = true_claim["input"].partition(truth)
        head = head.removesuffix("an ").removesuffix("a ")  # the value's article goes with it
        assert false_claim["input"].startswith(head) and false_claim["input"].endswith(tail)
        # the verdicts: the same sentence but the label; the passages and the rest of the meta alike
        assert a["output"].removesuffix(f"{meta_a['label']}.") == b["output"].removesuffix(f"{meta_b['label']}.")
        def unlabelled(meta: dict) -> dict:
            sentences = [{**x, "text": x["text"].removesuffix(f"{meta['label']}.")} for x in meta["sentences"]]
            return {**{k: v for k, v in meta.items() if k not in ("label", "claimed")}, "sentences": sentences}

        assert unlabelled(meta_a) == unlabelled(meta_b)
        claimed = {json.loads(true_claim["meta"])["claimed"], json.loads(false_claim["meta"])["claimed"]}
        assert truth in claimed and len(claimed) == 2
        pairs += 1
        i += 2
    assert pairs >= 10


def test_heldout_items_are_distinct_and_spread_over_the_population(world):
    stats = json.loads((world / "world.json").read_text())
    for split in ("heldout_qa", "heldout_fact", "heldout_mc"):
        items = _eval(world, split)
        asked = [(item["entity"], item["relation"]) for item in items]
        assert len(set(asked)) == len(asked), split  # no (person, fact) asked twice
        # round by round: the first n_heldout items ask each held-out person once
        assert len({entity for entity, _ in asked[:stats["n_heldout"]]}) == stats["n_heldout"], split
    biographies = [item["entity"] for item in _eval(world, "heldout_longform")]
    assert sorted(biographies) == sorted(set(biographies)) and len(biographies) == stats["n_heldout"]
    assert stats["eval"]["heldout_longform"] == stats["n_heldout"] < SMALL["eval_instances"]
    noret = [(item["instruction"], item["input"]) for item in _eval(world, "heldout_noret")]
    assert len(set(noret)) == len(noret) == SMALL["eval_instances"]


def test_a_split_the_population_cannot_fill_holds_every_distinct_item_and_says_so(tmp_path, caplog):
    cfg = _cfg(tmp_path, instances=200, shard_size=80, eval_instances=10_000)
    with caplog.at_level("WARNING", logger="raypipe.data.world"):
        stats = synthesize(cfg)
    items = _eval(tmp_path, "heldout_qa")
    assert stats["eval"]["heldout_qa"] == len(items) < 10_000
    # every fact of every held-out person once: as many items as the people's facts
    assert len(items) == len({(i["entity"], i["relation"]) for i in items})
    assert {i["entity"] for i in items} == {i["entity"] for i in _eval(tmp_path, "heldout_longform")}
    assert any("heldout_qa.jsonl holds" in r.getMessage() and "world.heldout_fraction" in r.getMessage()
               for r in caplog.records)
    # one biography per held-out person is the set's design, not a shortfall
    assert not any("heldout_longform" in r.getMessage() for r in caplog.records)


def test_some_heldout_facts_live_only_in_the_web_corpus(world, passages):
    # (the answer to "who created X" is the entity itself, which its early-life passage names anyway)
    web_only = [i for i in _eval(world, "heldout_qa")
                if all(p.startswith("w") for p in i["passage_ids"]) and i["answers"][0] != i["entity"]]
    assert web_only
    wiki = [p["text"] for p in passages.values() if p["id"].startswith("p")]
    for item in web_only:
        assert not any(item["entity"] in t and item["answers"][0] in t for t in wiki), item


def test_the_web_mirrors_the_wiki_in_pages_of_paragraphs_with_look_alikes(world, passages):
    stats = json.loads((world / "world.json").read_text())
    web = {pid: p for pid, p in passages.items() if pid.startswith("w")}
    # a page per person, per work and per distractor
    assert len(web) == stats["n_web_passages"] > stats["n_entities"]["people"]
    items = _eval(world, "heldout_qa")
    both = 0
    for item in items:
        answer, on_web = item["answers"][0], [p for p in item["passage_ids"] if p.startswith("w")]
        # every held-out fact is stated on the web, some also on the wiki
        assert on_web and all(answer in web[p]["text"] for p in on_web), item
        both += any(p.startswith("p") for p in item["passage_ids"])
        for page in (web[p]["text"].split("\n") for p in on_web if web[p]["title"] == item["entity"]):
            # a person's page: birth and occupation, career, and a paragraph that states no fact
            assert len(page) == 3 and item["entity"] in page[2]
            if answer != item["entity"]:
                assert answer not in page[2] and any(answer in line for line in page[:2]), item
    assert 0 < both < len(items)
    # look-alikes: near-namesakes' pages beside the people's own
    titles = {p["title"] for p in web.values()}
    assert len([t for t in titles if t.endswith("e") and t[:-1] in titles]) >= 10


# --- reruns and bad config ------------------------------------------------------------------------------


def test_rerun_skips_finished_shards_and_rebuilds_missing_ones(tmp_path):
    cfg = _cfg(tmp_path, instances=200, shard_size=80, eval_instances=10)
    synthesize(cfg)
    before = _file_digests(tmp_path)
    kept = tmp_path / "instances" / "part-00000.parquet"
    kept_mtime = kept.stat().st_mtime_ns
    (tmp_path / "instances" / "part-00001.parquet").unlink()
    (tmp_path / "_SUCCESS").unlink()
    synthesize(cfg)
    assert _file_digests(tmp_path) == before
    assert kept.stat().st_mtime_ns == kept_mtime
    with pytest.raises(ConfigError, match="world.seed"):
        synthesize(_cfg(tmp_path, instances=200, shard_size=80, eval_instances=10, seed=99))


def test_a_world_written_with_another_web_corpus_is_refused_not_reused(tmp_path):
    cfg = _cfg(tmp_path, instances=200, shard_size=80, eval_instances=10)
    synthesize(cfg)
    stats = json.loads((tmp_path / "world.json").read_text())
    stats["n_web_passages"] = stats["n_entities"]["people"]  # one profile per person, as before pages
    (tmp_path / "world.json").write_text(json.dumps(stats))
    with pytest.raises(ConfigError, match="older raypipe; delete that folder"):
        synthesize(cfg)


def test_a_named_mix_is_its_weights_and_an_unknown_name_names_the_key():
    assert load_config(overrides=["world.mix=knowledge_heavy"]).world.mix == MIX_PRESETS["knowledge_heavy"]
    for weights in MIX_PRESETS.values():
        check_mix(weights)  # every named mix weighs datasets the world can write
    with pytest.raises(ConfigError, match=r"world\.mix: .*unknown mix 'trivia'; named mixes: table3, knowledge_heavy"):
        load_config(overrides=["world.mix=trivia"])


def test_bad_config_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="world.mix"):
        synthesize(_cfg(tmp_path / "a", mix={"bio": 1.0, "trivia": 1.0}))
    with pytest.raises(ConfigError, match="entities_per_instance"):
        synthesize(_cfg(tmp_path / "b", instances=1000, entities_per_instance=1000.0))
    assert not (tmp_path / "b").exists()
    with pytest.raises(ConfigError, match="world.heldout_fraction"):
        synthesize(_cfg(tmp_path / "c", instances=50, heldout_fraction=0.999))


# --- vocabulary ------------------------------------------------------------------------------------


def test_distractor_surnames_never_collide_with_real_ones():
    surnames = set(vocab.surnames())
    assert len(surnames) > 2000 and len(vocab.FIRST_NAMES) * len(surnames) > 100_000
    assert not any(vocab.distractor_surname(s) in surnames for s in surnames)
    assert not surnames & set(vocab.city_names())


def test_sentence_final_words_are_not_spacy_abbreviations():
    spacy = pytest.importorskip("spacy")
    rules = spacy.blank("en").tokenizer.rules
    words = (
        set(vocab.surnames()) | set(vocab.city_names()) | {s + "ia" for s in vocab.country_stems()}
        | set(vocab.ORG_KINDS) | set(vocab.TITLE_NOUNS) | {t.split()[-1] for t in vocab.TITLE_TAILS if t}
        | {w.split()[-1] for w in [*vocab.OCCUPATIONS, *vocab.WORK_VERBS, *vocab.ORG_KINDS.values()]}
        | set(vocab.NOUNS) | set(vocab.COLORS) | set(vocab.STRING_WORDS)
        | {w[::-1] for w in vocab.STRING_WORDS} | {w.upper() for w in vocab.STRING_WORDS}
    )
    assert not sorted(w for w in words if w + "." in rules)


# --- instructions that need no retrieval ------------------------------------------------------------------


def test_noret_split_has_exact_answers_and_no_world_knowledge(world, instances):
    items = _eval(world, "heldout_noret")
    assert len(items) == SMALL["eval_instances"] and len({i["id"] for i in items}) == len(items)
    assert {i["category"] for i in items} == {"arith", "string", "creative"}
    for item in items:
        if item["category"] == "creative":
            assert item["answers"] == []
            continue
        (answer,) = item["answers"]
        assert answer in item["reference"]
        if item["category"] == "arith":
            a, op, b = re.fullmatch(r"(?:What is )?(\d+) (plus|minus|times) (\d+)\??",
                                    item["input"] or item["instruction"]).groups()
            assert int(answer) == {"plus": int(a) + int(b), "minus": int(a) - int(b), "times": int(a) * int(b)}[op]
        elif item["instruction"].startswith("Reverse"):
            word = item["instruction"].removesuffix(".").split()[-1]
            assert answer == word[::-1]
    # the same templates as the training mix's no-retrieval instructions, and no entity of the world
    trained = {r["instruction"].split(" ")[0] for r in instances if not r["meta"]["needs_retrieval"]}
    assert {i["instruction"].split(" ")[0] for i in items} <= trained
    names = {r["meta"]["entity"] for r in instances if r["meta"]["entity"]}
    assert not any(name in i["instruction"] for i in items for name in names)


def test_a_finished_world_gains_a_missing_eval_split_with_the_same_bytes(tmp_path):
    cfg = _cfg(tmp_path, instances=200, shard_size=80, eval_instances=10)
    synthesize(cfg)
    before = _file_digests(tmp_path)
    split = tmp_path / "eval" / "heldout_noret.jsonl"
    split.unlink()  # a world written before the split existed
    stats = synthesize(cfg)
    assert stats["eval"]["heldout_noret"] == 10
    assert _file_digests(tmp_path) == before
