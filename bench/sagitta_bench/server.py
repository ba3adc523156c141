"""Server mode: the real ``sagitta serve`` binary, measured from real
clients on the same machine.

1. **Ingest**: the dataset through Flight DoPut (``pyarrow.flight``,
   batches acknowledged after the WAL fsync) and through HTTP
   (``POST /collections/C/upsert``, JSON), into default HNSW collections
   (and, with ``--flat``, into Flat collections, which isolates protocol
   and WAL cost from index build). Rows/s and MB/s of vector data.
2. **Search latency**: k=10, one query per request, at concurrency 1, 4
   and 16 (one client thread and connection each), over HTTP (request
   bodies encoded before timing), over Flight (``DoGet`` with a search
   ticket), and in-process (``sagitta.Collection`` opened read-only on the
   server's own collection directory: the same segments, no network). p50
   / p95 / p99 latency per request, QPS and recall@10 against the exact
   ground truth.
3. **Crash** (``--crash``): kill -9 the server in the middle of a Flight
   ingest, restart it on the same directory, and check that every
   acknowledged row is there with its vector.

``python -m sagitta_bench server --dataset debian-minilm``
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from . import datasets
from .env import run_env

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
from server_util import Server  # noqa: E402 - the launcher the server tests use


def _pct(lat_ns: list[int]) -> dict:
    a = np.asarray(lat_ns, dtype=np.float64) / 1e3
    return {
        "p50_us": float(np.percentile(a, 50)),
        "p95_us": float(np.percentile(a, 95)),
        "p99_us": float(np.percentile(a, 99)),
        "mean_us": float(a.mean()),
    }


def _recall(found: list, gt: np.ndarray, k: int) -> float:
    hits = sum(len(set(f[:k]) & set(g[:k].tolist())) for f, g in zip(found, gt))
    return hits / (len(found) * k)


def _run_concurrent(n_queries: int, conc: int, make_worker) -> tuple[list, list, float]:
    """Runs queries 0..n-1 split round-robin over ``conc`` threads; each
    thread gets ``make_worker()`` (a function query index -> ids)."""
    lat = [0] * n_queries
    found: list = [None] * n_queries
    barrier = threading.Barrier(conc + 1)
    errors: list = []

    def body(tid: int):
        try:
            run = make_worker()
            # One warm-up request per thread, not timed.
            run(tid % n_queries)
            barrier.wait()
            for i in range(tid, n_queries, conc):
                t0 = time.perf_counter_ns()
                found[i] = run(i)
                lat[i] = time.perf_counter_ns() - t0
        except Exception as e:  # surfaced below
            errors.append(e)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    ts = [threading.Thread(target=body, args=(t,)) for t in range(conc)]
    for t in ts:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return lat, found, wall


def ingest_flight(srv: Server, name: str, base: np.ndarray, batch: int) -> dict:
    import pyarrow as pa
    import pyarrow.flight as fl

    client = fl.FlightClient(srv.flight_url)
    n, d = base.shape
    schema = pa.schema([("id", pa.uint64()), ("vector", pa.list_(pa.float32(), d))])
    t0 = time.perf_counter()
    writer, reader = client.do_put(fl.FlightDescriptor.for_path(name), schema)
    acked = 0
    for s in range(0, n, batch):
        x = np.ascontiguousarray(base[s : s + batch], dtype=np.float32)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), d)
        rb = pa.record_batch(
            [pa.array(np.arange(s, s + len(x), dtype=np.uint64)), vec], schema=schema
        )
        writer.write_batch(rb)
        acked += json.loads(reader.read().to_pybytes())["rows"]
    writer.done_writing()
    writer.close()
    secs = time.perf_counter() - t0
    assert acked == n, (acked, n)
    return _rates("flight", name, n, d, secs)


def settle(srv: Server, name: str, timeout: float = 1800.0) -> float:
    """Seconds until the collection's background optimizer has indexed every
    row (polls the index status; a benchmark, not a test), so the next
    measurement starts on a quiet server."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(srv.http_addr, timeout=60)
    try:
        while time.perf_counter() - t0 < timeout:
            conn.request("GET", f"/collections/{name}/index")
            st = json.loads(conn.getresponse().read())
            if (
                st["unindexed_vectors"] == 0
                and st["optimizer_task"] is None
                and st.get("optimizer_deferred") is None
            ):
                return time.perf_counter() - t0
            time.sleep(0.05)
    finally:
        conn.close()
    raise TimeoutError(f"{name}: not indexed after {timeout} s")


