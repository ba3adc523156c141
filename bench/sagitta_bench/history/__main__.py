"""``python -m sagitta_bench.history run|check``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m sagitta_bench.history")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="a cluster under clients and a nemesis, then the check")
    r.add_argument("--minutes", type=float, default=5.0, help="length of the fault phase")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--out", required=True, help="directory for report.json and history.jsonl.gz")
    r.add_argument("--nodes", type=int, default=3, help="Ray nodes (n0: the head, never faulted)")
    r.add_argument("--shards", type=int, default=2)
    r.add_argument("--replicas", type=int, default=2)
    r.add_argument("--keys", type=int, default=16, help="registers (keys 0..N-1)")
    r.add_argument("--clients", type=int, default=4, help="client threads")
    r.add_argument("--timeout", type=float, default=20.0, help="seconds per client call")
    r.add_argument(
        "--interval",
        type=float,
        nargs=2,
        default=[4.0, 12.0],
        metavar=("MIN", "MAX"),
        help="seconds between faults (uniform)",
    )
    r.add_argument(
        "--pause",
        type=float,
        nargs=2,
        default=[0.3, 6.0],
        metavar=("MIN", "MAX"),
        help="seconds a paused node stays stopped (uniform)",
    )
    r.add_argument(
        "--faults",
        default="kill,pause,controller",
        help="comma list of kill, pause, controller, rebalance ('' for none)",
    )
    r.add_argument(
        "--rebalance",
        type=float,
        default=0.5,
        help="odds of a rebalance after a replacement node joins",
    )
    r.add_argument(
        "--scope",
        choices=["session", "group"],
        default="session",
        help="node faults signal every process of the node, or its process group only",
    )
    r.add_argument("--publish-interval", type=float, default=10.0)
    r.add_argument(
        "--settle", type=float, default=5.0, help="seconds the clients run on after healing"
    )
    c = sub.add_parser("check", help="check a recorded history again")
    c.add_argument("history", type=Path)
    c.add_argument("--budget", type=int, default=None)
    c.add_argument(
        "--write",
        action="store_true",
        help="put the result into the report.json beside the history",
    )
    a = ap.parse_args(argv)
    if a.cmd == "run":
        from .runner import run, summary

        a.command = "python -m sagitta_bench.history " + " ".join(argv)
        rep = run(a)
        print(summary(rep))
        return 0 if rep["verdict"] == "valid" else 1
    from . import checker, model

    ops, meta = model.load(a.history)
    kw = {} if a.budget is None else {"budget": a.budget}
    rep = checker.check(ops, meta["nkeys"], replicas=meta.get("replicas"), **kw)
    if a.write:
        path = a.history.parent / "report.json"
        report = json.loads(path.read_text())
        report["checker"] = rep
        report["verdict"] = rep["verdict"]
        path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(rep, indent=1, default=str))
    return 0 if rep["verdict"] == "valid" else 1


if __name__ == "__main__":
    sys.exit(main())
