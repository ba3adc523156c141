"""One engine in its own processes: build and save in one, reopen and
sweep the knob in a second.

``python -m sagitta_bench.worker CONFIG.json RESULT.json`` with
``"phase": "build"`` or ``"search"`` in the config. Fresh processes keep
one engine's memory out of another's peak RSS and its threads out of
another's timings; opening in a process that never built the index makes
its resident memory (RSS growth from before the open to after the sweep)
what a server that only searches would hold.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import psutil

from .datasets import Dataset
from .engines import ENGINES


def peak_rss_bytes() -> int:
    """High-water RSS of this process image (VmHWM). Unlike ru_maxrss it
    does not inherit the parent's peak across fork + exec."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def recall_at_k(ids: np.ndarray, gt: np.ndarray, k: int, ties=None) -> float:
    """Fraction of the exact top-k found. With ``ties`` (base, queries,
    exact k-th distance per query; Hamming data, where distances tie
    heavily) a result counts when its distance is at most the k-th."""
    if ties is None:
        hits = sum(len(set(map(int, a[:k])) & set(map(int, b[:k]))) for a, b in zip(ids, gt))
        return hits / (len(gt) * k)
    base, queries, kth = ties[:3]
    if len(ties) > 3:  # NPHD: variable-length codes
        from .datasets import nphd_dist

        blens, qlens = ties[3], ties[4]
        hits = 0
        for q, ql, row, limit in zip(queries, qlens, ids, kth):
            row = row[:k][row[:k] >= 0]
            d = nphd_dist(bytes(q[:ql]), np.asarray(base[row]), blens[row])
            hits += int((d <= limit + 1e-9).sum())
        return hits / (len(queries) * k)
    hits = 0
    for q, row, limit in zip(queries, ids, kth):
        row = row[:k][row[:k] >= 0]
        d = np.bitwise_count(np.asarray(base[row]) ^ q).sum(axis=1)
        hits += int((d <= limit).sum())
    return hits / (len(queries) * k)


def main() -> None:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out_path = Path(sys.argv[2])
    ds = Dataset(cfg["dataset"], Path(cfg["dataset_dir"]), cfg["metric"])
    k, threads = cfg["k"], cfg["threads"]
    workdir = Path(cfg["workdir"])
    phase = cfg.get("phase", "build")
    if phase == "build":
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
    os.environ["SAGITTA_BENCH_WORKDIR"] = str(workdir)

    proc = psutil.Process()
    base = np.ascontiguousarray(ds.base())
    queries = ds.queries()[: cfg["queries"]]
    gt = ds.gt()[: len(queries), :k]
    kth = ds.kth_dist()
    ties = (base, queries, kth[: len(queries), k - 1]) if kth is not None else None
    blens, qlens = ds.lengths("base"), ds.lengths("queries")
    if ties is not None and blens is not None:
        ties = (*ties, blens, qlens[: len(queries)])
        # NPHD engines take one bytes object per code
        base = [bytes(c[:n]) for c, n in zip(base, blens)]
        queries = [bytes(c[:n]) for c, n in zip(queries, qlens[: len(queries)])]
        ties = (np.asarray(ds.base()), *ties[1:])
    rss_base = proc.memory_info().rss

    engine = ENGINES[cfg["engine"]](cfg["m"], cfg["ef_construction"])
    if phase == "build":
        t = time.perf_counter()
        engine.build(base, threads)
        build_s = time.perf_counter() - t
        rss_after_build = proc.memory_info().rss
        engine.save(workdir)
        out_path.write_text(
            json.dumps(
                {
                    "engine": cfg["engine"],
                    "version": engine.version(),
                    "n": len(base),
                    "dims": ds.base().shape[1],
                    "build_s": build_s,
                    "build_vps": len(base) / build_s,
                    "size_bytes": dir_size(workdir),
                    "rss_base_mb": rss_base / 2**20,
                    "rss_after_build_mb": rss_after_build / 2**20,
                    "rss_build_peak_mb": peak_rss_bytes() / 2**20,
                }
            )
        )
        return

    # Search phase: open what the build phase saved. Engines that are very
    # slow per query (LanceDB's IVF indexes: ~10-30 ms of per-query
    # overhead) may cap the query count and passes (`max_queries`,
    # `max_passes`); the result says what was used.
    cap = getattr(engine, "max_queries", None)
    if cap is not None and cap < len(queries):
        queries = queries[:cap]
        gt = gt[:cap]
        if ties is not None:
            ties = (ties[0], ties[1][:cap], ties[2][:cap], *ties[3:])
    passes = min(cfg.get("passes", 3), getattr(engine, "max_passes", 99))
    n_base = len(base)
    del base
    gc.collect()
    rss_before_open = proc.memory_info().rss
    t = time.perf_counter()
    engine.open(workdir)
    open_s = time.perf_counter() - t

    sweep = []
    for ef in cfg["knobs"][engine.knob]:
        engine.set_knob(ef)
        for q in queries[:20]:
            engine.search_one(q, k)  # warm-up (page in, caches)
        # The machine is shared: the fastest of `passes` passes over the
        # queries is kept (its latencies give the percentiles).
        lat = None
        ids = np.empty((len(queries), k), dtype=np.int64)
        for _ in range(passes):
            pass_lat = np.empty(len(queries))
            for i, q in enumerate(queries):
                t = time.perf_counter()
                r = engine.search_one(q, k)
                pass_lat[i] = time.perf_counter() - t
                ids[i, : len(r)] = np.asarray(r[:k], dtype=np.int64)
                ids[i, len(r) :] = -1
            if lat is None or pass_lat.sum() < lat.sum():
                lat = pass_lat
        # One batch call is short and the machine is shared: best of three.
        batch_s = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            batch_ids = engine.search_batch(queries, k, threads)
            batch_s = min(batch_s, time.perf_counter() - t)
        point = {
            "knob": ef,
            "recall": recall_at_k(ids, gt, k, ties),
            "recall_batch": recall_at_k(np.asarray(batch_ids, dtype=np.int64), gt, k, ties),
            "qps_1t": len(queries) / lat.sum(),
            "qps_all": len(queries) / batch_s,
            "p50_us": float(np.percentile(lat, 50) * 1e6),
            "p95_us": float(np.percentile(lat, 95) * 1e6),
            "p99_us": float(np.percentile(lat, 99) * 1e6),
        }
        sweep.append(point)
        print(json.dumps({"progress": cfg["engine"], **point}), file=sys.stderr, flush=True)

    resident = proc.memory_info().rss - rss_before_open
    result = {
        "engine": cfg["engine"],
        "knob": engine.knob,
        "open_s": open_s,
        "queries": len(queries),
        "passes": passes,
        "resident_mb": resident / 2**20,
        "resident_bytes_per_vector": resident / n_base,
        "rss_search_peak_mb": peak_rss_bytes() / 2**20,
        "sweep": sweep,
    }
    out_path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
