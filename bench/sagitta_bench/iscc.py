"""Sagitta against iscc-usearch's ShardedIndex, in the same run, through
the same calls (``sagitta.compat.iscc`` against ``iscc_usearch``).

    python -m sagitta_bench.iscc [--rows 1000000] [--segments 1,10,34]
        [--key-bits 64,128] [--repeats 5] [--out bench/results/iscc]

iscc-usearch is installed from PyPI into its own environment
(``$SAGITTA_BENCH_CACHE/iscc-venv``: it ships a fork of ``usearch``).
Workloads: random 256-bit codes (queries: base rows with 24 bits
flipped) under Hamming, laid out in each number of segments (shards);
and the ISCC text codes of debian-minilm (64 / 128 / 256 bits) under
NPHD; each with 64-bit keys (``ShardedIndex``) and 128-bit keys
(``ShardedIndex128``, 16-byte keys). Exact top-k from numpy; recall@10 is tie-aware. The engines run
one after the other for each workload, in alternating order, each in a
fresh process; each timed row is repeated and reported as median
(min-max). The batch search is run again at each expansion of
``--ef-sweep`` (batch and single queries) so the two engines are also
compared at equal recall: each at its smallest expansion reaching the
recall of the better one at the shared default (ef 64), or, where the
other engine never reaches it, the highest recall both reach."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .datasets import cache_root, hamming_topk, hamming_topk_flat, load

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def iscc_python() -> str:
    """The interpreter of an environment holding iscc-usearch (made once)."""
    venv = cache_root() / "iscc-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import iscc_usearch"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run(
            [str(py), "-m", "pip", "install", "--quiet", "iscc-usearch==0.8.1", "numpy"],
            check=True,
        )
    return str(py)


def random_codes(rows: int, seed: int = 0) -> Path:
    """Random 256-bit codes, 1,000 queries near base rows, exact top-100."""
    d = cache_root() / f"iscc-random-{rows}-{seed}"
    if (d / "gt_dist.npy").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(rows, 32), dtype=np.uint8)
    pick = rng.integers(0, rows, 1000)
    queries = base[pick].copy()
    for q in queries:
        bits = rng.choice(256, 24, replace=False)
        q[bits // 8] ^= (1 << (bits % 8)).astype(np.uint8)
    topk = hamming_topk if rows <= 2_000_000 else hamming_topk_flat
    gt, gt_dist = topk(base, queries, 100)
    np.save(d / "base.u8.npy", base)
    np.save(d / "queries.u8.npy", queries)
    np.save(d / "gt.npy", gt)
    np.save(d / "gt_dist.npy", gt_dist)
    return d


def run_worker(py: str, engine: str, spec: dict, work: Path) -> dict:
    sp = work / f"spec-{engine}.json"
    sp.write_text(json.dumps(spec))
    r = subprocess.run(
        [py, str(HERE / "iscc_worker.py"), engine, str(sp)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{engine} worker failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


ROWS = [
    ("add (rows/s)", "add_s", "rate"),
    ("open read-only + first lookup, sealed", "open_sealed_s", "time"),
    ("open read-only + first lookup, after a 10k tail", "open_after_tail_s", "time"),
    ("contains present, 1 key", "contains_present_1_s", "time"),
    ("contains present, 100 keys", "contains_present_100_s", "time"),
    ("contains present, 100k keys", "contains_present_100k_s", "time"),
    ("contains absent, 1 key", "contains_absent_1_s", "time"),
    ("contains absent, 100 keys", "contains_absent_100_s", "time"),
    ("contains absent, 100k keys", "contains_absent_100k_s", "time"),
    ("get, 1 key", "get_1_s", "time"),
    ("get, 100 keys", "get_100_s", "time"),
    ("search, 1 query", "search_1_s", "time"),
    ("search, batch of 1,000", "search_batch_s", "time"),
]


def fmt_t(x: float) -> str:
    if x < 1e-3:
        return f"{x * 1e6:.1f} µs"
    if x < 1:
        return f"{x * 1e3:.2f} ms"
    return f"{x:.2f} s"


def table(name: str, res: dict) -> list[str]:
    s, i = res["sagitta"], res["iscc"]
    lines = [
        f"### {name}: {s['rows']:,} rows, Sagitta {s['segments']} segments / "
        f"iscc-usearch {i['segments']} shards",
        "",
        "| row | Sagitta | iscc-usearch | ratio (Sagitta ×) |",
        "|---|---|---|---|",
    ]
    for label, key, kind in ROWS:
        a, b = s[key], i[key]
        if kind == "rate":
            ra, rb = s["rows"] / a, i["rows"] / b
            lines.append(f"| {label} | {ra:,.0f} | {rb:,.0f} | {ra / rb:.2f} |")
            continue
        cell = lambda v: f"{fmt_t(v['median'])} ({fmt_t(v['min'])}–{fmt_t(v['max'])})"  # noqa: E731
        lines.append(f"| {label} | {cell(a)} | {cell(b)} | {b['median'] / a['median']:.2f} |")
    lines.append(
        f"| recall@10 (tie-aware, batch) | {s['recall_at_10']:.4f} | {i['recall_at_10']:.4f} | |"
    )
    eq = equal_recall(s, i)
    if eq is not None:
        target, how, (es, ps), (ei, pi) = eq
        for label, field in (("batch of 1,000", "time_s"), ("1 query", "single_s")):
            ts, ti = (p.get(field) if p else None for p in (ps, pi))
            cell = lambda ef, t: (  # noqa: E731
                f"{fmt_t(t['median'])} at ef {ef}" if t else f"recall {target:.4f} not reached"
            )
            ratio = f"{ti['median'] / ts['median']:.2f}" if ts and ti else "n/a"
            lines.append(
                f"| search, {label} at equal recall@10 ≥ {target:.4f} ({how}) "
                f"| {cell(es, ts)} | {cell(ei, ti)} | {ratio} |"
            )
    return [*lines, ""]


def equal_recall(s: dict, i: dict):
    """Both engines at equal recall: the recall of the better one at the
    shared default expansion where the other reaches it within its sweep,
    else the highest recall both reach. Returns (target, how it was
    chosen, (ef, sweep point) of Sagitta, (ef, sweep point) of
    iscc-usearch), each engine at the smallest expansion of its sweep that
    reaches the target ((None, None) when none does)."""
    if not s.get("batch_sweep") or not i.get("batch_sweep"):
        return None

    def first(res, target):
        for p in sorted(res["batch_sweep"], key=lambda p: p["ef"]):
            if p["recall_at_10"] >= target - 1e-9:
                return p["ef"], p
        return None, None

    target = max(s["recall_at_10"], i["recall_at_10"])
    how = "the better engine's at ef 64"
    if first(s, target)[0] is None or first(i, target)[0] is None:
        best = lambda res: max(p["recall_at_10"] for p in res["batch_sweep"])  # noqa: E731
        target = min(best(s), best(i))
        how = "the highest both reach"
    return target, how, first(s, target), first(i, target)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--segments", default="1,10,34")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--single-queries", type=int, default=200)
    ap.add_argument("--skip-nphd", action="store_true")
    ap.add_argument("--key-bits", default="64,128", help="key widths to run, of 64 and 128")
    ap.add_argument(
        "--ef-sweep",
        default="64,80,96,128,192",
        help="search expansions of the batch run again for the equal-recall row ('' for none)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "iscc")
    a = ap.parse_args(argv)
    py_iscc = iscc_python()
    py_sag = sys.executable
    work = cache_root() / "iscc-work"
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "isa": __import__("sagitta").isa(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": {},
    }
    jobs = []
    widths = [int(x) for x in a.key_bits.split(",")]
    sweep = [int(x) for x in a.ef_sweep.split(",") if x]
    d = random_codes(a.rows)
    for bits in widths:
        for segs in [int(x) for x in a.segments.split(",")]:
            spec = {
                "metric": "hamming",
                "ndim": 256,
                "base": str(d / "base.u8.npy"),
                "queries": str(d / "queries.u8.npy"),
                "gt_dist": str(d / "gt_dist.npy"),
                "segments": segs,
                "bytes_per_row": 32 + 16 + 132,
                "repeats": a.repeats,
                "single_queries": a.single_queries,
                "dir": str(work),
                "key_bits": bits,
                "ef_sweep": sweep,
            }
            jobs.append((f"Hamming 256-bit, {segs} segment(s), {bits}-bit keys", spec))
    for bits in [] if a.skip_nphd else widths:
        ds = load("debian-minilm-nphd", 10)
        jobs.append(
            (
                f"NPHD, ISCC text codes of debian-minilm (64/128/256-bit), {bits}-bit keys",
                {
                    "metric": "nphd",
                    "max_dim": 256,
                    "base": str(ds.dir / "base.u8.npy"),
                    "base_len": str(ds.dir / "base_len.npy"),
                    "queries": str(ds.dir / "queries.u8.npy"),
                    "queries_len": str(ds.dir / "queries_len.npy"),
                    "gt_dist": str(ds.dir / "gt_dist.npy"),
                    "segments": 1,
                    "bytes_per_row": 48 + 16 + 132,
                    "repeats": a.repeats,
                    "single_queries": a.single_queries,
                    "dir": str(work),
                    "key_bits": bits,
                    "ef_sweep": sweep,
                },
            )
        )
    md = []
    for n, (name, spec) in enumerate(jobs):
        order = ["iscc", "sagitta"] if n % 2 == 0 else ["sagitta", "iscc"]
        res = {}
        for engine in order:
            py = py_iscc if engine == "iscc" else py_sag
            res[engine] = run_worker(py, engine, spec, work)
            print(f"{name}: {engine} done", file=sys.stderr)
        results["runs"][name] = res
        md += table(name, res)
        print("\n".join(table(name, res)))
    results["loadavg_end"] = os.getloadavg()
    a.out.mkdir(parents=True, exist_ok=True)
    tag = f"iscc-{a.rows}"
    (a.out / f"{tag}.json").write_text(json.dumps(results, indent=1))
    head = [
        f"# Sagitta vs iscc-usearch {a.rows:,} rows ({results['started']})",
        "",
        f"ISA {results['isa']}, {results['cores']} cores, load average "
        f"{results['loadavg_start'][0]:.2f} at start, {results['loadavg_end'][0]:.2f} at end. "
        f"Times: median (min–max) of {a.repeats} repeats; ratio = iscc time / Sagitta time "
        "(above 1: Sagitta faster).",
        "",
    ]
    (a.out / f"{tag}.md").write_text("\n".join(head + md))


if __name__ == "__main__":
    main()
