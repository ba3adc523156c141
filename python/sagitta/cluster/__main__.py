"""``python -m sagitta.cluster``: serve the clusters of a Ray cluster over
HTTP/JSON (:mod:`sagitta.cluster.http`), or start a local multi-node Ray
cluster to try them on (:mod:`sagitta.cluster.local`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading


def _serve(a: argparse.Namespace) -> None:
    import ray

    from .http import Front, make_server

    ray.init(address=a.address, logging_level="ERROR", namespace="sagitta")
    front = Front(
        location=a.location,
        root=a.root,
        api_keys=tuple(a.api_key or ()) + tuple(filter(None, [os.environ.get("SAGITTA_API_KEY")])),
        read_keys=tuple(a.read_key or ()),
        timeout=a.timeout,
    )
    host, _, port = a.http.rpartition(":")
    srv = make_server(front, host or "127.0.0.1", int(port))
    h, p = srv.server_address[:2]
    print(json.dumps({"http": f"{h}:{p}"}), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    stop.wait()
    srv.shutdown()


def _local(a: argparse.Namespace) -> None:
    from .local import LocalRay

    r = LocalRay(nodes=a.nodes).start()
    print(json.dumps({"address": r.address, "nodes": r.alive_names()}), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stop.wait()
    finally:
        r.stop()


def main(argv: list | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m sagitta.cluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="HTTP/JSON in front of the clusters")
    s.add_argument("--address", default="auto", help="Ray address (default: auto)")
    s.add_argument("--http", default="127.0.0.1:7090", help="host:port (port 0: any)")
    s.add_argument("--location", help="object store for clusters created over HTTP")
    s.add_argument("--root", help="local directory of replicas on each node")
    s.add_argument("--api-key", action="append", help="a key that may read and write")
    s.add_argument("--read-key", action="append", help="a key that may only read")
    s.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    s.set_defaults(fn=_serve)
    lo = sub.add_parser("local", help="a Ray cluster of several nodes on this machine")
    lo.add_argument("--nodes", type=int, default=3)
    lo.set_defaults(fn=_local)
    a = ap.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main(sys.argv[1:])
