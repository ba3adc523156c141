"""The bulk-load benchmark (`python -m sagitta_bench.load_batches`) at a
size CI can afford: the same path as the 5M run (a fresh process per
repeat adding the dataset's rows in batches into a default collection), so
the harness that reports the writer's batch times is itself checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_load_batches_smoke(tmp_path):
    out = tmp_path / "out"
    work = tmp_path / "work"
    work.mkdir()
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "sagitta_bench.load_batches",
            "--dataset",
            "synthetic:30000:32",
            "--batch",
            "2000",
            "--repeats",
            "2",
            "--dir",
            str(work),
            "--out",
            str(out),
        ],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SAGITTA_BENCH_CACHE": str(tmp_path / "cache")},
    )
    assert got.returncode == 0, got.stderr[-3000:]
    (res,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    assert res["config"] == {"dataset": "synthetic:30000:32", "rows": 30_000, "batch": 2000}
    assert len(res["repeats"]) == 2
    for r in res["repeats"]:
        assert r["rows"] == 30_000
        assert 0 < r["batch_median_s"] <= r["batch_p99_s"] <= r["batch_max_s"]
        assert r["max_over_median"] >= 1.0
        assert r["slowest_at_row"] % 2000 == 0 and r["slowest_at_row"] < 30_000
    assert (out / (next(out.glob("*.json")).stem + ".md")).exists()
    assert list(work.iterdir()) == []  # each repeat's collection removed
