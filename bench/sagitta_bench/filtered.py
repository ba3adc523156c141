"""Filtered search: recall and QPS at chosen selectivities, every engine
that can filter, on the same data and filters in one run.

Synthetic payload on the dataset's rows (seeded):

* ``cat``: a categorical of 1000 values with a Zipf distribution
  (exponent 2: c1 ≈ 61%, c2 ≈ 15%, c8 ≈ 1%, c25 ≈ 0.1% of rows);
* ``year``: an integer uniform over 30 values (1995..2024);
* ``score``: a float uniform in [0, 1);
* ``tags``: a list of strings, always ``pkg`` plus 0-3 of 20 tags.

For each selectivity target (0.1%, 1%, 10%, 50%, 100%) there is an
equality filter (``cat = c`` or ``tags contains pkg``), a range filter
(``year >= y`` or ``score < s``) and an AND of two or three conditions;
the measured selectivity is reported beside the target. Ground truth is
the exact cosine top-k among the rows that pass (numpy, float32).

Engines (each in its own process, single-thread queries, one query per
call; Sagitta with ``threads=1``, so segments are searched one after the
other as the peers search their one graph): ``sagitta`` (a Collection with
default settings, opened from disk;
filters as JSON), ``faiss-hnsw`` (IndexHNSWFlat with an ``IDSelectorBitmap``
per filter), ``hnswlib`` (a Python filter function over a boolean mask),
``lancedb`` (IVF_HNSW_FLAT with scalar indexes, SQL ``where`` with
``prefilter=True``). usearch's Python API has no filtered search.

``python -m sagitta_bench filtered --dataset debian-minilm``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import datasets
from .env import run_env

TARGETS = [0.001, 0.01, 0.1, 0.5, 1.0]
ENGINES = ["sagitta", "faiss-hnsw", "hnswlib", "lancedb"]


def make_payload(n: int, seed: int = 42) -> dict:
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, 1001)
    p = ranks**-2.0
    p /= p.sum()
    cat = rng.choice(ranks, size=n, p=p)
    year = 1995 + rng.integers(0, 30, n)
    score = rng.random(n)
    pool = [f"t{i}" for i in range(20)]
    ntags = rng.integers(0, 4, n)
    tags = [["pkg", *rng.choice(pool, size=t, replace=False).tolist()] for t in ntags]
    return {
        "cat": np.array([f"c{c}" for c in cat], dtype=object),
        "year": year.astype(np.int64),
        "score": score,
        "tags": tags,
    }


def cond(field, op, value):
    return {"field": field, "op": op, "value": value}


def cases(pl: dict) -> list[dict]:
    """Filter cases: family, target, JSON filter, SQL, numpy mask."""
    cat, year, score = pl["cat"], pl["year"], pl["score"]
    has_pkg = np.ones(len(year), dtype=bool)  # every row is tagged pkg

    def eq_cat(c):
        return (cond("cat", "eq", c), f"cat = '{c}'", cat == c)

    def year_ge(y):
        return (cond("year", "ge", y), f"year >= {y}", year >= y)

    def score_lt(s):
        return (cond("score", "lt", s), f"score < {s}", score < s)

    def both(*parts):
        return (
            {"and": [p[0] for p in parts]},
            " AND ".join(f"({p[1]})" for p in parts),
            np.logical_and.reduce([p[2] for p in parts]),
        )

    pkg = (cond("tags", "contains", "pkg"), "array_has_any(tags, ['pkg'])", has_pkg)
    table = {
        "eq": {
            0.001: eq_cat("c25"),
            0.01: eq_cat("c8"),
            0.1: eq_cat("c2"),
            0.5: eq_cat("c1"),
            1.0: pkg,
        },
        "range": {
            0.001: score_lt(0.001),
            0.01: score_lt(0.01),
            0.1: year_ge(2022),
            0.5: year_ge(2010),
            1.0: year_ge(1995),
        },
        "and": {
            0.001: both(eq_cat("c2"), year_ge(2022), score_lt(0.066)),
            0.01: both(year_ge(2022), score_lt(0.1)),
            0.1: both(year_ge(2010), score_lt(0.2)),
            0.5: both(eq_cat("c1"), score_lt(0.82)),
            1.0: both(pkg, year_ge(1995)),
        },
    }
    out = []
    for fam, by in table.items():
        for t in TARGETS:
            f, sql, m = by[t]
            out.append(
                {
                    "family": fam,
                    "target": t,
                    "filter": f,
                    "sql": sql,
                    "selectivity": float(m.mean()),
                    "mask": m,
                }
            )
    return out


def filtered_gt(base: np.ndarray, queries: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray:
    """Exact cosine top-k among rows where ``mask`` (unit-norm inputs)."""
    rows = np.flatnonzero(mask)
    sims = queries @ base[rows].T
    kk = min(k, len(rows))
    part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
    order = np.take_along_axis(-sims, part, 1).argsort(axis=1, kind="stable")
    return rows[np.take_along_axis(part, order, 1)]


def recall(ids: np.ndarray, gt: np.ndarray) -> float:
    kk = gt.shape[1]
    hits = [len(set(a[:kk].tolist()) & set(b.tolist())) for a, b in zip(ids, gt)]
    return float(np.mean(hits)) / kk


# ---------------------------------------------------------------- engines


class SagittaF:
    def version(self):
        import sagitta

        return f"{sagitta.__version__} ({sagitta.isa()})"

    def build(self, base, pl, work, threads):
        import sagitta

        c = sagitta.Collection.create(work / "coll", ndim=base.shape[1], metric="cos")
        step = 20_000
        for s in range(0, len(base), step):
            e = min(s + step, len(base))
            c.upsert(
                np.arange(s, e),
                base[s:e],
                payload={k: v[s:e] for k, v in pl.items()},
            )
        c.optimize()  # the build is done when the index is (as for every peer)
        c.close()
        self.c = sagitta.Collection.open(work / "coll")

    def prepare(self, case):
        self.where = case["filter"] if case else None

    def search(self, q, k):
        return self.c.search(q, k, where=self.where, threads=1).keys


class FaissF:
    def version(self):
        import faiss

        return faiss.__version__

    def build(self, base, pl, work, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexHNSWFlat(base.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = 128
        self.index.add(np.ascontiguousarray(base, dtype=np.float32))
        faiss.omp_set_num_threads(1)
        self.n = len(base)

    def prepare(self, case):
        import faiss

        if case is None:
            self.params = faiss.SearchParametersHNSW(efSearch=64)
            self.sel = None
            return
        bits = np.packbits(case["mask"].astype(np.uint8), bitorder="little")
        self.bits = bits  # the selector borrows it
        self.sel = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(bits))
        self.params = faiss.SearchParametersHNSW(sel=self.sel, efSearch=64)

    def search(self, q, k):
        _, ids = self.index.search(q[None], k, params=self.params)
        return ids[0]


class HnswlibF:
    def version(self):
        import importlib.metadata

        return importlib.metadata.version("hnswlib")

    def build(self, base, pl, work, threads):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=base.shape[1])
        self.index.init_index(max_elements=len(base), ef_construction=128, M=16)
        self.index.set_num_threads(threads)
        self.index.add_items(np.ascontiguousarray(base), np.arange(len(base)))
        self.index.set_ef(64)
        self.index.set_num_threads(1)

    def prepare(self, case):
        if case is None:
            self.fn = None
        else:
            m = case["mask"]
            self.fn = lambda i: bool(m[i])

    def search(self, q, k):
        try:
            return self.index.knn_query(q, k=k, num_threads=1, filter=self.fn)[0][0]
        except RuntimeError:
            # hnswlib raises when it finds fewer than k results
            return np.full(k, -1)


class LanceF:
    def version(self):
        import lancedb

        return lancedb.__version__

    def build(self, base, pl, work, threads):
        import lancedb
        import pyarrow as pa

        os.environ.setdefault("LANCE_CPU_THREADS", str(threads))
        db = lancedb.connect(str(work / "lancedb"))
        dims = base.shape[1]
        vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(base).ravel()), dims)
        t = pa.table(
            {
                "id": pa.array(np.arange(len(base), dtype=np.int64)),
                "vector": vec,
                "cat": pa.array(pl["cat"].tolist()),
                "year": pa.array(pl["year"]),
                "score": pa.array(pl["score"]),
                "tags": pa.array(pl["tags"], type=pa.list_(pa.string())),
            }
        )
        self.table = db.create_table("bench", t, mode="overwrite")
        self.table.create_index(
            metric="cosine", index_type="IVF_HNSW_FLAT", num_partitions=1, m=16, ef_construction=128
        )
        self.table.create_scalar_index("cat", index_type="BITMAP")
        self.table.create_scalar_index("year", index_type="BTREE")
        self.table.create_scalar_index("score", index_type="BTREE")
        self.table.create_scalar_index("tags", index_type="LABEL_LIST")

    def prepare(self, case):
        self.sql = case["sql"] if case else None

    def search(self, q, k):
        s = self.table.search(q).limit(k).nprobes(1).ef(64)
        if self.sql:
            s = s.where(self.sql, prefilter=True)
        return s.select(["id"]).to_arrow().column("id").to_numpy()


ADAPTERS = {"sagitta": SagittaF, "faiss-hnsw": FaissF, "hnswlib": HnswlibF, "lancedb": LanceF}


def worker(cfg_path: str, out_path: str) -> None:
    cfg = json.loads(Path(cfg_path).read_text())
    ds = datasets.Dataset(cfg["dataset"], Path(cfg["dataset_dir"]))
    base = np.ascontiguousarray(ds.base(), dtype=np.float32)
    queries = ds.queries()[: cfg["queries"]]
    pl = make_payload(len(base), cfg["seed"])
    cs = cases(pl)
    gts = np.load(cfg["gt_path"])
    eng = ADAPTERS[cfg["engine"]]()
    work = Path(cfg["workdir"])
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    eng.build(base, pl, work, cfg["threads"])
    build_s = time.perf_counter() - t0
    rows = []
    k = cfg["k"]
    for i, case in enumerate([None, *cs]):
        eng.prepare(case)
        gt = gts[f"gt{i}"]
        best, ids = None, None
        for _ in range(cfg["passes"]):
            found = np.full((len(queries), k), -1, dtype=np.int64)
            lat = np.empty(len(queries))
            for j, q in enumerate(queries):
                t = time.perf_counter()
                r = eng.search(q, k)
                lat[j] = time.perf_counter() - t
                found[j, : len(r)] = np.asarray(r)[:k]
            if best is None or lat.sum() < best.sum():
                best, ids = lat, found
        rows.append(
            {
                "family": case["family"] if case else "none",
                "target": case["target"] if case else 1.0,
                "selectivity": case["selectivity"] if case else 1.0,
                "filter": case["filter"] if case else None,
                "recall": recall(ids, gt),
                "short": float(np.mean((ids[:, : gt.shape[1]] < 0).any(axis=1))),
                "qps": len(queries) / best.sum(),
                "p50_ms": float(np.percentile(best, 50) * 1e3),
                "p99_ms": float(np.percentile(best, 99) * 1e3),
            }
        )
        print(json.dumps({"progress": cfg["engine"], "case": i}), file=sys.stderr, flush=True)
    Path(out_path).write_text(
        json.dumps(
            {
                "engine": cfg["engine"],
                "version": eng.version(),
                "build_s": build_s,
                "rows": rows,
            }
        )
    )


def markdown(run: dict) -> str:
    res = run["results"]
    head = "| filter | target | actual | " + " | ".join(
        f"{r['engine']} recall | {r['engine']} QPS" for r in res
    )
    lines = [head + " |", "|" + "---|" * (3 + 2 * len(res))]
    for i, row in enumerate(res[0]["rows"]):
        fam = row["family"]
        label = "unfiltered" if fam == "none" else fam
        cells = [label, f"{row['target'] * 100:g}%", f"{row['selectivity'] * 100:.2f}%"]
        for r in res:
            x = r["rows"][i]
            cells += [f"{x['recall']:.3f}", f"{x['qps']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    s = res[0]
    if s["engine"] == "sagitta":
        un = s["rows"][0]["qps"]
        worst = min(
            (x for x in s["rows"][1:] if abs(x["target"] - 0.01) < 1e-9), key=lambda x: x["qps"]
        )
        lines.append(
            f"\nSagitta: lowest recall {min(x['recall'] for x in s['rows']):.3f}; "
            f"slowest 1% filter ({worst['family']}) at {worst['qps']:.0f} QPS = "
            f"{worst['qps'] / un:.2f}× unfiltered ({un:.0f} QPS)."
        )
    filters = "\n".join(
        f"- {row['family']} {row['target'] * 100:g}%: `{json.dumps(row['filter'])}`"
        for row in res[0]["rows"][1:]
    )
    return "\n".join(lines) + "\n\nFilters (JSON form):\n\n" + filters + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench filtered", description=__doc__)
    ap.add_argument("--dataset", default="debian-minilm")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = ap.parse_args(argv)
    ds = datasets.load(args.dataset, args.k)
    base = np.ascontiguousarray(ds.base(), dtype=np.float32)
    queries = ds.queries()[: args.queries]
    pl = make_payload(len(base), args.seed)
    cs = cases(pl)
    names = args.engines.split(",")
    unknown = [n for n in names if n not in ADAPTERS]
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; known: {list(ADAPTERS)}")

    with tempfile.TemporaryDirectory(prefix="sgb-filtered-") as tmp:
        gt_path = Path(tmp) / "gt.npz"
        gts = {"gt0": filtered_gt(base, queries, np.ones(len(base), bool), args.k)}
        for i, c in enumerate(cs, start=1):
            gts[f"gt{i}"] = filtered_gt(base, queries, c["mask"], args.k)
        np.savez(gt_path, **gts)
        results = []
        for name in names:
            cfg = {
                "dataset": ds.name,
                "dataset_dir": str(ds.dir),
                "engine": name,
                "queries": len(queries),
                "k": args.k,
                "passes": args.passes,
                "threads": args.threads,
                "seed": args.seed,
                "gt_path": str(gt_path),
                "workdir": str(Path(tmp) / name),
            }
            cp, op = Path(tmp) / f"{name}.json", Path(tmp) / f"{name}-out.json"
            cp.write_text(json.dumps(cfg))
            print(f"{name}: building and searching {1 + len(cs)} filters", file=sys.stderr)
            r = subprocess.run(
                [sys.executable, "-m", "sagitta_bench.filtered", "worker", str(cp), str(op)],
                cwd=Path(__file__).resolve().parents[1],
                stderr=subprocess.PIPE,
                text=True,
            )
            if r.returncode != 0:
                raise SystemExit(f"{name} failed:\n{r.stderr[-3000:]}")
            results.append(json.loads(op.read_text()))

    run = {
        "kind": "filtered",
        "dataset": ds.name,
        "k": args.k,
        "queries": len(queries),
        "env": run_env("filtered ", argv),
        "results": results,
        "time": time.time(),
    }
    out = args.out / "filtered"
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{ds.name}-k{args.k}-" + args.engines.replace(",", "+")
    (out / f"{stem}.json").write_text(json.dumps(run, indent=1))
    md = markdown(run)
    (out / f"{stem}.md").write_text(
        f"Command: `{run['env']['command']}`\n\nMachine: {run['env']['cpu']}, "
        f"{run['env']['cores']} cores; Sagitta ISA {run['env']['isa']}; {len(queries)} queries, "
        "one per call, one thread. Versions: "
        + ", ".join(f"{r['engine']} {r['version']}" for r in results)
        + ". Build seconds: "
        + ", ".join(f"{r['engine']} {r['build_s']:.0f}" for r in results)
        + ".\n\n"
        + md
    )
    print(md)
    print(f"wrote {out / stem}.{{json,md}}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
