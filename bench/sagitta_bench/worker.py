"""One engine in its own processes: build and save in one, reopen and
search in a second that a coordinator drives.

``python -m sagitta_bench.worker CONFIG.json RESULT.json`` builds and saves
(``"phase": "build"`` in the config). ``python -m sagitta_bench.worker
--serve CONFIG.json`` is the search process: it loads the queries, then
answers one JSON line on stdout for each JSON line on stdin (the protocol
below), so that the coordinator (``cli.search_group``) can keep every
engine's search process open at once and let them take turns.

Fresh processes keep one engine's memory out of another's peak RSS and its
threads out of another's timings; opening in a process that never built
the index makes its resident memory (RSS growth from before the open to
after the sweep) what a server that only searches would hold.

Protocol (requests ``{"cmd": ..., ...}``; every reply has ``"ok"``, and
``"error"`` with a traceback when ``ok`` is false). After start-up the
worker writes ``{"ok": true, "ready": true}`` unasked, then:

- ``open``: opens the saved index; replies ``open_s``, ``queries``,
  ``passes`` (this engine's query count and pass count: slow engines may
  cap them), ``knob``, ``version``, ``opened``.
- ``pin`` ``{"cpus": [c]}`` / ``unpin``: sets every thread of the process
  to those CPUs (``os.sched_setaffinity``), or back to the CPUs it started
  with; replies ``cpus``.
- ``knob`` ``{"value": v, "warmup": w}``: sets the knob, forgets the
  previous point's passes, runs ``w`` untimed queries.
- ``pass``: one timed pass over all queries, one query per call on the
  calling thread; replies ``total_s`` and ``qps``.
- ``batch``: one timed batch call over all queries on ``threads`` threads;
  replies ``s`` and ``qps``.
- ``point``: the point of this knob value from the passes and batch calls
  so far (``recall``, ``qps_1t`` = the median pass, ``qps_1t_min`` /
  ``_max`` / ``_passes``, ``qps_all`` = the median batch call,
  ``qps_all_best`` / ``_reps``, p50 / p95 / p99 of the median pass,
  ``pass_spans``: each pass's start and end on the monotonic clock).
- ``finish``: replies resident memory and peak RSS, then exits.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import sys
import time
import traceback
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


def set_affinity(cpus) -> None:
    """Every thread of this process onto ``cpus`` (``sched_setaffinity``
    on one thread id only moves that thread; threads started later inherit
    their creator's set)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, FileNotFoundError):
            pass  # the thread ended meanwhile


def build(cfg: dict, out_path: Path) -> None:
    ds = Dataset(cfg["dataset"], Path(cfg["dataset_dir"]), cfg["metric"])
    workdir = Path(cfg["workdir"])
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    os.environ["SAGITTA_BENCH_WORKDIR"] = str(workdir)
    proc = psutil.Process()
    base = np.ascontiguousarray(ds.base())
    blens = ds.lengths("base")
    if blens is not None:  # NPHD engines take one bytes object per code
        base = [bytes(c[:n]) for c, n in zip(base, blens)]
    rss_base = proc.memory_info().rss
    engine = ENGINES[cfg["engine"]](cfg["m"], cfg["ef_construction"])
    t = time.perf_counter()
    engine.build(base, cfg["threads"])
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
                "data_bytes": ds.base().nbytes,
                "build_s": build_s,
                "build_vps": len(base) / build_s,
                "size_bytes": dir_size(workdir),
                "rss_base_mb": rss_base / 2**20,
                "rss_after_build_mb": rss_after_build / 2**20,
                "rss_build_peak_mb": peak_rss_bytes() / 2**20,
                **getattr(engine, "build_extra", {}),
            }
        )
    )