def ingest_http(srv: Server, name: str, base: np.ndarray, batch: int) -> dict:
    n, d = base.shape
    conn = http.client.HTTPConnection(srv.http_addr, timeout=600)
    encode = 0.0
    t0 = time.perf_counter()
    for s in range(0, n, batch):
        te = time.perf_counter()
        x = np.asarray(base[s : s + batch], dtype=np.float32)
        body = json.dumps({"ids": list(range(s, s + len(x))), "vectors": x.tolist()}).encode()
        encode += time.perf_counter() - te
        conn.request("POST", f"/collections/{name}/upsert", body=body)
        r = conn.getresponse()
        out = r.read()
        if r.status != 200:
            raise RuntimeError(out[:500])
    secs = time.perf_counter() - t0
    conn.close()
    out = _rates("http", name, n, d, secs)
    out["client_json_encode_s"] = encode
    out["rows_per_s_excl_client_encode"] = n / (secs - encode)
    return out


def _rates(proto: str, name: str, n: int, d: int, secs: float) -> dict:
    mb = n * (d * 4 + 8) / 1e6
    return {
        "protocol": proto,
        "collection": name,
        "rows": n,
        "seconds": secs,
        "rows_per_s": n / secs,
        "mb_per_s": mb / secs,
    }


def create(srv: Server, name: str, d: int, kind: str) -> None:
    import sagitta

    sagitta.Client(srv.url).create_collection(name, ndim=d, metric="cos", kind=kind)


def latency(srv: Server, data_dir: Path, name: str, queries: np.ndarray, gt, k: int, conc_list):
    import pyarrow.flight as fl
    import sagitta

    rows = []
    n = len(queries)
    bodies = [json.dumps({"vector": q.tolist(), "k": k}).encode() for q in queries]
    tickets = [
        fl.Ticket(json.dumps({"search": {"dataset": name, "vector": q.tolist(), "k": k}}).encode())
        for q in queries
    ]
    local = sagitta.Collection.open(data_dir / name, read_only=True)

    def http_worker():
        conn = http.client.HTTPConnection(srv.http_addr, timeout=60)
        conn.connect()
        import socket

        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        path = f"/collections/{name}/search"
        headers = {"content-type": "application/json"}

        def run(i):
            conn.request("POST", path, body=bodies[i], headers=headers)
            r = conn.getresponse()
            out = json.loads(r.read())
            if r.status != 200:
                raise RuntimeError(out)
            return [h["id"] for h in out["hits"]]

        return run

    def flight_worker():
        client = fl.FlightClient(srv.flight_url)

        def run(i):
            t = client.do_get(tickets[i]).read_all()
            return t.column("id").to_pylist()

        return run

    def local_worker():
        def run(i):
            return local.search(queries[i], k).keys.tolist()

        return run

    for conc in conc_list:
        for mode, mk in (
            ("in-process", local_worker),
            ("http", http_worker),
            ("flight", flight_worker),
        ):
            lat, found, wall = _run_concurrent(n, conc, mk)
            row = {
                "client": "python",
                "mode": mode,
                "concurrency": conc,
                "qps": n / wall,
                "recall": _recall(found, gt, k),
                **_pct(lat),
            }
            rows.append(row)
            print(
                f"  c={conc:<3} {mode:<10} p50 {row['p50_us']:8.0f} µs  p95 {row['p95_us']:8.0f}  "
                f"p99 {row['p99_us']:8.0f}  QPS {row['qps']:7.0f}  recall {row['recall']:.3f}",
                file=sys.stderr,
            )
    return rows


