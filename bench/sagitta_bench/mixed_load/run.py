"""``python -m sagitta_bench.mixed_load``: arguments, the load, the checks
after it (at once, settled, after a restart), and the results written."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .api import FlightApi, HttpApi
from .check import final_check, settle
from .clients import Client, Monitor, Shared
from .model import COLLECTION, DIMS, REPO, SEED_KEY, SEED_ROW, WEIGHTS, vectors_of
from .report import markdown, summarize, verdict
from .server import Server, binary_info, dump_stacks, loadavg, log_summary, machine_info, responsive

DEFAULT_BIN = REPO / "target" / "release" / "sagitta"
DEFAULT_OUT = REPO / "bench" / "results" / "mixed_load"


# -------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m sagitta_bench.mixed_load",
        description="Sustained mixed HTTP + Flight load on the real server, then a full "
        "consistency check.",
    )
    ap.add_argument("--minutes", type=float, default=10.0, help="load duration (default 10)")
    ap.add_argument("--clients", type=int, default=16, help="client threads (default 16)")
    ap.add_argument(
        "--http-clients",
        type=int,
        default=None,
        help="how many of them use HTTP (default half; the rest Flight)",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results directory")
    ap.add_argument(
        "--bin",
        type=Path,
        default=Path(os.environ.get("SAGITTA_BIN", DEFAULT_BIN)),
        help="the sagitta binary (default $SAGITTA_BIN or target/release/sagitta)",
    )
    ap.add_argument("--keys-per-client", type=int, default=4096)
    ap.add_argument(
        "--segment-kib",
        type=int,
        default=256,
        help="the collection's segment_size, KiB (default 256: frequent seals)",
    )
    ap.add_argument(
        "--index-threshold",
        type=int,
        default=1000,
        help="the collection's index_threshold, rows (default 1000)",
    )
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for `sagitta serve` (repeatable), e.g. "
        "--server-arg=--max-pending-ingest=2",
    )
    ap.add_argument("--bucket-s", type=float, default=60.0, help="latency-over-time bucket")
    ap.add_argument("--sample-s", type=float, default=2.0, help="server sampling interval")
    ap.add_argument(
        "--final-queries", type=int, default=20, help="queries of the final exact-search comparison"
    )
    ap.add_argument(
        "--settle-s",
        type=float,
        default=180.0,
        help="longest wait for the optimizer to settle after the load",
    )
    ap.add_argument("--no-restart", action="store_true", help="skip the restart pass")
    ap.add_argument(
        "--no-index-poll",
        action="store_true",
        help="do not poll GET /collections/C/index during the load (the monitor's poll is "
        "part of the mixed load by default)",
    )
    ap.add_argument(
        "--request-timeout", type=float, default=45.0, help="client timeout per request, s"
    )
    ap.add_argument(
        "--hang-s",
        type=float,
        default=60.0,
        help="stop the load (and take the server's stacks) when no HTTP request is answered, "
        "or no write acknowledged, for this long",
    )
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args(argv)


def run_load(
    srv: Server, args: argparse.Namespace, n_http: int
) -> tuple[list[Client], Monitor, float]:
    """The clients' load for ``args.minutes``; returns them, the monitor
    and the load's seconds."""
    t0 = time.perf_counter()
    shared = Shared(t0, t0 + args.minutes * 60, t0)
    clients = [
        Client(
            cid,
            HttpApi(srv.http_addr, args.request_timeout)
            if cid < n_http
            else FlightApi(srv.flight_addr, args.request_timeout),
            args.keys_per_client,
            shared,
            args.seed,
        )
        for cid in range(args.clients)
    ]
    mon = Monitor(srv, shared, args.sample_s, not args.no_index_poll, args.hang_s)
    mon.start()
    for c in clients:
        c.start()
    print(
        f"load: {args.clients} clients for {args.minutes:g} min; server pid {srv.pid}, "
        f"http {srv.http_addr}, flight {srv.flight_addr}",
        file=sys.stderr,
    )
    last = 0.0
    try:
        while any(c.is_alive() for c in clients):
            for c in clients:
                c.join(timeout=0.5 / len(clients))
            el = time.perf_counter() - t0
            if el - last >= 10 or not any(c.is_alive() for c in clients):
                last = el
                ops = sum(len(c.records) for c in clients)
                errs = sum(sum(c.errors.values()) for c in clients)
                bad = sum(sum(c.checks.bad.values()) for c in clients)
                rss = srv.rss_kib()
                print(
                    f"  {el:6.0f} s  {ops} ops ({ops / max(el, 1e-9):.0f}/s)  errors {errs}"
                    f"  mismatches {bad}  rss {rss and rss // 1024} MiB"
                    + (f"  STOPPING: {mon.hang}" if mon.hang else ""),
                    file=sys.stderr,
                )
    except KeyboardInterrupt:
        shared.stop.set()
        for c in clients:
            c.join()
    load_s = time.perf_counter() - t0
    mon.done.set()
    mon.join()
    return clients, mon, load_s


