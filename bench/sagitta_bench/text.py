"""Text mode: full-text (BM25) and hybrid (dense + BM25) retrieval on the
labeled task ``debian-pkg-retrieval`` (dev split), every method of every
engine in one run.

The task (``$SAGITTA_DATA/debian-pkg-retrieval/README.md``): a Debian
package's short description (a row of ``debian-minilm``) is the query; the
rows that are paragraphs of its long description are relevant. The corpus
is the 100,000 rows of ``debian-minilm`` (vectors re-normalised as float32,
texts), keyed by row number; a query's vector and text are its own row's.
Each method asks its engine for the top 11 and the scorer drops the query's
own row and keeps 10 (``score_query``: capped recall@10, nDCG@10 with binary
gains, MRR@10).

Each engine runs in a fresh process of its own (``python -m
sagitta_bench.text worker``), engines one after another: ingest and index
builds on all cores, then for each method ``--warmup`` untimed queries and
one timed pass, one query per call through the engine's public Python API,
with every thread of the process pinned to one core (``os.sched_setaffinity``,
``worker.set_affinity``; ``--no-pin`` to leave it). The engines are in
``text_engines.py``.

Query sets are prefixes of one seeded permutation of the dev queries, so
each smaller set lies inside every larger one: ``--limit-queries`` (all),
``--sweep-queries`` (Sagitta's fusion sweep; all) and ``--sample-slow``
(LanceDB's hybrid over flat vectors, ~200 ms a query; 1,000). Every method
is also scored on the smallest of these sets (the "common" columns), so
methods run on different sets can be compared on the same queries.

``python -m sagitta_bench text [--engines sagitta,lancedb,tantivy] [--limit-queries N]``
Results: ``results/text/text-<timestamp>.{json,md}``; ``report`` puts the
newest into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import datasets
from .benchmarks_md import write_benchmarks
from .env import pin_cpu, run_env
from .text_engines import ADAPTERS, ASK, K, sagitta_text_api_error

SEED = 11  # the permutation the query subsets are prefixes of
ENGINES = ("sagitta", "lancedb", "tantivy")
BENCH = Path(__file__).resolve().parents[1]


def score_query(ranked, query_row: int, relevant, k: int = K) -> tuple[float, float, float]:
    """(recall@k, nDCG@k, MRR@k) of one query, by the task's rule: drop
    ``query_row`` from ``ranked``, keep the top ``k``; recall is capped
    (hits / min(k, |relevant|)); nDCG has binary gains, DCG = sum of
    1 / log2(rank + 1) over hits (1-based ranks) over the ideal DCG of
    min(k, |relevant|) hits at ranks 1..n; MRR is 1 / rank of the first
    hit, 0 if none. A row repeated in ``ranked`` gains only once."""
    rel = {int(r) for r in relevant}
    if not rel:
        raise ValueError("a query needs at least one relevant row")
    top = [r for r in map(int, ranked) if r != query_row][:k]
    hits, seen = [], set()
    for rank, r in enumerate(top, 1):
        if r in rel and r not in seen:
            hits.append(rank)
        seen.add(r)
    ideal = min(k, len(rel))
    dcg = sum(1 / math.log2(i + 1) for i in hits)
    idcg = sum(1 / math.log2(i + 1) for i in range(1, ideal + 1))
    return len(hits) / ideal, dcg / idcg, (1 / hits[0] if hits else 0.0)


@dataclass
class Query:
    qid: str
    row: int
    text: str
    relevant: list[int]
    vector: np.ndarray  # float32, unit norm: the query row's vector


@dataclass
class Task:
    keys: np.ndarray  # uint64 row numbers of the corpus
    vectors: np.ndarray  # float32 (n, 384), unit norm
    texts: list[str]
    queries: list[Query]  # in permutation order: subsets are prefixes


def task_dirs() -> tuple[Path, Path]:
    root = datasets.data_root()
    return root / "debian-pkg-retrieval", root / "debian-minilm"


def load_task(limit: int | None = None, rows: int | None = None) -> Task:
    """The dev queries in seeded-permutation order (the first ``limit``),
    and the corpus: all rows, or with ``rows`` a smaller one for quick
    runs (every chosen query's own and relevant rows, then the lowest
    other row numbers up to ``rows``; scores then are not the task's)."""
    qdir, ddir = task_dirs()
    if not (qdir / "dev_queries.jsonl").exists():
        raise SystemExit(f"debian-pkg-retrieval not found at {qdir} (set SAGITTA_DATA)")
    with (qdir / "dev_queries.jsonl").open() as f:
        raw = [json.loads(line) for line in f]
    order = np.random.default_rng(SEED).permutation(len(raw))
    raw = [raw[i] for i in order[: limit or len(raw)]]
    base = np.load(ddir / "base.f16.npy").astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    with gzip.open(ddir / "base_texts.txt.gz", "rt", encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f]
    assert len(texts) == len(base), (len(texts), len(base))
    keep = np.arange(len(base))
    if rows is not None and rows < len(base):
        need = {q["query_row"] for q in raw} | {r for q in raw for r in q["relevant_rows"]}
        others = [r for r in range(len(base)) if r not in need][: max(0, rows - len(need))]
        keep = np.array(sorted(need.union(others)), dtype=np.int64)
    queries = [
        Query(q["qid"], q["query_row"], q["query_text"], q["relevant_rows"], base[q["query_row"]])
        for q in raw
    ]
    return Task(
        keys=keep.astype(np.uint64),
        vectors=np.ascontiguousarray(base[keep]),
        texts=[texts[i] for i in keep],
        queries=queries,
    )


def metrics(per_query: np.ndarray) -> dict:
    """Means of per-query (recall, nDCG, MRR) rows."""
    m = per_query.mean(axis=0)
    return {"queries": len(per_query), "recall": m[0], "ndcg": m[1], "mrr": m[2]}


class Bench:
    """What an engine adapter drives: ``ingest`` times a build step (all
    cores), ``method`` times one pass of a search method (pinned) and
    scores it. Adapters call them in order; the records are the result."""

    def __init__(self, task: Task, cfg: dict) -> None:
        self.task, self.cfg = task, cfg
        self.n_queries = {
            "all": len(task.queries),
            "sweep": min(cfg["sweep_queries"], len(task.queries)),
            "slow": min(cfg["sample_slow"], len(task.queries)),
        }
        self.common = cfg["common"]
        self.ingests: list[dict] = []
        self.methods: list[dict] = []
        self.cpus0 = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None

    def log(self, msg: str) -> None:
        print(f"[text {self.cfg['engine']}] {msg}", file=sys.stderr, flush=True)

    def ingest(self, step: str, fn, rows: int | None = None, path: Path | None = None):
        """Runs ``fn()`` and records its seconds (and rows/s, and the size
        of ``path`` after it); returns what ``fn`` returned."""
        from .worker import dir_size

        self.log(f"ingest: {step}")
        t = time.perf_counter()
        out = fn()
        secs = time.perf_counter() - t
        rec = {"step": step, "seconds": secs}
        if rows:
            rec |= {"rows": rows, "rows_per_s": rows / secs}
        if path is not None:
            rec["size_mb"] = dir_size(path) / 1e6
        self.ingests.append(rec)
        return out

    def method(self, name: str, fn, subset: str = "all", group: str = "main", **params) -> None:
        """One timed pass of ``fn(query) -> keys`` over the ``subset``
        ("all", "sweep" or "slow") queries, one query per call, pinned;
        records accuracy, latency and ``params``."""
        n = self.n_queries[subset]
        if n == 0:
            return
        qs = self.task.queries[:n]
        self.log(f"{name}: {n} queries")
        for q in qs[: self.cfg["warmup"]]:
            fn(q)
        load = os.getloadavg()
        self.pin()
        try:
            lat = np.empty(n)
            found = []
            for i, q in enumerate(qs):
                t = time.perf_counter_ns()
                keys = fn(q)
                lat[i] = time.perf_counter_ns() - t
                found.append(keys)
        finally:
            self.unpin()
        per_query = np.array(
            [score_query(f, q.row, q.relevant) for f, q in zip(found, qs)], dtype=np.float64
        )
        short = np.mean([sum(int(r) != q.row for r in f[:ASK]) < K for f, q in zip(found, qs)])
        lat /= 1e6
        self.methods.append(
            {
                "method": name,
                "group": group,
                "subset": subset,
                **metrics(per_query),
                "common": metrics(per_query[: self.common]),
                "short": float(short),
                "mean_ms": float(lat.mean()),
                "p50_ms": float(np.percentile(lat, 50)),
                "p99_ms": float(np.percentile(lat, 99)),
                "loadavg": list(load),
                "params": params,
            }
        )
        m = self.methods[-1]
        self.log(f"{name}: nDCG@10 {m['ndcg']:.4f}, {m['mean_ms']:.2f} ms/query")

    def pin(self) -> None:
        if self.cfg["pin_cpu"] is not None:
            from .worker import set_affinity

            set_affinity({self.cfg["pin_cpu"]})

    def unpin(self) -> None:
        if self.cfg["pin_cpu"] is not None:
            from .worker import set_affinity

            set_affinity(self.cpus0)


def worker(cfg_path: str, out_path: str) -> None:
    """One engine: build, search every method, write its records."""
    cfg = json.loads(Path(cfg_path).read_text())
    task = load_task(cfg["limit_queries"], cfg["rows"])
    adapter = ADAPTERS[cfg["engine"]]()
    bench = Bench(task, cfg)
    work = Path(cfg["workdir"])
    work.mkdir(parents=True, exist_ok=True)
    adapter.run(task, work, bench)
    out = {
        "engine": cfg["engine"],
        "version": adapter.version(),
        "notes": adapter.notes(bench),
        "ingest": bench.ingests,
        "methods": bench.methods,
    }
    Path(out_path).write_text(json.dumps(out))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench text", description=__doc__)
    engines = ", ".join(ENGINES)
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma list of {engines}")
    ap.add_argument("--limit-queries", type=int, help="the first N of the seeded permutation")
    ap.add_argument("--rows", type=int, help="a smaller corpus (smoke tests; not the task)")
    ap.add_argument(
        "--sample-slow", type=int, default=1000, help="queries for LanceDB's flat-vector hybrid"
    )
    ap.add_argument("--sweep-queries", type=int, help="queries for Sagitta's fusion sweep")
    ap.add_argument("--skip-sweep", action="store_true", help="no fusion sweep")
    ap.add_argument(
        "--embed-rows",
        type=int,
        default=0,
        help="load N rows into an embed_model collection by embedding their texts "
        "(N >= corpus: the engine-embedded hybrid searches that collection); "
        "0: time embedding on --embed-sample texts instead",
    )
    ap.add_argument("--embed-sample", type=int, default=1000)
    ap.add_argument("--skip-embed", action="store_true", help="no embed_model collection")
    ap.add_argument("--warmup", type=int, default=20, help="untimed queries before each method")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the query loop to one core")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--write-benchmarks", type=Path, help="also rewrite this BENCHMARKS.md")
    args = ap.parse_args(argv)
    names = args.engines.split(",")
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise SystemExit(f"unknown engines {unknown}; known: {list(ENGINES)}")
    if "sagitta" in names:
        err = sagitta_text_api_error()
        if err:
            raise SystemExit(
                "sagitta: the installed package lacks the text API this mode uses "
                "(Collection.create(text_fields=...), upsert(payload={'text': ...}), "
                f"search(vector | None, k, text=...)): {err}\n"
                "Rebuild the package, or run with --engines lancedb."
            )

    task = load_task(args.limit_queries, args.rows)  # validates the data up front
    n_q, corpus_rows = len(task.queries), len(task.keys)
    del task  # each engine's process loads its own
    sweep_q = 0 if args.skip_sweep else min(args.sweep_queries or n_q, n_q)
    slow_q = min(args.sample_slow, n_q)
    # the queries every method of these engines runs (0: the set is skipped)
    used = [n_q, sweep_q if "sagitta" in names else 0, slow_q if "lancedb" in names else 0]
    common = min(x for x in used if x > 0)
    env = run_env("text ", argv)
    pin, env["pinning"] = pin_cpu(not args.no_pin)
    load_start = os.getloadavg()
    cfg = {
        "limit_queries": args.limit_queries,
        "rows": args.rows,
        "sample_slow": slow_q,
        "sweep_queries": sweep_q,
        "common": common,
        "embed_rows": 0 if args.skip_embed else args.embed_rows,
        "embed_sample": 0 if args.skip_embed else args.embed_sample,
        "skip_embed": args.skip_embed,
        "warmup": args.warmup,
        "pin_cpu": pin,
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="sgb-text-") as tmp:
        for name in names:
            cp, op = Path(tmp) / f"{name}.json", Path(tmp) / f"{name}-out.json"
            cp.write_text(json.dumps({**cfg, "engine": name, "workdir": f"{tmp}/{name}"}))
            rc = subprocess.run(
                [sys.executable, "-m", "sagitta_bench.text", "worker", str(cp), str(op)],
                cwd=BENCH,
            ).returncode
            if rc != 0:
                raise SystemExit(f"text: {name} failed (exit {rc}); its traceback is above")
            results.append(json.loads(op.read_text()))
    run = {
        "kind": "text",
        "task": "debian-pkg-retrieval",
        "split": "dev",
        "k": K,
        "asked": ASK,
        "corpus_rows": corpus_rows,
        **cfg,
        "queries": n_q,
        "env": env,
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "results": results,
        "time": time.time(),
    }
    write_run(run, args.out)
    if args.write_benchmarks:
        write_benchmarks(args.write_benchmarks, args.out)
        print(f"wrote {args.write_benchmarks}")


def write_run(run: dict, out: Path) -> Path:
    from .report import text_markdown

    d = out / "text"
    d.mkdir(parents=True, exist_ok=True)
    stem = "text-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(run["time"]))
    (d / f"{stem}.json").write_text(json.dumps(run, indent=1))
    md = text_markdown(run)
    (d / f"{stem}.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {d / stem}.{{json,md}}")
    return d / f"{stem}.json"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