def latency_rust(
    srv: Server,
    data_dir: Path,
    name: str,
    queries,
    gt,
    k: int,
    conc_list,
    tmp: Path,
    modes: str = "in-process,http,flight",
):
    """The same measurement from lean Rust clients (``sagitta-bench bench-serve``)."""
    import subprocess

    from server_util import sagitta_bench_bin

    qp, gp = tmp / "q.npy", tmp / "gt.npy"
    np.save(qp, np.asarray(queries, dtype=np.float32))
    np.save(gp, np.asarray(gt, dtype=np.int32))
    cmd = [sagitta_bench_bin(), "bench-serve", "--http", srv.http_addr, "--flight", srv.flight_addr]
    cmd += ["--collection", name, "--dir", str(data_dir / name), "--queries", str(qp)]
    cmd += ["--gt", str(gp), "--k", str(k), "--concurrency", ",".join(map(str, conc_list))]
    cmd += ["--modes", modes]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for row in rows:
        print(
            f"  rust c={row['concurrency']:<3} {row['mode']:<10} p50 {row['p50_us']:8.0f} µs  "
            f"p99 {row['p99_us']:8.0f}  QPS {row['qps']:7.0f}  recall {row['recall']:.3f}",
            file=sys.stderr,
        )
    return rows


def crash(base: np.ndarray, tmp: Path, batch: int, kill_after: int) -> dict:
    """kill -9 during a Flight ingest; restart; check the acknowledged rows."""
    import pyarrow as pa
    import pyarrow.flight as fl
    import sagitta

    data = tmp / "crash-data"
    n, d = base.shape
    srv = Server(data)
    create(srv, "crash", d, "hnsw")
    client = fl.FlightClient(srv.flight_url)
    schema = pa.schema([("id", pa.uint64()), ("vector", pa.list_(pa.float32(), d))])
    writer, reader = client.do_put(fl.FlightDescriptor.for_path("crash"), schema)
    acked = 0
    sent = 0
    for s in range(0, n, batch):
        x = np.ascontiguousarray(base[s : s + batch], dtype=np.float32)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), d)
        ids = pa.array(np.arange(s, s + len(x), dtype=np.uint64))
        writer.write_batch(pa.record_batch([ids, vec], schema=schema))
        sent += len(x)
        if s // batch == kill_after:
            break  # this batch is on the wire, unacknowledged
        acked += json.loads(reader.read().to_pybytes())["rows"]
    code = srv.stop(signal.SIGKILL)
    with contextlib.suppress(Exception):
        writer.close()
    t0 = time.perf_counter()
    srv2 = Server(data)
    restart_s = time.perf_counter() - t0
    try:
        col = sagitta.Client(srv2.url).collection("crash")
        count = col.count()
        missing = 0
        for s in range(0, acked, 5000):
            ids = list(range(s, min(acked, s + 5000)))
            v = col.get(ids)
            missing += int(np.isnan(v).any(axis=1).sum())
            x = np.asarray(base[s : s + len(ids)], dtype=np.float32)
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
            ok = np.isnan(v).any(axis=1) | np.all(np.abs(v - x) < 1e-5, axis=1)
            assert ok.all(), "a recovered vector differs from the one written"
    finally:
        srv2.stop()
    return {
        "sent_rows": sent,
        "acked_rows": acked,
        "kill_exit_code": code,
        "restart_to_listening_s": restart_s,
        "rows_after_restart": count,
        "acked_rows_missing": missing,
    }


