"""Memory while an index is built: the resident set of a fresh process
that loads a dataset and builds an HNSW index of it, sampled every few
milliseconds, for Sagitta's collection and its peers, engines taking turns.

    python -m sagitta_bench memory --dataset debian-minilm --rounds 3

Each run is its own process: it loads the base vectors into memory
(``base``), then
builds (``sagitta-collection``: a default collection, ``upsert`` of
``--batch`` rows at a time, then ``optimize()`` and ``close()``;
``sagitta-collection-text``: the same with a payload of each row's text,
the dataset's own passages where it has them (debian-minilm) and made-up
words otherwise, in a BM25 field, and a category column;
``sagitta-hnsw``: ``Index.add`` of all rows; ``hnswlib`` / ``faiss-hnsw``:
M 16, ef_construction 128, all rows at once). Reported per run, in MiB:
the resident set over ``base`` at its peak (anonymous and file-backed
pages apart: a memory-mapped segment is file-backed, page cache the
kernel can drop), after the build, and for the collection after
``close()``, with the build's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from . import datasets

ENGINES = ["sagitta-collection", "sagitta-hnsw", "hnswlib", "faiss-hnsw"]
# Not in the default set: it measures the text path, not the index build.
TEXT_ENGINE = "sagitta-collection-text"
CATEGORIES = ["amber", "blue", "coral", "denim"]


def texts_for(dataset: str, rows: int) -> list[str]:
    """One text per base row: the dataset's passages (``base_texts.txt.gz``
    beside its vectors) when it has them, else words made from the row
    number (a vocabulary of a few hundred words, eight to twenty a row)."""
    import gzip

    src = datasets.data_root() / dataset / "base_texts.txt.gz"
    if src.exists():
        with gzip.open(src, "rt") as f:
            return [line.rstrip("\n") for _, line in zip(range(rows), f)]
    return [
        " ".join(f"w{(i * 7919 + j * 104729) % 389}" for j in range(8 + i % 13))
        for i in range(rows)
    ]


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) / 1024
    return out


class Sampler:
    """Peak anonymous, file-backed and total RSS, sampled every 5 ms."""

    def __init__(self):
        self.peak = {"RssAnon": 0.0, "RssFile": 0.0, "total": 0.0}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.005)

    def sample(self) -> dict:
        s = _status()
        s["total"] = s["RssAnon"] + s["RssFile"]
        for k in self.peak:
            self.peak[k] = max(self.peak[k], s[k])
        return s

    def stop(self):
        self._stop.set()
        self._t.join()


def build(
    engine: str, base: np.ndarray, batch: int, work: str, texts: list[str] | None = None
) -> dict:
    """Runs in the measuring process: one build, its memory figures
    (the engine's module imported before the first sample)."""
    import importlib

    module = {"hnswlib": "hnswlib", "faiss-hnsw": "faiss"}.get(engine, "sagitta")
    importlib.import_module(module)
    s = Sampler()
    s0 = s.sample()
    t = time.perf_counter()
    out: dict = {}
    if engine in ("sagitta-collection", TEXT_ENGINE):
        import sagitta

        text = engine == TEXT_ENGINE
        c = sagitta.Collection.create(
            os.path.join(work, "c"),
            ndim=base.shape[1],
            metric="cos",
            text_fields=["text"] if text else None,
        )
        for at in range(0, len(base), batch):
            rows = base[at : at + batch]
            keys = np.arange(at, at + len(rows), dtype=np.uint64)
            if text:
                payload = {
                    "text": texts[at : at + len(rows)],
                    "category": [CATEGORIES[int(k) % 4] for k in keys],
                }
                c.upsert(keys, rows, payload=payload)
            else:
                c.upsert(keys, rows)
        c.optimize()
        out["build_s"] = time.perf_counter() - t
        after = s.sample()
        c.close()
        del c
        out["after_close"] = s.sample()["total"] - s0["total"]
    elif engine == "sagitta-hnsw":
        import sagitta

        ix = sagitta.Index(base.shape[1], metric="cos", connectivity=16, expansion_add=128)
        ix.add(np.arange(len(base), dtype=np.uint64), base)
        out["build_s"] = time.perf_counter() - t
        after = s.sample()
    elif engine == "hnswlib":
        import hnswlib

        ix = hnswlib.Index(space="cosine", dim=base.shape[1])
        ix.init_index(max_elements=len(base), ef_construction=128, M=16)
        ix.add_items(base, np.arange(len(base)))
        out["build_s"] = time.perf_counter() - t
        after = s.sample()
    elif engine == "faiss-hnsw":
        import faiss

        ix = faiss.IndexHNSWFlat(base.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        ix.hnsw.efConstruction = 128
        ix.add(base)
        out["build_s"] = time.perf_counter() - t
        after = s.sample()
    else:
        raise SystemExit(f"unknown engine {engine}")
    s.stop()
    out.update(
        {
            "engine": engine,
            "peak": s.peak["total"] - s0["total"],
            "peak_anon": s.peak["RssAnon"] - s0["RssAnon"],
            "peak_file": s.peak["RssFile"] - s0["RssFile"],
            "after_build": after["total"] - s0["total"],
        }
    )
    return out


def worker(argv: list[str]) -> None:
    engine, dataset, rows, batch = argv[0], argv[1], int(argv[2]), int(argv[3])
    ds = datasets.load(dataset, 10)
    # A copy in anonymous memory, as a caller's array would be (the
    # dataset file is memory-mapped: its pages would count as the build's).
    base = np.array(ds.base()[:rows], dtype=np.float32, order="C", copy=True)
    # Loaded before the first sample, like the vectors.
    texts = texts_for(dataset, len(base)) if engine == TEXT_ENGINE else None
    with tempfile.TemporaryDirectory(prefix="sagitta-mem-") as work:
        r = build(engine, base, batch, work, texts)
    r["rows"] = len(base)
    r["base_mib"] = base.nbytes / 2**20
    print(json.dumps(r), flush=True)


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--worker":
        worker(argv[1:])
        return
    ap = argparse.ArgumentParser(prog="sagitta-bench memory", description=__doc__)
    ap.add_argument("--dataset", default="debian-minilm", help="as for `run` (dense f32 sets)")
    ap.add_argument("--rows", type=int, default=0, help="first N rows (0: all)")
    ap.add_argument("--batch", type=int, default=10_000, help="rows per collection upsert")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated; also {TEXT_ENGINE} (a BM25 field and a category column)",
    )
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    rows = args.rows or 10**12
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(args.rounds):
        # Engines take turns; the first engine rotates each round.
        order = engines[r % len(engines) :] + engines[: r % len(engines)]
        for e in order:
            cmd = [sys.executable, "-m", "sagitta_bench", "memory", "--worker", e]
            cmd += [args.dataset, str(rows), str(args.batch)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{e}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            runs[e].append(json.loads(p.stdout.strip().splitlines()[-1]))
    load = os.getloadavg()
    first = next((v[0] for v in runs.values() if v), None)
    if first is None:
        raise SystemExit("no engine ran")
    print(
        f"Dataset {args.dataset}: {first['rows']} rows, {first['base_mib']:.0f} MiB of f32 "
        f"vectors; {args.rounds} rounds, engines taking turns; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end.\n"
    )
    print(
        "| engine | peak over base, MiB (runs) | median | of it anonymous / file | "
        "after the build | after close() | build s |"
    )
    print("|---|---|---:|---|---:|---:|---:|")
    for e, rs in runs.items():
        if not rs:
            continue

        def med(k, rs=rs):
            return statistics.median(x[k] for x in rs)

        closed = [x["after_close"] for x in rs if "after_close" in x]
        peaks = ", ".join(f"{x['peak']:.0f}" for x in rs)
        after_close = f"{statistics.median(closed):.0f}" if closed else "–"
        print(
            f"| {e} | {peaks} | {med('peak'):.0f} | {med('peak_anon'):.0f} / "
            f"{med('peak_file'):.0f} | {med('after_build'):.0f} | {after_close} | "
            f"{med('build_s'):.2f} |"
        )
