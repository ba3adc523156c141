"""The paired table of `peer.sh`'s load-test lines.

    python3 crates/sagitta-fraud/peer/table.py /tmp/sagitta-fraud-peer/load.txt

One row per round and scheduler: each engine's p99 (ms), dropped
iterations, errors, wrong decisions (FP + FN) and final score, and its p99
over the floor's (the no-op server through the same balancer) in that
round; then, per scheduler, whether Sagitta's p99 was below every peer's in
every round.
"""

import re
import sys
from collections import defaultdict


def parse(path):
    """{(round, sched): {engine: fields}} from `round=.. config=ENGINE-SCHED requests=..` lines."""
    runs = defaultdict(dict)
    with open(path) as lines:
        for line in lines:
            f = dict(re.findall(r"(\w+)=(\S+)", line))
            if "config" not in f:
                continue
            engine, sched = f["config"].rsplit("-", 1)
            runs[(int(f["round"]), sched)][engine] = f
    return runs


def cell(f, floor, engine):
    if f is None:
        return "-"
    if "p99" not in f:
        return "failed"
    p99 = float(f["p99"].removesuffix("ms"))
    ratio = f" ({p99 / floor:.2f}x)" if floor else ""
    if engine == "floor":  # its answers are fixed: decisions and score mean nothing
        return f"{p99:.3f} d={f['dropped']} e={f['errors']}"
    wrong = int(f["FP"]) + int(f["FN"])
    return f"{p99:.3f}{ratio} d={f['dropped']} e={f['errors']} w={wrong} s={float(f['final_score']):.0f}"


def main(path):
    runs = parse(path)
    engines = []
    for r in runs.values():
        engines += [e for e in r if e not in engines]
    print(
        "p99 ms (over the floor's), d = dropped, e = errors, w = FP + FN, s = final score"
    )
    print("| round | sched | " + " | ".join(engines) + " |")
    print("|---|---|" + "---|" * len(engines))
    wins = defaultdict(list)
    for (rnd, sched), r in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        floor = r.get("floor", {}).get("p99")
        floor = float(floor.removesuffix("ms")) if floor else None
        print(
            f"| {rnd} | {sched} | "
            + " | ".join(cell(r.get(e), floor, e) for e in engines)
            + " |"
        )
        if "sagitta" in r and "p99" in r["sagitta"]:
            ours = float(r["sagitta"]["p99"].removesuffix("ms"))
            peers = [
                float(f["p99"].removesuffix("ms"))
                for e, f in r.items()
                if e not in ("sagitta", "floor") and "p99" in f
            ]
            wins[sched].append(all(ours < p for p in peers))
    for sched, w in sorted(wins.items()):
        print(
            f"{sched}: Sagitta's p99 below every peer's in {sum(w)} of {len(w)} rounds"
        )


if __name__ == "__main__":
    main(sys.argv[1])