def markdown(run: dict) -> str:
    out = []
    out.append(
        "| protocol | collection | rows | seconds | rows/s | MB/s "
        "| rows/s without client JSON encoding | vs median Flat, same protocol "
        "| indexed after (s) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    flats: dict = {}
    for r in run["ingest"]:
        if r.get("kind") == "flat" or r["collection"].endswith("_flat"):
            flats.setdefault(r["protocol"], []).append(r["rows_per_s"])
    flat = {p: float(np.median(v)) for p, v in flats.items()}
    for r in run["ingest"]:
        excl = r.get("rows_per_s_excl_client_encode")
        excl_s = "" if excl is None else f"{excl:.0f}"
        ratio = f"{r['rows_per_s'] / flat[r['protocol']]:.2f}x" if r["protocol"] in flat else ""
        settle_s = f"{r['settle_s']:.1f}" if "settle_s" in r else ""
        out.append(
            f"| {r['protocol']} | {r['collection']} | {r['rows']} | {r['seconds']:.1f} | "
            f"{r['rows_per_s']:.0f} | {r['mb_per_s']:.1f} | {excl_s} | {ratio} | {settle_s} |"
        )
    bg = run.get("background_ingest")
    if bg:
        out.append("")
        out.append(
            f"Rows marked *during ingest* were measured while a Flight ingest of the same "
            f"{bg['rows']} rows into another collection ran ({bg['rows_per_s']:.0f} rows/s)."
        )
    out.append("")
    out.append("| client | concurrency | mode | p50 µs | p95 µs | p99 µs | QPS | recall@10 |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in run["latency"]:
        out.append(
            f"| {r['client']} | {r['concurrency']} | {r['mode']} | {r['p50_us']:.0f} | "
            f"{r['p95_us']:.0f} | {r['p99_us']:.0f} | {r['qps']:.0f} | {r['recall']:.3f} |"
        )
    out.append("")
    for client in ("rust", "python"):
        c1 = {
            r["mode"]: r for r in run["latency"] if r["concurrency"] == 1 and r["client"] == client
        }
        base = c1.get("in-process")
        for m in ("http", "flight"):
            if base and m in c1:
                d50 = c1[m]["p50_us"] - base["p50_us"]
                d99 = c1[m]["p99_us"] - base["p99_us"]
                out.append(
                    f"- {client} client, concurrency 1, {m} over in-process: "
                    f"p50 +{d50:.0f} µs, p99 +{d99:.0f} µs"
                )
    if run.get("crash"):
        c = run["crash"]
        out.append("")
        out.append(
            f"- kill -9 during Flight ingest: {c['acked_rows']} rows acknowledged "
            f"({c['sent_rows']} sent); after restart {c['rows_after_restart']} rows, "
            f"{c['acked_rows_missing']} acknowledged rows missing"
        )
    return "\n".join(out)


def write_md(path: Path, run: dict) -> str:
    md = markdown(run)
    path.write_text(
        f"Command: `{run['env']['command']}`\n\nMachine: {run['env']['cpu']}, "
        f"{run['env']['cores']} cores; Sagitta ISA {run['env']['isa']}; {run['rows']} rows, "
        f"{run['queries']} queries.\n\n{md}\n"
    )
    return md


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench server", description=__doc__)
    ap.add_argument("--dataset", default="debian-minilm")
    ap.add_argument("--rows", type=int, help="ingest only the first N rows")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--flight-batch", type=int, default=5000)
    ap.add_argument("--http-batch", type=int, default=1000)
    ap.add_argument("--no-http-ingest", action="store_true", help="skip the HTTP HNSW ingest")
    ap.add_argument("--flat", action="store_true", help="also ingest into Flat collections")
    ap.add_argument("--crash", action="store_true", help="kill -9 during a Flight ingest")
    ap.add_argument(
        "--ingest-reps",
        type=int,
        default=2,
        help="rounds of Flight ingest (HNSW, Flat) interleaved",
    )
    ap.add_argument(
        "--under-ingest",
        action="store_true",
        help="also measure concurrency-1 search latency while a Flight ingest runs",
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = ap.parse_args(argv)
    ds = datasets.load(args.dataset, args.k)
    if ds.metric != "cos":
        raise SystemExit("server mode runs on float (cosine) datasets")
    base = ds.base()
    if args.rows:
        base = base[: args.rows]
    n, d = base.shape
    queries = np.asarray(ds.queries()[: args.queries], dtype=np.float32)
    gt = ds.gt()[: len(queries), : args.k]
    if args.rows:
        gt = datasets.exact_topk(np.asarray(base, dtype=np.float32), queries, args.k)
    conc = [int(c) for c in args.concurrency.split(",")]

    run: dict = {
        "kind": "server",
        "dataset": ds.name,
        "rows": n,
        "k": args.k,
        "queries": len(queries),
        "env": run_env("server ", argv),
        "ingest": [],
    }
    with tempfile.TemporaryDirectory(prefix="sgb-server-") as tmp:
        tmp = Path(tmp)
        data = tmp / "data"
        with Server(data) as srv:
            print(f"server {srv.url} / {srv.flight_url}; ingest {n} x {d}", file=sys.stderr)
            # Flight ingest, HNSW and Flat interleaved (--ingest-reps rounds,
            # each collection indexed before the next starts), so neither
            # side gets the warm-up or a busy background optimizer.
            kinds = ["hnsw", "flat"] if args.flat else ["hnsw"]
            # Warm-up, not reported: the first ingest on a fresh server pays
            # for page faults, the dataset's first read and client start-up.
            create(srv, "warmup", d, "flat")
            ingest_flight(srv, "warmup", base, args.flight_batch)
            settle(srv, "warmup")
            for rep in range(args.ingest_reps):
                for kind in kinds:
                    name = "flight_hnsw" if (kind, rep) == ("hnsw", 0) else f"flight_{kind}_{rep}"
                    create(srv, name, d, kind)
                    run["ingest"].append(ingest_flight(srv, name, base, args.flight_batch))
                    run["ingest"][-1]["kind"] = kind
                    run["ingest"][-1]["settle_s"] = settle(srv, name)
                    print(f"  {run['ingest'][-1]}", file=sys.stderr)
            if not args.no_http_ingest:
                for kind in kinds:
                    name = f"http_{kind}"
                    create(srv, name, d, kind)
                    run["ingest"].append(ingest_http(srv, name, base, args.http_batch))
                    run["ingest"][-1]["kind"] = kind
                    run["ingest"][-1]["settle_s"] = settle(srv, name)
                    print(f"  {run['ingest'][-1]}", file=sys.stderr)
            run["latency"] = latency_rust(srv, data, "flight_hnsw", queries, gt, args.k, conc, tmp)
            run["latency"] += latency(srv, data, "flight_hnsw", queries, gt, args.k, conc)
            if args.under_ingest:
                create(srv, "bg_hnsw", d, "hnsw")
                bg: list = []
                t = threading.Thread(
                    target=lambda: bg.append(ingest_flight(srv, "bg_hnsw", base, args.flight_batch))
                )
                t.start()
                busy = latency_rust(
                    srv, data, "flight_hnsw", queries, gt, args.k, [1], tmp, modes="http,flight"
                )
                t.join()
                for r in busy:
                    r["mode"] += " during ingest"
                run["latency"] += busy
                run["background_ingest"] = bg[0] if bg else None
        if args.crash:
            run["crash"] = crash(base, tmp, 2000, kill_after=min(20, n // 2000 - 1))
            print(f"  crash: {run['crash']}", file=sys.stderr)
    run["time"] = time.time()
    out = args.out / "server"
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{ds.name}-k{args.k}" + (f"-{n}" if args.rows else "")
    (out / f"{stem}.json").write_text(json.dumps(run, indent=1))
    md = write_md(out / f"{stem}.md", run)
    print(md)
    print(f"\nwrote {out / stem}.{{json,md}}")


if __name__ == "__main__":
    main()
