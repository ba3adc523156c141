"""`python -m sagitta_bench.binary_scale`: many 256-bit binary codes
(iscc-style) written through ``sagitta.compat.iscc``, then read back.

    python -m sagitta_bench.binary_scale --rows 100000000 [--batch 1000000]
        [--shard-size BYTES] [--dir DIR] [--queries 200] [--out DIR]

What it measures (``--out``/<stamp>.json and .md):

1. **Add.** ``--rows`` random codes with random 64-bit keys (a hash of the
   row number, as content-derived ISCC keys are) added in batches of
   ``--batch`` through ``ShardedIndex.add`` (the default settings but
   ``shard_size``); seconds per batch, rows per second per tenth of the
   run (goal: the last tenth at least 0.9x the first), the slowest batch
   against the median, resident memory, and the segments the optimizer
   made. Then ``close()``: bytes on disk per code.
2. **Read-only open** in a fresh process (the page cache dropped first
   when this process may): ``ShardedIndex(path, read_only=True)`` and the
   first ``contains`` of a key, each timed (goal: both within 50 ms);
   then ``contains`` and ``get`` of single present and absent keys (p50 /
   p99 over ``--queries`` calls each) and of a batch of 10,000.
3. **Search** (same process): ``--queries`` queries, each a stored code
   with 24 bits flipped, one per call at the default settings: p50 / p99
   and recall@10 against ``search(..., exact=True)`` (every segment
   scanned exactly), the hit rate of the source row, and the exact
   search's own latency.

Codes are not kept: batch ``i`` is regenerated from the seed when the
queries need it.
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

OUT = Path(__file__).resolve().parents[1] / "results" / "binary-scale"
NDIM = 256
BYTES = NDIM // 8


def keys_of(rows: np.ndarray) -> np.ndarray:
    """Random-looking distinct 64-bit keys for row numbers (splitmix64's
    finaliser: a bijection), below 2**63 so none is reserved."""
    z = rows.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) >> np.uint64(1)


def codes_of(batch: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, batch]).integers(0, 256, (size, BYTES), dtype=np.uint8)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _pcts(xs: list) -> dict:
    a = np.asarray(xs, dtype=np.float64) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99))}


def add_phase(path: Path, rows: int, batch: int, shard_size: int, seed: int) -> dict:
    from sagitta.compat.iscc import ShardedIndex

    idx = ShardedIndex(
        path=str(path), ndim=NDIM, metric="hamming", dtype="b1", shard_size=shard_size
    )
    per = []
    t0 = time.perf_counter()
    for b, lo in enumerate(range(0, rows, batch)):
        n = min(batch, rows - lo)
        keys = keys_of(np.arange(lo, lo + n))
        codes = codes_of(b, n, seed)
        t = time.perf_counter()
        idx.add(keys, codes)
        dt = time.perf_counter() - t
        st = idx.stats()
        per.append(
            {"rows": lo + n, "seconds": dt, "rss_mib": _rss_mib(), "shards": st["view_shards"]}
        )
        if b % 10 == 0 or lo + n == rows:
            print(
                f"  {lo + n:>12,} rows  {n / dt:>12,.0f} rows/s  rss {per[-1]['rss_mib']:,.0f} MiB"
                f"  shards {per[-1]['shards']}",
                flush=True,
            )
    wall = time.perf_counter() - t0
    t = time.perf_counter()
    idx.close()
    close_s = time.perf_counter() - t
    secs = np.array([p["seconds"] for p in per])
    sizes = np.diff([0] + [p["rows"] for p in per])
    tenth = max(1, len(per) // 10)
    first = sizes[:tenth].sum() / secs[:tenth].sum()
    last = sizes[-tenth:].sum() / secs[-tenth:].sum()
    return {
        "rows": rows,
        "batch": batch,
        "wall_s": wall,
        "close_s": close_s,
        "rows_per_s": rows / wall,
        "first_tenth_rows_per_s": float(first),
        "last_tenth_rows_per_s": float(last),
        "last_over_first": float(last / first),
        "batch_s_median": float(np.median(secs)),
        "batch_s_max": float(secs.max()),
        "peak_rss_mib": max(p["rss_mib"] for p in per),
        "per_batch": per,
    }


def read_phase(path: str, rows: int, batch: int, seed: int, queries: int) -> dict:
    """Runs in a fresh process (``--read``)."""
    from sagitta.compat.iscc import ShardedIndex

    rng = np.random.default_rng(seed + 1)
    present = keys_of(rng.integers(0, rows, queries))
    absent = keys_of(np.arange(rows, rows + queries))
    t0 = time.perf_counter()
    idx = ShardedIndex(path=path, read_only=True)
    t1 = time.perf_counter()
    first = bool(idx.contains(int(present[0])))
    t2 = time.perf_counter()
    out: dict = {
        "open_ms": (t1 - t0) * 1e3,
        "first_contains_ms": (t2 - t1) * 1e3,
        "open_and_first_contains_ms": (t2 - t0) * 1e3,
        "first_contains_found": first,
        "rss_after_open_mib": _rss_mib(),
        "len": len(idx),
        "shard_count": idx.shard_count,
    }

    def timed(fn, keys) -> tuple:
        lat, got = [], []
        for k in keys:
            t = time.perf_counter()
            got.append(fn(int(k)))
            lat.append(time.perf_counter() - t)
        return _pcts(lat), got

    out["contains_present"], got = timed(idx.contains, present)
    assert all(got), "a present key was not found"
    out["contains_absent"], got = timed(idx.contains, absent)
    assert not any(got), "an absent key was found"
    out["get_present"], got = timed(idx.get, present[: min(queries, 200)])
    assert all(g is not None for g in got)
    out["get_absent"], got = timed(idx.get, absent[: min(queries, 200)])
    assert all(g is None for g in got)
    big = keys_of(rng.integers(0, rows, 10_000))
    t = time.perf_counter()
    found = np.asarray(idx.contains(big))
    out["contains_batch_10k_ms"] = (time.perf_counter() - t) * 1e3
    assert found.all()

    # Search: stored codes with 24 bits flipped.
    src = rng.integers(0, rows, queries)
    q = np.empty((queries, BYTES), np.uint8)
    for i, r in enumerate(src):
        code = codes_of(int(r) // batch, min(batch, rows - (int(r) // batch) * batch), seed)[
            int(r) % batch
        ].copy()
        bits = np.unpackbits(code)
        flip = rng.choice(NDIM, 24, replace=False)
        bits[flip] ^= 1
        q[i] = np.packbits(bits)
    lat, found = [], []
    for row in q:
        t = time.perf_counter()
        m = idx.search(row, 10)
        lat.append(time.perf_counter() - t)
        found.append(np.asarray(m.keys)[:10])
    out["search"] = _pcts(lat)
    ex_lat, truth = [], []
    for row in q[: min(queries, 20)]:
        t = time.perf_counter()
        m = idx.search(row, 10, exact=True)
        ex_lat.append(time.perf_counter() - t)
        truth.append(np.asarray(m.keys)[:10])
    out["exact_search"] = _pcts(ex_lat)
    out["recall_at_10"] = float(
        np.mean([len(set(f.tolist()) & set(t.tolist())) / 10 for f, t in zip(found, truth)])
    )
    out["source_row_found"] = float(
        np.mean([keys_of(np.array([r]))[0] in f for r, f in zip(src, found)])
    )
    out["recall_queries"] = len(truth)
    return out


def render(res: dict) -> str:
    a, r, env = res["add"], res["read"], res["env"]
    lines = [
        f"# Binary codes at scale: {res['stamp']}",
        "",
        f"`{res['command']}`",
        "",
        f"{env['cpu']}, {env['cores']} cores, ISA {env['isa']}, load average "
        f"{env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end. "
        f"{a['rows']:,} random 256-bit codes, random 64-bit keys, batches of {a['batch']:,}, "
        f"`shard_size` {res['config']['shard_size']:,}.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| add, whole run | {a['rows_per_s']:,.0f} rows/s ({a['wall_s']:.1f} s; "
        f"close {a['close_s']:.1f} s) |",
        f"| add, first tenth / last tenth | {a['first_tenth_rows_per_s']:,.0f} / "
        f"{a['last_tenth_rows_per_s']:,.0f} rows/s = {a['last_over_first']:.2f}x (goal >= 0.9x) |",
        f"| slowest batch / median batch | {a['batch_s_max']:.2f} / {a['batch_s_median']:.2f} s |",
        f"| peak RSS while adding | {a['peak_rss_mib']:,.0f} MiB |",
        f"| bytes on disk per code (32 B code + 8 B key) | "
        f"{res['bytes_on_disk'] / a['rows']:.1f} |",
        f"| segments after close | {r['shard_count']} |",
        f"| read-only open + first contains (page cache dropped: {r['caches_dropped']}) | "
        f"{r['open_ms']:.1f} + {r['first_contains_ms']:.1f} = "
        f"{r['open_and_first_contains_ms']:.1f} ms (goal <= 50 ms) |",
        f"| RSS after the open | {r['rss_after_open_mib']:,.0f} MiB |",
        f"| contains, present / absent key (p50 / p99 ms) | "
        f"{r['contains_present']['p50_ms']:.3f} / "
        f"{r['contains_present']['p99_ms']:.3f}; {r['contains_absent']['p50_ms']:.3f} / "
        f"{r['contains_absent']['p99_ms']:.3f} |",
        f"| get, present / absent key (p50 / p99 ms) | {r['get_present']['p50_ms']:.3f} / "
        f"{r['get_present']['p99_ms']:.3f}; {r['get_absent']['p50_ms']:.3f} / "
        f"{r['get_absent']['p99_ms']:.3f} |",
        f"| contains of 10,000 present keys, one call | {r['contains_batch_10k_ms']:.1f} ms |",
        f"| search k=10, one query per call (p50 / p99 ms) | {r['search']['p50_ms']:.2f} / "
        f"{r['search']['p99_ms']:.2f} |",
        f"| recall@10 vs exact ({r['recall_queries']} queries); source row found | "
        f"{r['recall_at_10']:.3f}; {r['source_row_found']:.3f} |",
        f"| exact search (every segment scanned), p50 / p99 ms | "
        f"{r['exact_search']['p50_ms']:.1f} / "
        f"{r['exact_search']['p99_ms']:.1f} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list | None = None) -> None:
    import sagitta

    from .env import cpu_model, drop_page_cache

    ap = argparse.ArgumentParser(prog="python -m sagitta_bench.binary_scale", description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=1_000_000)
    ap.add_argument("--shard-size", type=int, default=1024**3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dir", type=Path, default=None, help="index directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep DIR/index afterwards")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--read", help=argparse.SUPPRESS)  # the fresh process of phase 2
    a = ap.parse_args(argv)

    if a.read:
        print(json.dumps(read_phase(a.read, a.rows, a.batch, a.seed, a.queries)))
        return

    env = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "loadavg_start": os.getloadavg(),
    }
    stamp = time.strftime("%Y%m%d-%H%M%S")
    made = a.dir is None
    root = a.dir or Path(tempfile.mkdtemp(prefix="sagitta-binary-scale-"))
    path = root / "index"
    try:
        print(f"adding {a.rows:,} codes into {path}", flush=True)
        add = add_phase(path, a.rows, a.batch, a.shard_size, a.seed)
        on_disk = _du(path)
        dropped = drop_page_cache()
        cmd = [sys.executable, "-m", "sagitta_bench.binary_scale", "--read", str(path)]
        cmd += ["--rows", str(a.rows), "--batch", str(a.batch), "--seed", str(a.seed)]
        cmd += ["--queries", str(a.queries)]
        got = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if got.returncode != 0:
            raise SystemExit(f"read phase failed:\n{got.stderr[-3000:]}")
        read = json.loads(got.stdout.strip().splitlines()[-1])
        read["caches_dropped"] = dropped
        env["loadavg_end"] = os.getloadavg()
        env["max_rss_mib_children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        res = {
            "stamp": stamp,
            "command": "python -m sagitta_bench.binary_scale " + " ".join(argv or sys.argv[1:]),
            "env": env,
            "config": {"rows": a.rows, "batch": a.batch, "shard_size": a.shard_size},
            "add": add,
            "bytes_on_disk": on_disk,
            "read": read,
        }
        save(a.out, stamp, res, render(res))
    finally:
        if not a.keep:
            shutil.rmtree(path, ignore_errors=True)
            if made:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
