"""The refactor check finds a changed row and a missing variant, and passes identical runs."""

from tests.same_predictions import compare, main


def _write(folder, files):
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)


def test_identical_runs_pass(tmp_path):
    files = {"adaptive.jsonl": '{"id": 1}\n{"id": 2}\n', "never.jsonl": '{"id": 1}\n'}
    _write(tmp_path / "a", files)
    _write(tmp_path / "b", files)
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0


def test_a_changed_row_and_a_missing_variant_fail(tmp_path):
    _write(tmp_path / "a", {"adaptive.jsonl": '{"id": 1}\n{"id": 2}\n', "never.jsonl": '{"id": 1}\n'})
    _write(tmp_path / "b", {"adaptive.jsonl": '{"id": 1}\n{"id": 3}\n'})
    lines, bad = compare(tmp_path / "a", tmp_path / "b")
    assert bad == ["adaptive.jsonl", "never.jsonl"]
    assert "  first differing row: 1" in lines
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1


def test_an_empty_run_is_no_evidence(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
