"""docs/benchmarks.md shows what ``bench.results`` renders from ``bench/results/*.jsonl``,
so the page cannot drift from the data; recording a run makes its figures the current ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import results
from bench.results import Row

PAGE = results.ROOT / "docs" / "benchmarks.md"


def test_the_page_shows_the_table_the_data_renders() -> None:
    page = PAGE.read_text(encoding="utf-8")
    expected = results.page_with_table(page, results.render(results.load()))
    assert page == expected, "run: python -m bench.results --write docs/benchmarks.md"
    assert len(page.splitlines()) <= 150


def test_every_stored_row_names_its_run() -> None:
    rows = results.load()
    assert rows, "bench/results/ holds the current figures"
    for row in rows:
        assert row.date and row.commit and row.machine and row.metric and row.system
        assert row.ratio is not None or row.value is not None or row.ratio_range or row.value_range


def test_a_recorded_run_replaces_the_figures_it_measured_again(tmp_path: Path) -> None:
    machine = "a test machine"
    results.append_run(
        "bench.threaded",
        [Row("processing", "dp-pgmq", "thr-pgmq", ratio=0.9), Row("processing", "dp-table", "x")],
        machine=machine,
        commit="aaaaaaa",
        date="2026-12-01 10:00",
        directory=tmp_path,
    )
    path = results.append_run(
        "bench.threaded",
        [Row("processing", "dp-pgmq", "thr-pgmq", ratio=1.1, ratio_range=(1.0, 1.2))],
        machine=machine,
        commit="bbbbbbb",
        date="2026-12-02 10:00",
        directory=tmp_path,
    )
    assert path == tmp_path / "threaded.jsonl"
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(stored) == 3 and stored[2]["ratio_range"] == [1.0, 1.2]
    shown = results.current(results.load(tmp_path))
    assert [(row.system, row.ratio, row.commit) for row in shown] == [
        ("dp-pgmq", 1.1, "bbbbbbb"),
        ("dp-table", None, "aaaaaaa"),
    ]
    table = results.render(results.load(tmp_path))
    assert "| processing | `dp-pgmq` | `thr-pgmq` | 1.10 (1.00-1.20) |" in table
    assert "0.90" not in table
    assert "`python -m bench.threaded`" in table


def test_a_run_of_an_unknown_benchmark_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        results.append_run("bench.nope", [Row("m", "s")], directory=tmp_path)
    assert not list(tmp_path.iterdir())
