"""``python -m sagitta_bench longbow``: the data, each operation with the
engines taking turns, and the results written."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import datasets
from .flight import (
    OpFailed,
    call_opts,
    do_put,
    download,
    error_text,
    make_table,
    run_requests,
    schema_str,
    search_request,
)
from .report import markdown
from .servers import SAGITTA_BIN, LongbowServer, SagittaServer, loadavg, machine_info
from .truth import (
    CATEGORIES,
    K,
    as_ids,
    by_id_truth,
    category_of,
    exact_topk,
    filter_pass_share,
    filtered_truth,
    id_json,
    query_category,
    recall,
    recall_without_self,
)

ENGINES = ("sagitta", "longbow")


# ------------------------------------------------------------------ the run


def rotate(seq: list, r: int) -> list:
    r %= len(seq)
    return seq[r:] + seq[:r]


def strip(d):
    """Without the private ``_`` keys (tables, found ids)."""
    if isinstance(d, dict):
        return {k: strip(v) for k, v in d.items() if not k.startswith("_")}
    return d


def load_data(rows: int, n_queries: int) -> dict:
    root = datasets.data_root() / "debian-minilm"
    base16 = np.load(root / "base.f16.npy", mmap_mode="r")
    if rows > len(base16):
        raise SystemExit(f"--rows {rows}: debian-minilm has {len(base16)}")
    base = datasets._normalize(np.asarray(base16[:rows]))
    queries = datasets._normalize(np.load(root / "queries.f16.npy")[:n_queries])
    texts = qtexts = None
    if (root / "base_texts.txt.gz").exists():
        with gzip.open(root / "base_texts.txt.gz", "rt") as f:
            texts = [line.rstrip("\n") for _, line in zip(range(rows), f)]
        with gzip.open(root / "query_texts.txt.gz", "rt") as f:
            qtexts = [line.rstrip("\n") for _, line in zip(range(n_queries), f)]
    t0 = time.perf_counter()
    gt = exact_topk(base, queries, K)
    gt_note = "numpy exact cosine top-10 over the same rows"
    if rows == len(base16) and (root / "gt.i32.npy").exists():
        ds_gt = np.load(root / "gt.i32.npy")[:n_queries, :K]
        agree = float(np.mean([len(set(a) & set(b)) / K for a, b in zip(gt, ds_gt)]))
        gt_note += f"; agrees with the dataset's gt.i32.npy at {agree:.4f}"
        if agree >= 0.999:
            gt, gt_note = ds_gt.astype(np.int64), f"the dataset's gt.i32.npy ({gt_note})"
    fgt = filtered_truth(base, queries, K)
    by_id = np.random.default_rng(7).choice(rows, size=min(n_queries, rows), replace=False)
    idgt = by_id_truth(base, by_id, K)
    return {
        "base": base,
        "queries": queries,
        "texts": texts,
        "qtexts": qtexts,
        "gt": gt,
        "gt_note": gt_note,
        "fgt": fgt,
        "by_id": by_id,
        "idgt": idgt,
        "truth_s": time.perf_counter() - t0,
    }


def guarded(results: dict, engine: str, op: str, fn, srv=None, dead=None) -> dict | None:
    """Runs ``fn()``; an exception becomes ``error: <message>`` in that row.
    With ``srv`` and ``dead``: a server found not running is noted in
    ``dead`` (engine -> the operation during which it exited) and skipped."""
    if srv is not None and dead is not None and engine in dead:
        results.setdefault(op, {})[engine] = (
            f"error: skipped, the server process exited during {dead[engine]}"
        )
        return None
    try:
        r = fn()
    except Exception as e:  # any engine failure is a result, not a crash
        results.setdefault(op, {})[engine] = f"error: {error_text(e)}"
        print(f"  {engine:8} {op}: error: {error_text(e)}", flush=True)
        r = None
    else:
        results.setdefault(op, {})[engine] = strip(r)
    if srv is not None and dead is not None and not srv.alive():
        dead[engine] = op
        print(f"  {engine:8} the server process exited during {op}", flush=True)
    return r


def searches(srv, eng: str, dataset: str, d: dict, conc: int, kind: str, cap_s: float) -> dict:
    qs, n = d["queries"], len(d["queries"])
    if kind == "search":
        tickets = [search_request(dataset, q) for q in qs]
    elif kind == "filtered":
        tickets = [
            search_request(
                dataset,
                q,
                {"filters": [{"field": "category", "op": "eq", "value": query_category(i)}]},
            )
            for i, q in enumerate(qs)
        ]
    else:
        tickets = [
            search_request(dataset, q, {"text_query": t, "alpha": 0.5})
            for q, t in zip(qs, d["qtexts"])
        ]
    schemas: list[str] = []

    def request(clients, i):
        import pyarrow.flight as fl

        tab = clients[0].do_get(fl.Ticket(tickets[i]), options=call_opts(30)).read_all()
        if not schemas:
            schemas.append(schema_str(tab.schema))
        return as_ids(tab.column("id").to_pylist()) if "id" in tab.column_names else []

    r = run_requests(srv, n, conc, request, cap_s)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    found = r["_found"]
    r["result_schema"] = schemas[0] if schemas else None
    r["mean_hits"] = float(np.mean([len(f) for f in found if f is not None]))
    if kind == "search":
        r["recall_at_10"] = recall(found, d["gt"], K)
    elif kind == "filtered":
        r["recall_at_10"] = recall(found, d["fgt"], K)
        r["filter_pass_share"] = filter_pass_share(found, query_category)
    return r


def search_by_id(srv, eng: str, dataset: str, d: dict, cap_s: float, form: str) -> dict:
    ids = d["by_id"]
    bodies = [
        json.dumps({"dataset": dataset, "id": id_json(i, form), "k": K}).encode() for i in ids
    ]
    answers: list = []

    def request(clients, i):
        import pyarrow.flight as fl

        res = list(clients[1].do_action(fl.Action("VectorSearchByID", bodies[i]), call_opts(30)))
        ans = json.loads(res[0].body.to_pybytes()) if res else {}
        if not answers:
            answers.append(json.dumps(ans)[:200])
        return as_ids(ans.get("ids") or [])

    r = run_requests(srv, len(ids), 1, request, cap_s)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    found = r["_found"]
    r["first_answer"] = answers[0] if answers else None
    r["mean_hits"] = float(np.mean([len(f) for f in found if f is not None]))
    r["self_included_share"] = float(
        np.mean([int(i) in f for f, i in zip(found, ids) if f is not None])
    )
    r["recall_at_10"] = recall_without_self(found, ids, d["idgt"], K)
    return r


def deletes(srv, eng: str, dataset: str, ids: np.ndarray, cap_s: float, form: str) -> dict:
    bodies = [json.dumps({"dataset": dataset, "id": id_json(i, form)}).encode() for i in ids]
    answers: list = []

    def request(clients, i):
        import pyarrow.flight as fl

        res = list(clients[1].do_action(fl.Action("delete", bodies[i]), call_opts(30)))
        text = res[0].body.to_pybytes().decode(errors="replace") if res else ""
        if not answers:
            answers.append(text[:200])
        with contextlib.suppress(ValueError, AttributeError):
            return json.loads(text).get("deleted")
        return None

    r = run_requests(srv, len(ids), 1, request, cap_s, warmup=False)
    if r["ok"] == 0:
        raise OpFailed(r.get("first_error", "no request answered"))
    r["ops_per_s"] = r.pop("qps")
    r["first_answer"] = answers[0] if answers else None
    counts = [c for c in r["_found"] if isinstance(c, int)]
    r["answered_deleted_total"] = sum(counts) if counts else None
    return r


def run(args, argv: list[str]) -> dict:
    t_run = time.perf_counter()
    env = {
        **machine_info(),
        "loadavg_start": loadavg(),
        "command": "python -m sagitta_bench longbow " + " ".join(argv),
    }
    print(f"load average at start: {env['loadavg_start']}", flush=True)
    d = load_data(args.rows, args.queries)
    print(f"data: {args.rows} rows, {len(d['queries'])} queries; truth {d['truth_s']:.1f} s")
    dims = d["base"].shape[1]
    hybrid = d["texts"] is not None
    dataset = f"minilm_{args.rows}"
    table = make_table(d["base"], d["texts"])
    results: dict = {}
    servers: dict = {}
    info: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="longbow-bench-", dir=args.tmp))
    dead: dict = {}  # engine -> the operation during which its server exited

    def g(eng: str, op: str, fn):
        return guarded(results, eng, op, fn, servers[eng], dead)

    try:
        for eng in args.engines:
            cls = SagittaServer if eng == "sagitta" else LongbowServer
            t0 = time.perf_counter()
            try:
                servers[eng] = cls(tmp)
                info[eng] = {**servers[eng].describe(), "start_s": time.perf_counter() - t0}
            except Exception as e:
                info[eng] = {"error": f"start: {error_text(e, 1500)}"}
                print(f"{eng}: could not start: {error_text(e, 1500)}", flush=True)
        live = [e for e in args.engines if e in servers]
        for e in args.engines:
            if e not in servers:
                results.setdefault("start", {})[e] = info[e]["error"]

        # 1. DoPut, then indexing, one engine after the other.
        for eng in live:
            srv = servers[eng]
            info[eng]["prepare"] = g(eng, "prepare", lambda srv=srv: srv.prepare(dataset, dims))
            r = g(eng, "doput", lambda srv=srv: do_put(srv, dataset, table, args.batch))
            if r is not None:
                print(f"  {eng:8} doput: {r['mb_per_s']:.1f} MB/s ({r['seconds']:.1f} s)")
                w = g(
                    eng,
                    "indexed",
                    lambda srv=srv: srv.wait_indexed(dataset, args.cap_index),
                )
                if w is not None:
                    print(f"  {eng:8} indexed: {json.dumps(strip(w))[:200]}", flush=True)
            info[eng]["rss_after_ingest"] = srv.rss()
        env["loadavg_after_ingest"] = loadavg()

        # 2. Downloads, interleaved rep by rep.
        reps: dict = {e: [] for e in live}
        for rep in range(args.download_reps):
            for eng in rotate(live, rep):
                r = g(eng, "download", lambda e=eng: download(servers[e], {"name": dataset}))
                if r is not None:
                    r.pop("_table")
                    reps[eng].append(r)
        for eng in live:
            if reps[eng]:
                best = sorted(reps[eng], key=lambda r: r["mb_per_s"])[len(reps[eng]) // 2]
                results["download"][eng] = {
                    **best,
                    "reps_mb_per_s": [round(r["mb_per_s"], 1) for r in reps[eng]],
                }
                print(f"  {eng:8} download: {best['mb_per_s']:.1f} MB/s {best['rows']} rows")
        filt = [{"field": "category", "op": "eq", "value": CATEGORIES[0]}]
        for eng in rotate(live, 1):

            def dl_filtered(e=eng):
                r = download(servers[e], {"name": dataset, "filters": filt})
                tab = r.pop("_table")
                cats = (
                    set(tab.column("category").to_pylist())
                    if "category" in tab.column_names
                    else None
                )
                r["categories_returned"] = sorted(cats) if cats is not None else None
                r["expected_rows"] = int(np.sum(category_of(np.arange(args.rows)) == CATEGORIES[0]))
                return r

            g(eng, "download_filtered", dl_filtered)

        # 3-5. Searches: each kind at each concurrency, engines taking turns.
        kinds = ["search", "filtered"] + (["hybrid"] if hybrid else [])
        step = 0
        for kind in kinds:
            for conc in args.concurrency:
                op = f"{kind}_c{conc}"
                for eng in rotate(live, step):
                    r = g(
                        eng,
                        op,
                        lambda e=eng, k=kind, c=conc: searches(
                            servers[e], e, dataset, d, c, k, args.cap_op
                        ),
                    )
                    if r is not None:
                        print(
                            f"  {eng:8} {op}: qps {r['qps']:.0f} p50 {r['p50_ms']:.2f} ms "
                            f"p99 {r['p99_ms']:.2f} ms recall {r.get('recall_at_10')} "
                            f"errors {r['errors']}",
                            flush=True,
                        )
                step += 1
        if not hybrid:
            results["hybrid"] = {e: "skipped: the dataset has no texts" for e in live}

        # 6. Search by id, the id as a string (Longbow's SDK) and as a number.
        for form in ("str", "int"):
            op = f"search_by_id_{form}"
            for eng in rotate(live, step):
                r = g(
                    eng,
                    op,
                    lambda e=eng, f=form: search_by_id(servers[e], e, dataset, d, args.cap_op, f),
                )
                if r is not None:
                    print(f"  {eng:8} {op}: qps {r['qps']:.0f} recall {r['recall_at_10']}")
            step += 1

        # 7. Deletes (last: they change the data): the last 2 x --deletes
        # rows, half with string ids, half with numbers; then the rows left.
        del_sets = {
            "str": np.arange(args.rows - 2 * args.deletes, args.rows - args.deletes),
            "int": np.arange(args.rows - args.deletes, args.rows),
        }
        for form, del_ids in del_sets.items():
            op = f"delete_{form}"
            for eng in rotate(live, step):
                r = g(
                    eng,
                    op,
                    lambda e=eng, ids=del_ids, f=form: deletes(
                        servers[e], e, dataset, ids, args.cap_op, f
                    ),
                )
                if r is not None:
                    print(f"  {eng:8} {op}: {r['ops_per_s']:.0f} ops/s errors {r['errors']}")
            step += 1
        for eng in live:

            def left(e=eng):
                r = download(servers[e], {"name": dataset})
                tab = r.pop("_table")
                ids = (
                    set(as_ids(tab.column("id").to_pylist())) if "id" in tab.column_names else set()
                )
                return {
                    "rows": r["rows"],
                    "expected": args.rows - 2 * args.deletes,
                    **{
                        f"still_present_{f}": len(ids & set(v.tolist()))
                        for f, v in del_sets.items()
                    },
                }

            g(eng, "rows_after_delete", left)
        for eng in live:
            info[eng]["rss_end"] = servers[eng].rss()
    finally:
        for eng, srv in servers.items():
            try:
                if eng in dead or not srv.alive():
                    info[eng]["exited_during"] = dead.get(eng, "the run")
                    info[eng]["log_tail"] = srv.log_tail()  # before stop removes it
                srv.stop()
            except Exception as e:
                print(f"{eng}: stop failed: {error_text(e)}", flush=True)
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(tmp)
    env["loadavg_end"] = loadavg()
    print(f"load average at end: {env['loadavg_end']}")
    return {
        "dataset": "debian-minilm",
        "rows": args.rows,
        "queries": len(d["queries"]),
        "k": K,
        "batch_rows": args.batch,
        "deletes": args.deletes,
        "concurrency": args.concurrency,
        "engines": args.engines,
        "ground_truth": d["gt_note"],
        "hybrid": hybrid,
        "env": env,
        "servers": info,
        "results": results,
        "wall_s": time.perf_counter() - t_run,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench longbow", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000, help="first N rows of debian-minilm")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument(
        "--engines",
        default="sagitta,longbow",
        help="comma list of sagitta, longbow (default both)",
    )
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[2] / "results" / "longbow"
    )
    ap.add_argument("--batch", type=int, default=10_000, help="rows per DoPut batch")
    ap.add_argument(
        "--deletes", type=int, default=1000, help="ids deleted by string, and as many by number"
    )
    ap.add_argument("--concurrency", default="1,8", help="client threads for searches")
    ap.add_argument("--download-reps", type=int, default=3)
    ap.add_argument("--cap-op", type=float, default=120.0, help="seconds per operation at most")
    ap.add_argument("--cap-index", type=float, default=900.0, help="seconds to wait for indexing")
    ap.add_argument("--tmp", default=None, help="parent of the servers' temporary directory")
    argv = sys.argv[2:] if argv is None else argv
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES]
    if bad or not args.engines:
        raise SystemExit(f"unknown engines {bad}; known: {list(ENGINES)}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.deletes = min(args.deletes, args.rows // 2)
    if "sagitta" in args.engines and not SAGITTA_BIN.exists():
        raise SystemExit(f"{SAGITTA_BIN} missing: cargo build --release -j2 -p sagitta-cli")
    result = run(args, argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = (
        f"debian-minilm-{args.rows // 1000}k"
        if args.rows % 1000 == 0
        else f"debian-minilm-{args.rows}"
    )
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(result)
    (args.out / f"{stem}.md").write_text(md)
    print(md)
    print(f"wrote {args.out / stem}.{{json,md}}")
