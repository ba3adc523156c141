"""``optimize()`` on a busy machine: the time a caller waits for the
optimizer, alone and beside CPU-bound processes (nice 0, one per core by
default), the two taking turns.

    python -m sagitta_bench busy --rows 20000 --rounds 3

Each round loads ``--rows`` rows of ``--dataset`` (debian-minilm) into a new default
collection (10,000 per ``add``), starts the busy processes (``--burners``),
and times ``optimize()``; then the same without them. Background work runs
at nice 19 so searches and writes come first; what a caller waits for
should not run there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import datasets


def one(base: np.ndarray, burners: int) -> float:
    import sagitta

    with tempfile.TemporaryDirectory(prefix="sagitta-busy-") as d:
        c = sagitta.Collection.create(os.path.join(d, "c"), ndim=base.shape[1], metric="cos")
        for at in range(0, len(base), 10_000):
            rows = base[at : at + 10_000]
            c.add(np.arange(at, at + len(rows), dtype=np.uint64), rows)
        procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)
        ]
        try:
            t = time.perf_counter()
            c.optimize()
            took = time.perf_counter() - t
        finally:
            for p in procs:
                p.kill()
                p.wait()
        c.close()
    return took


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench busy", description=__doc__)
    ap.add_argument("--dataset", default="debian-minilm", help="as for `run` (dense f32 sets)")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    import sagitta

    base = np.ascontiguousarray(datasets.load(args.dataset, 10).base()[: args.rows])
    print(f"sagitta {sagitta.__version__} ({sagitta.isa()}), {os.cpu_count()} cores")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    times: dict[int, list[float]] = {0: [], args.burners: []}
    for r in range(args.rounds):
        for b in times:
            times[b].append(one(base, b))
            print(f"round {r + 1}: {b} busy processes: optimize() {times[b][-1]:.2f} s", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print(f"\n| busy processes | optimize() of {args.rows} rows, s (each round) | median |")
    print("|---|---|---|")
    for b, ts in times.items():
        each = ", ".join(f"{t:.2f}" for t in ts)
        print(f"| {b} | {each} | {statistics.median(ts):.2f} |")
