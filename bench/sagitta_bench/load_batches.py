"""`python -m sagitta_bench.load_batches`: what a writer sees during a bulk
load of float vectors into a default collection (issue 63 item 1: no
batch longer than 5x the median).

    python -m sagitta_bench.load_batches [--dataset minilm-gmm:5000000]
        [--rows N] [--batch 10000] [--repeats 1] [--dir DIR] [--out DIR]

Each repeat is a fresh process: a default ``Collection`` (cosine, 384-d:
sq8 graph codes beside the f32 rows), the dataset's rows added in order
in batches of ``--batch`` (keys 0..N), no ``optimize()``; the optimizer
builds and merges in the background as it would for a user. Recorded per
repeat: the load's wall time, batch seconds (median, p99, max, max /
median), the process's peak RSS, the segments when the load returned and
the close's time. Results in ``--out``/<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .report import save

OUT = Path(__file__).resolve().parents[1] / "results" / "load-batches"


def one_load(spec: str, rows: int, batch: int, root: Path) -> dict:
    """One load in this process (the child's side)."""
    import sagitta

    from . import datasets

    base = np.load(datasets.load(spec, 10).dir / "base.f32.npy", mmap_mode="r")
    rows = min(rows or len(base), len(base))
    c = sagitta.Collection.create(root / "c", ndim=base.shape[1], metric="cos")
    secs = []
    t0 = time.perf_counter()
    for at in range(0, rows, batch):
        x = np.ascontiguousarray(base[at : min(at + batch, rows)])
        t = time.perf_counter()
        c.add(np.arange(at, at + len(x), dtype=np.uint64), x)
        secs.append(time.perf_counter() - t)
    load_s = time.perf_counter() - t0
    segments = int(c.stats()["segments"])
    t = time.perf_counter()
    c.close()
    close_s = time.perf_counter() - t
    b = np.array(secs)
    med = float(np.median(b))
    return {
        "rows": rows,
        "load_s": load_s,
        "rows_per_s": rows / load_s,
        "batch_median_s": med,
        "batch_p99_s": float(np.percentile(b, 99)),
        "batch_max_s": float(b.max()),
        "max_over_median": float(b.max() / med),
        "slowest_at_row": int(b.argmax()) * batch,
        "segments_at_return": segments,
        "close_s": close_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def report(res: dict) -> str:
    e = res["env"]
    lines = [
        f"# Bulk load, batch times: {res['stamp']}",
        "",
        f"`{res['command']}`",
        "",
        f"{e['cpu']}, {e['cores']} cores, ISA {e['isa']}, load average "
        f"{e['loadavg_start']:.2f} at start, {e['loadavg_end']:.2f} at end. "
        f"{res['config']['rows']:,} rows of `{res['config']['dataset']}` in "
        f"batches of {res['config']['batch']:,} into a default collection, one fresh process "
        "per repeat, no `optimize()`.",
        "",
        "| repeat | load s | rows/s | batch median / p99 / max s | max / median (goal < 5x) "
        "| slowest at row | segments at return | close s | peak RSS MiB |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(res["repeats"]):
        lines.append(
            f"| {i + 1} | {r['load_s']:.1f} | {r['rows_per_s']:,.0f} | "
            f"{r['batch_median_s']:.3f} / {r['batch_p99_s']:.3f} / {r['batch_max_s']:.3f} | "
            f"{r['max_over_median']:.1f}x | {r['slowest_at_row']:,} | {r['segments_at_return']} | "
            f"{r['close_s']:.1f} | {r['peak_rss_mib']:,.0f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="minilm-gmm:5000000")
    ap.add_argument("--rows", type=int, default=0, help="0: every row of the dataset")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None, help="where the collections go (temp)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_load(a.dataset, a.rows, a.batch, a.dir)))
        return
    from . import datasets
    from .env import run_env

    datasets.load(a.dataset, 10)  # generated and cached once, before any timing
    env0 = run_env("", None) | {"loadavg_start": os.getloadavg()[0]}
    reps = []
    for i in range(a.repeats):
        root = Path(tempfile.mkdtemp(prefix="load-batches-", dir=a.dir))
        try:
            cmd = [sys.executable, "-m", "sagitta_bench.load_batches", "--child"]
            cmd += ["--dataset", a.dataset, "--rows", str(a.rows), "--batch", str(a.batch)]
            out = subprocess.run(
                [*cmd, "--dir", str(root)],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parents[1],
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["load_average"] = os.getloadavg()[0]
        reps.append(r)
        print(f"repeat {i + 1}: {json.dumps(r)}", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    res = {
        "stamp": stamp,
        "command": "python -m sagitta_bench.load_batches " + " ".join(sys.argv[1:]),
        "env": env0 | {"loadavg_end": os.getloadavg()[0]},
        "config": {"dataset": a.dataset, "rows": reps[0]["rows"], "batch": a.batch},
        "repeats": reps,
    }
    save(a.out, stamp, res, report(res))


if __name__ == "__main__":
    main()
