"""The binary-codes scale benchmark (`python -m sagitta_bench.binary_scale`)
at a size CI can afford: the same path as the 100M run (adds through
`sagitta.compat.iscc`, close, a fresh read-only process with lookups and
searches), so the harness that reports the scale figures is itself
checked: every code added is found, absent keys are not, and recall is
measured against the exact scan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_binary_scale_smoke(tmp_path):
    out = tmp_path / "out"
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "sagitta_bench.binary_scale",
            "--rows",
            "120000",
            "--batch",
            "20000",
            "--shard-size",
            str(1 << 20),
            "--queries",
            "30",
            "--dir",
            str(tmp_path),
            "--out",
            str(out),
        ],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    (res,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    add, read = res["add"], res["read"]
    assert add["rows"] == 120_000 and len(add["per_batch"]) == 6
    assert read["len"] == 120_000
    # A 1 MiB shard size makes several segments, as the 100M run's 64 MiB.
    assert read["shard_count"] > 1
    assert read["first_contains_found"]
    assert 40 <= res["bytes_on_disk"] / add["rows"] <= 200  # 32 B code + 8 B key + index
    # The stored codes come back from the queries built on them.
    assert read["recall_at_10"] >= 0.9, read
    assert read["source_row_found"] >= 0.9, read
    assert (out / (out.glob("*.json").__next__().stem + ".md")).exists()
    assert not (tmp_path / "index").exists()  # removed without --keep
