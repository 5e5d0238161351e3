"""Within a pass, eval keeps each result as it arrives: a run stopped mid-pass (killed, a session's end)
loses no decoded item, and the rerun decodes only what some variant of the pass still lacks."""

from __future__ import annotations

import json

import pytest

from raypipe.eval.datasets import EvalItem
from raypipe.eval.partial import partial_path, read_partial
from raypipe.eval.runner import pass_results

ITEMS = [EvalItem(id=f"q{i}", set="heldout_qa", task="qa", instruction=f"Who wrote book {i}?", input="",
                  golds=(f"Author {i}",)) for i in range(4)]
GROUP = ["selfrag_adaptive", "selfcrag"]
PRINTS = {"selfrag_adaptive": "fp-a", "selfcrag": "fp-b"}


class Decoder:
    """Decodes items in order, each under every variant of the pass; stops (as a killed actor would)
    after `stop_after` rows."""

    def __init__(self, stop_after: int | None = None, tag: str = "first run"):
        self.stop_after, self.tag, self.asked = stop_after, tag, []

    def __call__(self, todo: list[EvalItem]):
        self.asked.append([item.id for item in todo])
        sent = 0
        for item in todo:
            for variant in GROUP:
                if sent == self.stop_after:
                    raise RuntimeError("the actor died")
                sent += 1
                yield {"variant": variant, "item": item.to_json(),
                       "result": json.dumps({"text": f"{item.id} by {variant}, {self.tag}"})}


def _texts(results: dict) -> dict[str, list[str]]:
    return {name: [result["text"] for _, result in rows] for name, rows in results.items()}


def test_a_pass_stopped_midway_keeps_its_results_and_the_rerun_decodes_only_the_rest(tmp_path):
    with pytest.raises(RuntimeError, match="the actor died"):
        pass_results(Decoder(stop_after=5), ITEMS, GROUP, tmp_path, PRINTS, "pass 1")
    # q0 and q1 under both variants, q2 under the first only
    rerun = Decoder(tag="rerun")
    results = pass_results(rerun, ITEMS, GROUP, tmp_path, PRINTS, "pass 1")
    assert rerun.asked == [["q2", "q3"]]
    assert _texts(results) == {
        "selfrag_adaptive": ["q0 by selfrag_adaptive, first run", "q1 by selfrag_adaptive, first run",
                             "q2 by selfrag_adaptive, first run", "q3 by selfrag_adaptive, rerun"],
        "selfcrag": ["q0 by selfcrag, first run", "q1 by selfcrag, first run",
                     "q2 by selfcrag, rerun", "q3 by selfcrag, rerun"],
    }
    # the rerun's duplicate of q2 under the first variant was not appended
    lines = partial_path(tmp_path, "selfrag_adaptive").read_text().splitlines()
    assert [json.loads(line).get("id") for line in lines[1:]] == ["q0", "q1", "q2", "q3"]


def test_kept_results_of_other_inputs_are_decoded_again(tmp_path):
    with pytest.raises(RuntimeError):
        pass_results(Decoder(stop_after=4), ITEMS, GROUP, tmp_path, PRINTS, "pass 1")
    changed = {**PRINTS, "selfcrag": "fp-b2"}  # e.g. its thresholds changed
    rerun = Decoder(tag="rerun")
    results = pass_results(rerun, ITEMS, GROUP, tmp_path, changed, "pass 1")
    assert rerun.asked == [["q0", "q1", "q2", "q3"]]
    assert _texts(results)["selfcrag"] == [f"q{i} by selfcrag, rerun" for i in range(4)]
    assert _texts(results)["selfrag_adaptive"][:2] == [f"q{i} by selfrag_adaptive, first run" for i in range(2)]
    header = partial_path(tmp_path, "selfcrag").read_text().splitlines()[0]
    assert json.loads(header) == {"fingerprint": "fp-b2"}


def test_a_line_cut_short_by_the_kill_is_decoded_again(tmp_path):
    with pytest.raises(RuntimeError):
        pass_results(Decoder(stop_after=4), ITEMS, GROUP, tmp_path, PRINTS, "pass 1")
    path = partial_path(tmp_path, "selfcrag")
    path.write_text(path.read_text()[:-20])  # q1's line, half written
    rerun = Decoder(tag="rerun")
    results = pass_results(rerun, ITEMS, GROUP, tmp_path, PRINTS, "pass 1")
    assert rerun.asked == [["q1", "q2", "q3"]]
    assert _texts(results)["selfcrag"] == ["q0 by selfcrag, first run"] + [f"q{i} by selfcrag, rerun"
                                                                           for i in (1, 2, 3)]
    # and the file reads back whole for the next stop
    assert sorted(read_partial(path, "fp-b")) == [("heldout_qa", f"q{i}") for i in range(4)]