class Searcher:
    """The search process of one engine: what the protocol's commands do."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        ds = Dataset(cfg["dataset"], Path(cfg["dataset_dir"]), cfg["metric"])
        self.k, self.threads = cfg["k"], cfg["threads"]
        self.workdir = Path(cfg["workdir"])
        os.environ["SAGITTA_BENCH_WORKDIR"] = str(self.workdir)
        self.proc = psutil.Process()
        self.cpus0 = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        queries = ds.queries()[: cfg["queries"]]
        self.n_base = ds.base().shape[0]
        self.engine = ENGINES[cfg["engine"]](cfg["m"], cfg["ef_construction"])
        # Engines that are very slow per query (LanceDB's IVF indexes: ~10-30
        # ms of per-query overhead) may cap the query count and passes
        # (`max_queries`, `max_passes`); `open` says what is used.
        cap = getattr(self.engine, "max_queries", None)
        if cap is not None and cap < len(queries):
            queries = queries[:cap]
        self.passes = min(cfg.get("passes", 5), getattr(self.engine, "max_passes", 99))
        n = len(queries)
        self.gt = ds.gt()[:n, : self.k]
        kth = ds.kth_dist()
        self.ties = None
        if kth is not None:
            # Tie-aware recall reads base rows: a private copy now, so that
            # reading it later does not count as the index's resident memory.
            self.ties = (np.array(ds.base()), queries, kth[:n, self.k - 1])
        qlens = ds.lengths("queries")
        if qlens is not None:  # NPHD: one bytes object per code
            self.ties = (*self.ties, ds.lengths("base"), qlens[:n])
            queries = [bytes(c[:m]) for c, m in zip(queries, qlens[:n])]
        self.queries = queries
        self.version = self.engine.version()  # imports the engine's module
        gc.collect()
        self.rss_before_open = self.proc.memory_info().rss

    def open(self) -> dict:
        t = time.perf_counter()
        self.engine.open(self.workdir)
        self.open_s = time.perf_counter() - t
        return {
            "open_s": self.open_s,
            "queries": len(self.queries),
            "passes": self.passes,
            "knob": self.engine.knob,
            "version": self.version,
            "opened": self.engine.opened,
        }

    def pin(self, cpus: list[int]) -> dict:
        set_affinity(set(cpus))
        return {"cpus": sorted(os.sched_getaffinity(0))}

    def unpin(self) -> dict:
        if self.cpus0 is not None:
            set_affinity(self.cpus0)
        return {"cpus": sorted(os.sched_getaffinity(0)) if self.cpus0 is not None else None}

    def knob(self, value: int, warmup: int) -> dict:
        self.value = value
        self.engine.set_knob(value)
        for q in self.queries[:warmup]:
            self.engine.search_one(q, self.k)  # warm-up (page in, caches)
        self.lats: list[np.ndarray] = []
        self.spans: list[tuple[float, float]] = []
        self.batch_s: list[float] = []
        self.ids = self.batch_ids = None
        return {}

    def one_pass(self) -> dict:
        k, queries = self.k, self.queries
        lat = np.empty(len(queries))
        ids = np.empty((len(queries), k), dtype=np.int64)
        start = time.monotonic()
        for i, q in enumerate(queries):
            t = time.perf_counter()
            r = self.engine.search_one(q, k)
            lat[i] = time.perf_counter() - t
            ids[i, : len(r)] = np.asarray(r[:k], dtype=np.int64)
            ids[i, len(r) :] = -1
        self.lats.append(lat)
        self.spans.append((start, time.monotonic()))
        self.ids = ids
        return {"total_s": float(lat.sum()), "qps": len(queries) / float(lat.sum())}

    def batch(self) -> dict:
        t = time.perf_counter()
        ids = self.engine.search_batch(self.queries, self.k, self.threads)
        s = time.perf_counter() - t
        self.batch_s.append(s)
        self.batch_ids = np.asarray(ids, dtype=np.int64)
        return {"s": s, "qps": len(self.queries) / s}

    def point(self) -> dict:
        n = len(self.queries)
        qps = [n / float(lat.sum()) for lat in self.lats]
        # the pass with the median total time gives the latency percentiles
        order = sorted(range(len(self.lats)), key=lambda i: self.lats[i].sum())
        lat = self.lats[order[len(order) // 2]]
        batch = [n / s for s in self.batch_s]
        point = {
            "knob": self.value,
            "recall": recall_at_k(self.ids, self.gt, self.k, self.ties),
            "qps_1t": float(np.median(qps)),
            "qps_1t_min": min(qps),
            "qps_1t_max": max(qps),
            "qps_1t_passes": qps,
            # CLOCK_MONOTONIC, shared by the processes: when each pass ran
            "pass_spans": self.spans,
            "p50_us": float(np.percentile(lat, 50) * 1e6),
            "p95_us": float(np.percentile(lat, 95) * 1e6),
            "p99_us": float(np.percentile(lat, 99) * 1e6),
        }
        if batch:
            point |= {
                "recall_batch": recall_at_k(self.batch_ids, self.gt, self.k, self.ties),
                "qps_all": float(np.median(batch)),
                "qps_all_best": max(batch),
                "qps_all_reps": batch,
            }
        return {"point": point}

    def finish(self) -> dict:
        resident = self.proc.memory_info().rss - self.rss_before_open
        return {
            "resident_mb": resident / 2**20,
            "resident_bytes_per_vector": resident / self.n_base,
            "rss_search_peak_mb": peak_rss_bytes() / 2**20,
        }


def serve(cfg_path: Path) -> None:
    """The search process: one JSON reply line per JSON request line."""
    # Replies go to a private copy of stdout; whatever the engines print
    # (to fd 1 or sys.stdout) goes to stderr and cannot break the protocol.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        s = Searcher(json.loads(cfg_path.read_text()))
    except Exception:
        reply({"ok": False, "error": traceback.format_exc()})
        raise
    reply({"ok": True, "ready": True})
    cmds = {
        "open": s.open,
        "pin": s.pin,
        "unpin": s.unpin,
        "knob": s.knob,
        "pass": s.one_pass,
        "batch": s.batch,
        "point": s.point,
        "finish": s.finish,
    }
    while line := sys.stdin.readline():
        req = json.loads(line)
        cmd = req.pop("cmd")
        try:
            reply({"ok": True, **cmds[cmd](**req)})
        except Exception:
            reply({"ok": False, "error": traceback.format_exc()})
        if cmd == "finish":
            break


def main() -> None:
    if sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]))
    else:
        build(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))


if __name__ == "__main__":
    main()
