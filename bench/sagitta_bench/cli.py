"""`sagitta-bench run ...`: every engine on the same data in one run."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from . import datasets, report
from .engines import ENGINES

MODES = {
    "quick": {"knobs": [16, 32, 64, 128], "queries": 200},
    "full": {"knobs": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512], "queries": 1000},
}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_engine(name: str, cfg: dict, bar: tqdm) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"sgb-{name}-") as tmp:
        cfg = {**cfg, "engine": name, "workdir": str(Path(tmp) / "work")}
        cfg_path, out_path = Path(tmp) / "cfg.json", Path(tmp) / "out.json"
        cfg_path.write_text(json.dumps(cfg))
        proc = subprocess.Popen(
            [sys.executable, "-m", "sagitta_bench.worker", str(cfg_path), str(out_path)],
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        tail = []
        for line in proc.stderr:
            tail = [*tail, line][-20:]
            if line.startswith('{"progress"'):
                p = json.loads(line)
                bar.set_postfix_str(f"{name} ef={p['knob']} recall={p['recall']:.3f}")
                bar.update(1)
        if proc.wait() != 0:
            raise SystemExit(f"{name} failed:\n{''.join(tail)}")
        return json.loads(out_path.read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="sagitta-bench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark engines on one dataset")
    r.add_argument(
        "--dataset", default="debian-minilm", help="debian-minilm | synthetic:N:D[:SEED]"
    )
    r.add_argument("--engines", default="all", help=f"comma list of {','.join(ENGINES)} or all")
    r.add_argument("--mode", choices=MODES, default="full")
    r.add_argument("--k", type=int, default=10)
    r.add_argument("--m", type=int, default=16)
    r.add_argument("--ef-construction", type=int, default=128)
    r.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    r.add_argument("--queries", type=int, help="override the mode's query count")
    r.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    r.add_argument("--write-benchmarks", type=Path, help="also write this BENCHMARKS.md")
    args = ap.parse_args(argv)

    names = list(ENGINES) if args.engines == "all" else args.engines.split(",")
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; known: {list(ENGINES)}")
    ds = datasets.load(args.dataset, args.k)
    mode = MODES[args.mode]
    n_queries = min(args.queries or mode["queries"], len(ds.queries()))
    cfg = {
        "dataset": ds.name,
        "dataset_dir": str(ds.dir),
        "k": args.k,
        "m": args.m,
        "ef_construction": args.ef_construction,
        "threads": args.threads,
        "queries": n_queries,
        "knobs": mode["knobs"],
    }
    import sagitta

    env = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "python": platform.python_version(),
        "command": "python -m sagitta_bench " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    results = []
    with tqdm(total=len(names) * len(mode["knobs"]), desc="engines × ef", unit="pt") as bar:
        for name in names:
            results.append(run_engine(name, cfg, bar))
    run = {**cfg, "mode": args.mode, "env": env, "results": results, "time": time.time()}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{ds.name}-k{args.k}-{args.mode}"
    (args.out / f"{stem}.json").write_text(json.dumps(run, indent=1))
    md = report.markdown(run)
    (args.out / f"{stem}.md").write_text(md + "\n")
    report.plot(run, args.out / f"{stem}.png")
    print(md)
    print(f"\nwrote {args.out / stem}.{{json,md,png}}")
    if args.write_benchmarks:
        rel = os.path.relpath(args.out / f"{stem}.png", args.write_benchmarks.parent)
        versions = ", ".join(f"{r['engine']} {r['version']}" for r in results)
        text = (
            "# Benchmarks\n\n"
            "Produced by the harness in `bench/` (see bench/README.md); every engine runs in "
            "its own process on the same data in the same run.\n\n"
            f"Command: `{env['command']}`\n\n"
            f"Machine: {env['cpu']}, {env['cores']} cores; Python {env['python']}; "
            f"Sagitta ISA {env['isa']}.\n\n"
            f"Versions: {versions}.\n\n"
            f"![recall vs QPS]({rel})\n\n{md}\n"
        )
        args.write_benchmarks.write_text(text)
        print(f"wrote {args.write_benchmarks}")


if __name__ == "__main__":
    main()
