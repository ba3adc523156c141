"""BENCHMARKS.md written by the harness: whole, or spliced between markers."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

OLD = BENCH / "tests" / "data" / "old-harness"


def test_report_splices_only_between_its_markers(tmp_path):
    from sagitta_bench import cli

    page = tmp_path / "BENCHMARKS.md"
    key = "run:debian-minilm-k10-full"
    page.write_text(
        "# Today\n\nWritten by hand.\n\n"
        f"<!-- sagitta_bench:begin {key} -->\nstale figures\n<!-- sagitta_bench:end {key} -->\n\n"
        "Reading, by hand.\n"
    )
    cli.write_benchmarks(page, OLD)
    md = page.read_text()
    assert md.startswith("# Today\n\nWritten by hand.\n\n")
    assert md.endswith("\n\nReading, by hand.\n")
    inside = md.split(f"begin {key} -->")[1].split("<!-- sagitta_bench:end")[0]
    assert "stale figures" not in inside and "Command: `python -m sagitta_bench run" in inside
    assert "| 0.95 | 3276 | – | sagitta-hnsw | hnswlib | 3971 | – | 0.83× |" in inside
    assert "<details>" not in inside and "Run finished" in inside
    assert "debian-minilm-k10-full.md" in inside  # where the sweeps are
    # Rewriting the same results gives the same page.
    cli.write_benchmarks(page, OLD)
    assert page.read_text() == md


def test_report_writes_a_page_without_markers_whole(tmp_path):
    from sagitta_bench import cli

    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Anything\n")
    cli.write_benchmarks(page, OLD)
    md = page.read_text()
    assert md.startswith("# Benchmarks\n") and "<details><summary>sagitta-hnsw</summary>" in md
