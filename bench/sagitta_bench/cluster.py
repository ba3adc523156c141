"""`sagitta-bench cluster`: a sagitta.cluster on a three-node Ray cluster on
this machine (``sagitta.cluster.local``) against a single-node collection
over the same rows, in the same run.

What it measures (results/cluster/<stamp>.json and .md):

1. **Search.** debian-minilm (100k x 384, cosine; ``--rows`` fewer) in
   a single-node ``sagitta.Collection`` (in this process, the default
   settings) and in a cluster of ``--shards`` x ``--replicas`` (3 x 2;
   each shard a collection with the same defaults), both optimized
   (every graph built) before timing. Then ``--passes`` rounds, the two
   taking turns (which goes first alternates): one pass of single-query
   calls over the queries (QPS = queries / wall time, latency p50 / p99 /
   max per call), and one batch call over all queries. Recall@10 of each
   against the dataset's exact ground truth.
2. **Failover.** A search thread (single queries) and a write thread
   (batches of 100 new rows) run; the node holding the most primaries is
   SIGKILLed (raylet and workers). Reported: the longest wait between two
   answered searches after the kill, the time until the first search
   sent after the kill answers, the time until every shard is back to
   its replica count on the live nodes, write errors, and acknowledged
   rows lost (every acknowledged key is read back afterwards; goal 0).
3. **Cold open from object storage.** The single-node collection is
   published to an empty local bucket; then, with the page cache dropped
   when this process may (``/proc/sys/vm/drop_caches``; the report says
   whether it could), a fetch into an empty directory, the open and the
   first search are timed, ``--cold-reps`` times.

Machine: CPU model, ISA, cores, load average at start and end. On two
cores, three Ray nodes share them: the cluster's figures here are the
cost of fan-out and merge, not the speed-up of more machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from . import datasets
from .env import cpu_model, drop_page_cache

OUT = Path(__file__).resolve().parents[1] / "results" / "cluster"


def _pcts(xs: list) -> dict:
    a = np.asarray(xs, dtype=np.float64) * 1e3
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
    }


def _recall(found: np.ndarray, gt: np.ndarray, k: int) -> float:
    return float(
        np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in zip(found, gt)])
    )


def _single_pass(search, queries: np.ndarray, k: int) -> dict:
    lat = []
    found = np.empty((len(queries), k), dtype=np.uint64)
    t0 = time.perf_counter()
    for i, q in enumerate(queries):
        t = time.perf_counter()
        keys = search(q, k)
        lat.append(time.perf_counter() - t)
        found[i] = keys
    wall = time.perf_counter() - t0
    return {"qps": len(queries) / wall, **_pcts(lat), "found": found}


def _batch_pass(search, queries: np.ndarray, k: int) -> dict:
    t = time.perf_counter()
    search(queries, k)
    wall = time.perf_counter() - t
    return {"qps": len(queries) / wall, "seconds": wall}


def _env() -> dict:
    import platform

    import sagitta

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "python": platform.python_version(),
        "loadavg_start": os.getloadavg(),
    }


def search_phase(c, single, queries, gt, k: int, passes: int) -> dict:
    from sagitta.cluster import NO_KEY

    def one_single(q, kk):
        return np.asarray(single.search(q, kk).keys)

    def one_cluster(q, kk):
        return c.search(q, kk).keys

    runs = {"single-node": one_single, "cluster": one_cluster}
    out: dict = {name: {"single": [], "batch": []} for name in runs}
    # Warm both (page cache, Ray connections) untimed.
    for fn in runs.values():
        for q in queries[:50]:
            fn(q, k)
    order = list(runs)
    for p in range(passes):
        for name in order if p % 2 == 0 else order[::-1]:
            r = _single_pass(runs[name], queries, k)
            r["recall"] = _recall(r.pop("found"), gt, k)
            out[name]["single"].append(r)
            out[name]["batch"].append(_batch_pass(runs[name], queries, k))
            print(
                f"  pass {p + 1} {name:11s} single {r['qps']:8.0f} q/s p50 {r['p50_ms']:.3f} ms "
                f"p99 {r['p99_ms']:.3f} ms recall {r['recall']:.4f}; "
                f"batch {out[name]['batch'][-1]['qps']:8.0f} q/s",
                flush=True,
            )
    b = c.search(queries, k)
    assert (b.keys != NO_KEY).all()
    out["transport"] = transport_floor(c)
    return out


def transport_floor(c, n: int = 300) -> dict:
    """What a call costs here with no work in it (the replica's ``ping``):
    to one replica, and to a replica of every shard at once (the fan-out a
    search makes), timed ``n`` times each, through Ray's actor calls (the
    control plane) and through the data path the client's reads and
    writes take (the replicas' endpoints)."""
    import ray

    reps = [sh["replicas"][0] for sh in c._table["shards"]]
    ray_one, ray_fan, data_one, data_fan = [], [], [], []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(reps[0].ping.remote())
        ray_one.append(time.perf_counter() - t)
        t = time.perf_counter()
        ray.get([r.ping.remote() for r in reps])
        ray_fan.append(time.perf_counter() - t)
        t = time.perf_counter()
        deadline = time.monotonic() + 10
        c._start(reps[0], "ping", (), {}, deadline).finish(deadline)
        data_one.append(time.perf_counter() - t)
        t = time.perf_counter()
        deadline = time.monotonic() + 10
        for call in [c._start(r, "ping", (), {}, deadline) for r in reps]:
            call.finish(deadline)
        data_fan.append(time.perf_counter() - t)
    return {
        "one_call": _pcts(ray_one),
        "fan_out": _pcts(ray_fan),
        "data_one_call": _pcts(data_one),
        "data_fan_out": _pcts(data_fan),
    }


def failover_phase(lr, c, dims: int, seconds_after: float = 10.0) -> dict:
    import sagitta.cluster as sc

    st = c.stats()
    prim = {}
    for sh in st["shards"]:
        for r in sh["replicas"]:
            if r["role"] == "primary":
                prim[r["node"]] = prim.get(r["node"], 0) + 1
    # Any node but the head (its loss is the Ray cluster's: docs/CLUSTER.md).
    head = "n0"  # LocalRay names its head n0
    victim = max(sorted(n for n in prim if n != head), key=lambda n: prim[n])
    rng = np.random.default_rng(1)
    q = rng.random((64, dims), dtype=np.float32)
    answered: list = []  # (sent, done) of each answered search
    errors: list = []
    acked: list = []
    stop = threading.Event()

    def searcher():
        i = 0
        while not stop.is_set():
            t = time.monotonic()
            try:
                r = c.search(q[i % 64], 10)
                assert (r.keys != sc.NO_KEY).all()
                answered.append((t, time.monotonic()))
            except Exception as e:
                errors.append(("search", repr(e)[:200]))
            i += 1

    def writer():
        nxt = 10_000_000
        while not stop.is_set():
            ks = np.arange(nxt, nxt + 100, dtype=np.uint64)
            v = np.random.default_rng(nxt).random((100, dims), dtype=np.float32)
            try:
                c.upsert(ks, v)
                acked.append(ks)
            except Exception as e:
                errors.append(("write", repr(e)[:200]))
            nxt += 100

    threads = [threading.Thread(target=searcher), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    end = time.monotonic() + 60
    while (len(acked) < 5 or len(answered) < 20) and time.monotonic() < end:
        time.sleep(0.01)
    killed = time.monotonic()
    lr.kill_node(victim)
    healed = None
    end = killed + 120
    while time.monotonic() < end:
        s = c.stats()
        ok = (
            s["healthy"]
            and victim in s["dead_nodes"]
            and all(
                r.get("lag") == 0 and "error" not in r and r["node"] != victim
                for sh in s["shards"]
                for r in sh["replicas"]
            )
        )
        if ok:
            healed = time.monotonic() - killed
            break
        time.sleep(0.05)
    time.sleep(seconds_after)
    stop.set()
    for t in threads:
        t.join()
    after = [(s, d) for s, d in answered if d > killed]
    gaps = [b[1] - a[1] for a, b in zip(answered, answered[1:]) if b[1] > killed]
    first_sent_after = next((d - killed for s, d in answered if s >= killed), None)
    every = np.concatenate(acked) if acked else np.empty(0, np.uint64)
    got = c.get(every)
    lost = int(sum(v is None for v in got))
    ev = [
        e
        for e in c.stats()["events"]
        if e.get("t", 0) >= time.time() - (time.monotonic() - killed) - 1
    ]
    return {
        "victim": victim,
        "primaries_on_victim": prim[victim],
        "searches_answered_after_kill": len(after),
        "longest_search_gap_s": max(gaps) if gaps else None,
        "first_search_sent_after_kill_answered_s": first_sent_after,
        "replication_restored_s": healed,
        "acked_rows": len(every),
        "acked_rows_lost": lost,
        "errors": errors[:20],
        "error_count": len(errors),
        "events": ev,
    }


def cold_phase(single, tmp: Path, queries: np.ndarray, reps: int) -> dict:
    import sagitta

    bucket = tmp / "cold-bucket"
    pub = sagitta.publish(single, str(bucket))
    runs = []
    for i in range(reps):
        dst = tmp / f"cold-{i}"
        dropped = drop_page_cache()
        t0 = time.perf_counter()
        got = sagitta.fetch(str(bucket), dst)
        t1 = time.perf_counter()
        c = sagitta.Collection.open(dst)
        t2 = time.perf_counter()
        c.search(queries[0], 10)
        t3 = time.perf_counter()
        runs.append(
            {
                "page_cache_dropped": dropped,
                "fetch_s": t1 - t0,
                "open_s": t2 - t1,
                "first_search_s": t3 - t2,
                "total_s": t3 - t0,
                "bytes": got["downloaded_bytes"],
            }
        )
        c.close()
        shutil.rmtree(dst, ignore_errors=True)
        print(f"  cold {i + 1}: {runs[-1]}", flush=True)
    return {"published_bytes": pub["bytes"], "files": pub["files"], "runs": runs}


def _summary(vals: list, key: str) -> dict:
    a = np.array([v[key] for v in vals])
    return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max())}


