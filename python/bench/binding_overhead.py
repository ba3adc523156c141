"""Binding overhead: the same searches from Python and from Rust.

Builds (or reuses) an HNSW index of debian-minilm saved as a segment file,
times 1,000 queries with `sagitta-bench bench-search` (Rust, the same search code
without Python) and with `sagitta.Index.open(...).search` from Python, and
prints the difference per query in microseconds.

    python python/bench/binding_overhead.py [--data DIR] [--index FILE]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import sagitta

ROOT = Path(__file__).resolve().parents[2]


def best_of(repeat: int, fn) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/debian-minilm")
    ap.add_argument("--index", type=Path, default=Path("/tmp/sagitta-bench/minilm-hnsw.sgt"))
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cli", type=Path, default=ROOT / "target/release/sagitta-bench")
    args = ap.parse_args()

    queries_path = args.data / "queries.f16.npy"
    if not args.index.exists():
        args.index.parent.mkdir(parents=True, exist_ok=True)
        base = np.load(args.data / "base.f16.npy")
        index = sagitta.Index(384, metric="cos")
        t = time.perf_counter()
        index.add(np.arange(len(base)), base)
        print(f"built {len(base)} vectors in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        index.save(args.index)

    # A 16-vector flat index: the search itself costs well under a
    # microsecond, so the per-call difference is the binding's own cost.
    tiny_path = args.index.with_name("tiny-flat.sgt")
    tiny = sagitta.Index(384, metric="cos", kind="flat")
    tiny.add(np.arange(16), np.load(args.data / "base.f16.npy", mmap_mode="r")[:16])
    tiny.save(tiny_path)

    def run_rust(ef: int, k: int, path: Path = args.index) -> dict:
        cmd = [str(args.cli), "bench-search", "--index", str(path)]
        cmd += ["--queries", str(queries_path), "--k", str(k), "--ef", str(ef)]
        cmd += ["--repeat", str(args.repeat)]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    opened = {args.index: sagitta.Index.open(args.index), tiny_path: sagitta.Index.open(tiny_path)}
    queries = np.load(queries_path).astype(np.float32)  # converted once, outside the timing
    n = len(queries)

    def run_python(ef: int, k: int, path: Path = args.index) -> tuple[float, float, float]:
        index = opened[path]
        index.expansion_search = ef

        def one_by_one():
            for q in queries:
                index.search(q, k)

        single = best_of(args.repeat, one_by_one) / n * 1e6
        batch_1t = best_of(args.repeat, lambda: index.search(queries, k, threads=1)) / n * 1e6
        batch = n / best_of(args.repeat, lambda: index.search(queries, k))
        return single, batch_1t, batch

    # Rust and Python alternate, three rounds each, best of each kept: the
    # machine is shared, and a search costs far more than the binding.
    configs = [("hnsw 100k", args.index, args.ef, args.k), ("hnsw 100k", args.index, 8, 1)]
    configs.append(("flat 16", tiny_path, 1, 1))
    results = {}
    for name, path, ef, k in configs:
        rounds = [(run_rust(ef, k, path), run_python(ef, k, path)) for _ in range(3)]
        rust = min((r for r, _ in rounds), key=lambda r: r["single_us_per_query"])
        rust["batch_qps"] = max(r["batch_qps"] for r, _ in rounds)
        py = tuple(f([p[i] for _, p in rounds]) for i, f in enumerate((min, min, max)))
        results[(name, ef, k)] = (rust, py)

    print(f"# isa {sagitta.isa()}, {n} queries, best of {args.repeat} passes x 3 rounds")
    print("| index | ef | k | path | µs / query | QPS | Python - Rust µs / query |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for (name, ef, k), (rust, (py_single, py_batch_1t, py_batch)) in results.items():
        rs = rust["single_us_per_query"]
        rows = [
            ("Rust, one query per call, 1 thread", rs, ""),
            ("Python, one query per call, 1 thread", py_single, f"{py_single - rs:+.2f}"),
            ("Python, one batch call, threads=1", py_batch_1t, f"{py_batch_1t - rs:+.2f}"),
        ]
        for label, us, diff in rows:
            print(f"| {name} | {ef} | {k} | {label} | {us:.2f} | {1e6 / us:.0f} | {diff} |")
        print(f"| {name} | {ef} | {k} | Rust, one batch, all cores | | {rust['batch_qps']:.0f} | |")
        print(f"| {name} | {ef} | {k} | Python, one batch, all cores | | {py_batch:.0f} | |")


if __name__ == "__main__":
    main()