def after_load(
    srv: Server,
    args: argparse.Namespace,
    clients: list[Client],
    mon: Monitor,
    start: Callable[[], Server],
    stacks_path: Path,
) -> tuple[Server, dict]:
    """Stacks if the server hung, then the final checks: after the load,
    after the optimizer settled, and after a restart (SIGTERM, or kill -9
    if it hung). Returns the server now running and the findings."""
    out: dict[str, Any] = {"final_checks": [], "exit_codes": [], "stacks": []}
    if not srv.alive():
        return srv, out
    ok, probe = responsive(srv)
    mon.hang = mon.hang or probe
    if mon.hang:
        print("the server hangs: taking its stacks (gdb)", file=sys.stderr)
        out["stacks"] = dump_stacks(srv.pid, stacks_path)
        out["stacks_file"] = str(stacks_path)
    out["metrics_end"] = HttpApi(srv.http_addr, 10).metrics() if ok else {}
    out["rss_end_kib"] = srv.rss_kib()
    fq, seed = args.final_queries, args.seed
    if ok:
        http = HttpApi(srv.http_addr, args.request_timeout)
        flight = FlightApi(srv.flight_addr, args.request_timeout)
        out["final_checks"].append(final_check("after load", http, flight, clients, fq, seed))
        if not mon.hang:
            out["settle"] = settle(http, args.settle_s)
            out["final_checks"].append(
                final_check("after settle", http, flight, clients, fq, seed + 1)
            )
        http.close()
        flight.close()
    if args.no_restart:
        return srv, out
    hung = bool(mon.hang)
    if hung:
        out["killed_hung_server"] = srv.stop(sig=signal.SIGKILL)
    else:
        out["exit_codes"].append(srv.stop())
    label = "after kill -9 and restart" if hung else "after restart"
    for c in clients:
        c.model.reopen()
    srv = start()
    out["restart_s"] = srv.start_s
    http = HttpApi(srv.http_addr, args.request_timeout)
    flight = FlightApi(srv.flight_addr, args.request_timeout)
    out["final_checks"].append(final_check(label, http, flight, clients, fq, seed + 2))
    http.close()
    flight.close()
    return srv, out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.bin.exists():
        print(
            f"{args.bin} not found: build it with `cargo build --release -p sagitta-cli` "
            "(or give --bin / $SAGITTA_BIN)",
            file=sys.stderr,
        )
        return 2
    n_http = args.clients // 2 if args.http_clients is None else args.http_clients
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / f"{stamp}-{args.minutes:g}min-{args.clients}c"
    machine = {**machine_info(), "loadavg_start": loadavg()}
    coll = {
        "name": COLLECTION,
        "dims": DIMS,
        "metric": "l2",
        "segment_size": args.segment_kib * 1024,
        "index_threshold": args.index_threshold,
    }
    res: dict[str, Any] = {
        "config": {
            "minutes": args.minutes,
            "clients": args.clients,
            "http_clients": n_http,
            "flight_clients": args.clients - n_http,
            "keys_per_client": args.keys_per_client,
            "collection": coll,
            "server_binary": binary_info(args.bin),
            "server_args": args.server_arg,
            "index_poll_during_load": not args.no_index_poll,
            "request_timeout_s": args.request_timeout,
            "hang_s": args.hang_s,
            "weights": WEIGHTS,
            "bucket_s": args.bucket_s,
            "seed": args.seed,
            "started": stamp,
        },
    }
    tmp = tempfile.TemporaryDirectory(prefix="sagitta-mixed-")
    # The binary is copied first: a rebuild during the run must not change
    # the server the restart pass starts.
    binary = Path(tmp.name) / "sagitta"
    shutil.copy2(args.bin, binary)
    data, log_path = Path(tmp.name) / "data", Path(tmp.name) / "server.log"

    def start() -> Server:
        return Server(binary, data, log_path, args.server_arg)

    srv = start()
    exit_codes: list[int] = []
    try:
        http = HttpApi(srv.http_addr, args.request_timeout)
        http.call("POST", "/collections", coll)
        # The payload columns exist before the load (a filter on a column no
        # row has written yet is refused): one row, written and deleted,
        # outside every client's range.
        http.upsert([SEED_KEY], vectors_of([SEED_KEY]), [SEED_ROW])
        http.delete([SEED_KEY])
        metrics_start = http.metrics()
        http.close()
        clients, mon, load_s = run_load(srv, args, n_http)
        mon.sample()
        print(f"load done after {load_s:.0f} s; final checks", file=sys.stderr)
        srv, fin = after_load(srv, args, clients, mon, start, Path(f"{base}.stacks.txt"))
        exit_codes += fin["exit_codes"]
    finally:
        exit_codes.append(srv.stop())
    res["load_seconds"] = round(load_s, 2)
    res["machine"] = {**machine, "loadavg_end": loadavg()}
    res.update(summarize(clients, load_s, args.bucket_s))
    log = log_summary(log_path)
    rss = [s["rss_kib"] for s in mon.samples if s.get("rss_kib")]
    metrics_end = fin.get("metrics_end", {})
    rss_end = fin.get("rss_end_kib")
    opt = f'{{collection="{COLLECTION}"}}'
    res["server"] = {
        "rss_mib": {
            "start": rss[0] / 1024 if rss else None,
            "end": rss_end / 1024 if rss_end else None,
            "max": max(rss) / 1024 if rss else None,
        },
        "samples": mon.samples,
        "monitor_failures": dict(mon.failures),
        "hang": mon.hang,
        "stacks": fin["stacks"],
        "stacks_file": fin.get("stacks_file"),
        "metrics_start": metrics_start,
        "metrics_end": metrics_end,
        "optimizer_tasks": metrics_end.get(f"sagitta_optimizer_tasks{opt}"),
        "optimizer_errors": metrics_end.get(f"sagitta_optimizer_errors{opt}"),
        "settle": fin.get("settle", {}),
        "restart_s": fin.get("restart_s"),
        "exit_codes": exit_codes,
        "killed_hung_server": fin.get("killed_hung_server"),
        "died": mon.died,
        "log": log,
    }
    res["final_checks"] = fin["final_checks"]
    res["verdict"] = verdict(res, args)
    if res["verdict"]["failures"]:
        res["server_log_tail"] = log_path.read_text(errors="replace").splitlines()[-50:]
    tmp.cleanup()
    Path(f"{base}.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = markdown(res)
    Path(f"{base}.md").write_text(md)
    print(md)
    print(f"results: {base}.json, {base}.md", file=sys.stderr)
    return 1 if res["verdict"]["failures"] else 0