def render(res: dict) -> str:
    env = res["env"]
    cfg = res["config"]
    lines = [
        f"# sagitta.cluster vs one node: {res['stamp']}",
        "",
        f"`{res['command']}`",
        "",
        f"{env['cpu']}, {env['cores']} cores, ISA {env['isa']}, load average "
        f"{env['loadavg_start'][0]:.2f} at start, {env['loadavg_end'][0]:.2f} at end. "
        f"{cfg['rows']} rows x {cfg['dims']} ({cfg['dataset']}), k={cfg['k']}, "
        f"{cfg['queries']} queries, {cfg['passes']} interleaved passes; cluster: "
        f"{cfg['nodes']} Ray nodes on this machine, {cfg['shards']} shards x "
        f"{cfg['replicas']} replicas, default collection settings on both.",
        "",
        "## Search (median of passes, [min-max])",
        "",
        "| | single-query QPS | p50 ms | p99 ms | batch QPS | recall@10 |",
        "|---|---|---|---|---|---|",
    ]
    s = res["search"]
    for name in ("single-node", "cluster"):
        one = s[name]["single"]
        bat = s[name]["batch"]

        def f(vals, key, fmt):
            m = _summary(vals, key)
            return f"{m['median']:{fmt}} [{m['min']:{fmt}}-{m['max']:{fmt}}]"

        lines.append(
            f"| {name} | {f(one, 'qps', '.0f')} | {f(one, 'p50_ms', '.3f')} | "
            f"{f(one, 'p99_ms', '.3f')} | {f(bat, 'qps', '.0f')} | {f(one, 'recall', '.4f')} |"
        )
    tr = s["transport"]
    lines += [
        "",
        "Cost of a call with no work in it (a replica's `ping`), p50 / p99 ms:",
        "",
        "| path | one replica | one per shard at once |",
        "|---|---|---|",
        f"| data path (what searches and writes take) | "
        f"{tr['data_one_call']['p50_ms']:.3f} / {tr['data_one_call']['p99_ms']:.3f} | "
        f"{tr['data_fan_out']['p50_ms']:.3f} / {tr['data_fan_out']['p99_ms']:.3f} |",
        f"| Ray actor call (control plane only) | "
        f"{tr['one_call']['p50_ms']:.3f} / {tr['one_call']['p99_ms']:.3f} | "
        f"{tr['fan_out']['p50_ms']:.3f} / {tr['fan_out']['p99_ms']:.3f} |",
    ]
    r = res["ratios"]
    lines += [
        "",
        f"Cluster / single node: single-query QPS {r['single_qps']:.2f}x, p50 "
        f"{r['p50']:.2f}x (+{r['p50_added_ms']:.3f} ms), p99 {r['p99']:.2f}x, "
        f"batch QPS {r['batch_qps']:.2f}x.",
        "",
    ]
    fo = res.get("failover")
    if fo:
        lines += [
            "## Failover (node SIGKILLed under a search loop and a write loop)",
            "",
            f"- victim node {fo['victim']} (primary of {fo['primaries_on_victim']} shard(s))",
            f"- longest wait between answered searches after the kill: "
            f"{fo['longest_search_gap_s']:.3f} s",
            f"- first search sent after the kill answered in "
            f"{fo['first_search_sent_after_kill_answered_s']:.3f} s",
            "- full replication restored on the live nodes after "
            + (
                f"{fo['replication_restored_s']:.2f} s"
                if fo["replication_restored_s"] is not None
                else "NOT within 120 s"
            ),
            f"- acknowledged rows: {fo['acked_rows']}, lost: {fo['acked_rows_lost']}; "
            f"errors: {fo['error_count']}",
            "",
        ]
    cold = res.get("cold")
    if cold:
        lines += [
            "## Cold open from object storage (local bucket)",
            "",
            f"{cold['files']} files, {cold['published_bytes'] / 1e6:.1f} MB published.",
            "",
            "| run | page cache dropped | fetch s | open s | first search s | total s |",
            "|---|---|---|---|---|---|",
        ]
        for i, c in enumerate(cold["runs"]):
            lines.append(
                f"| {i + 1} | {c['page_cache_dropped']} | {c['fetch_s']:.3f} | "
                f"{c['open_s'] * 1e3:.1f} ms | {c['first_search_s'] * 1e3:.1f} ms | "
                f"{c['total_s']:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list | None = None) -> None:
    import ray
    import sagitta
    import sagitta.cluster as sc
    from sagitta.cluster.local import LocalRay

    ap = argparse.ArgumentParser(prog="sagitta-bench cluster", description=__doc__)
    ap.add_argument("--dataset", default="debian-minilm")
    ap.add_argument("--rows", type=int, default=0, help="first N rows (0: all)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--cold-reps", type=int, default=3)
    ap.add_argument("--no-failover", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    ds = datasets.load(a.dataset, a.k)
    base = np.asarray(ds.base(), dtype=np.float32)
    if a.rows:
        base = base[: a.rows]
    queries = np.ascontiguousarray(np.asarray(ds.queries(), dtype=np.float32)[: a.queries])
    if a.rows:
        gt = datasets.exact_topk(base, queries, a.k)
    else:
        gt = np.asarray(ds.gt())[: a.queries, : a.k]
    keys = np.arange(len(base), dtype=np.uint64)
    dims = base.shape[1]
    env = _env()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    print(f"{len(base)} x {dims}, {len(queries)} queries; {env}", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="sagitta-bench-cluster-"))
    lr = LocalRay(nodes=a.nodes).start()
    try:
        ray.init(address=lr.address, logging_level="ERROR")
        t = time.perf_counter()
        single = sagitta.Collection.create(tmp / "single", ndim=dims, metric=ds.metric)
        for lo in range(0, len(base), 10_000):
            single.upsert(keys[lo : lo + 10_000], base[lo : lo + 10_000])
        single.optimize(wait=True)
        single_build = time.perf_counter() - t
        t = time.perf_counter()
        c = sc.Cluster.create(
            "bench",
            ndim=dims,
            metric=ds.metric,
            shards=a.shards,
            replicas=a.replicas,
            location=str(tmp / "bucket"),
            root=str(tmp / "nodes"),
            timeout=60,
        )
        for lo in range(0, len(base), 10_000):
            c.upsert(keys[lo : lo + 10_000], base[lo : lo + 10_000])
        c.optimize()
        cluster_build = time.perf_counter() - t
        print(f"built: single {single_build:.1f} s, cluster {cluster_build:.1f} s", flush=True)
        search = search_phase(c, single, queries, gt, a.k, a.passes)
        med = {
            n: {
                "qps": _summary(search[n]["single"], "qps")["median"],
                "p50": _summary(search[n]["single"], "p50_ms")["median"],
                "p99": _summary(search[n]["single"], "p99_ms")["median"],
                "batch": _summary(search[n]["batch"], "qps")["median"],
            }
            for n in ("single-node", "cluster")
        }
        ratios = {
            "single_qps": med["cluster"]["qps"] / med["single-node"]["qps"],
            "p50": med["cluster"]["p50"] / med["single-node"]["p50"],
            "p50_added_ms": med["cluster"]["p50"] - med["single-node"]["p50"],
            "p99": med["cluster"]["p99"] / med["single-node"]["p99"],
            "batch_qps": med["cluster"]["batch"] / med["single-node"]["batch"],
        }
        cold = cold_phase(single, tmp, queries, a.cold_reps)
        failover = None
        if not a.no_failover:
            c.publish()
            failover = failover_phase(lr, c, dims)
            print(f"  failover: {json.dumps({k: v for k, v in failover.items() if k != 'events'})}")
        env["loadavg_end"] = os.getloadavg()
        res = {
            "stamp": stamp,
            "command": "python -m sagitta_bench cluster " + " ".join(argv or []),
            "env": env,
            "config": {
                "dataset": a.dataset,
                "rows": len(base),
                "dims": dims,
                "k": a.k,
                "queries": len(queries),
                "passes": a.passes,
                "shards": a.shards,
                "replicas": a.replicas,
                "nodes": a.nodes,
                "build_s": {"single-node": single_build, "cluster": cluster_build},
            },
            "search": search,
            "ratios": ratios,
            "failover": failover,
            "cold": cold,
        }
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"{stamp}.json").write_text(json.dumps(res, indent=1, default=str))
        md = render(res)
        (a.out / f"{stamp}.md").write_text(md + "\n")
        print(md)
        c.drop()
        single.close()
    finally:
        lr.stop()
        shutil.rmtree(tmp, ignore_errors=True)
