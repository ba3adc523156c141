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
from .engines import ENGINES, select

MODES = {
    "quick": {"knobs": {"ef": [16, 32, 64, 128], "nprobe": [2, 8, 32]}, "queries": 200},
    "full": {
        "knobs": {
            "ef": [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512],
            "nprobe": [1, 2, 4, 8, 16, 32, 64, 128],
        },
        "queries": 1000,
    },
}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_env(mode: str, argv: list[str] | None) -> dict:
    """Machine, ISA and the command of a run (``mode``: the subcommand
    prefix, such as ``"server "``)."""
    import sagitta

    args = sys.argv[1:] if argv is None else argv
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "isa": sagitta.isa(),
        "python": platform.python_version(),
        "command": f"python -m sagitta_bench {mode}" + " ".join(args),
    }


def run_engine(name: str, cfg: dict, bar: tqdm) -> dict:
    """Builds in one worker process, then opens and searches in another."""
    with tempfile.TemporaryDirectory(prefix=f"sgb-{name}-") as tmp:
        result: dict = {}
        for phase in ("build", "search"):
            pcfg = {**cfg, "engine": name, "workdir": str(Path(tmp) / "work"), "phase": phase}
            cfg_path, out_path = Path(tmp) / f"{phase}.json", Path(tmp) / f"{phase}-out.json"
            cfg_path.write_text(json.dumps(pcfg))
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
                    knob = ENGINES[name].knob
                    bar.set_postfix_str(f"{name} {knob}={p['knob']} recall={p['recall']:.3f}")
                    bar.update(1)
            if proc.wait() != 0:
                raise SystemExit(f"{name} ({phase}) failed:\n{''.join(tail)}")
            result.update(json.loads(out_path.read_text()))
        result["rss_peak_mb"] = max(result["rss_build_peak_mb"], result["rss_search_peak_mb"])
        return result


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["filtered"]:
        from . import filtered

        filtered.main(args_in[1:])
        return
    if args_in[:1] == ["server"]:
        from . import server

        server.main(args_in[1:])
        return
    ap = argparse.ArgumentParser(prog="sagitta-bench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark engines on one dataset")
    r.add_argument(
        "--dataset", default="debian-minilm", help="debian-minilm | synthetic:N:D[:SEED]"
    )
    r.add_argument(
        "--engines",
        default="hnsw",
        help=(
            "hnsw | ivf | ivf-rq (the bits x refine grid) | all (for the dataset's metric), "
            f"or a comma list of {','.join(ENGINES)}"
        ),
    )
    r.add_argument("--mode", choices=MODES, default="full")
    r.add_argument("--k", type=int, default=10)
    r.add_argument("--m", type=int, default=16)
    r.add_argument("--ef-construction", type=int, default=128)
    r.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    r.add_argument("--queries", type=int, help="override the mode's query count")
    r.add_argument(
        "--passes", type=int, default=3, help="single-thread passes per point; the fastest is kept"
    )
    r.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    r.add_argument("--write-benchmarks", type=Path, help="also write this BENCHMARKS.md")
    sub.add_parser(
        "filtered",
        help="filtered search at 0.1-100%% selectivity (see sagitta_bench.filtered)",
        add_help=False,
    )
    sub.add_parser(
        "server",
        help="the server over HTTP and Flight: ingest, latency at concurrency 1/4/16, kill -9",
        add_help=False,
    )
    w = sub.add_parser("report", help="rewrite BENCHMARKS.md from the runs in a results dir")
    w.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    w.add_argument("--write-benchmarks", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "report":
        write_benchmarks(args.write_benchmarks, args.out)
        print(f"wrote {args.write_benchmarks}")
        return

    ds = datasets.load(args.dataset, args.k)
    names = select(args.engines, ds.metric)
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise SystemExit(f"unknown or no engines {unknown or args.engines}; known: {list(ENGINES)}")
    mode = MODES[args.mode]
    n_queries = min(args.queries or mode["queries"], len(ds.queries()))
    cfg = {
        "dataset": ds.name,
        "dataset_dir": str(ds.dir),
        "metric": ds.metric,
        "k": args.k,
        "m": args.m,
        "ef_construction": args.ef_construction,
        "threads": args.threads,
        "queries": n_queries,
        "passes": args.passes,
        "knobs": mode["knobs"],
    }

    env = run_env("", argv)
    results = []
    points = sum(len(mode["knobs"][ENGINES[n].knob]) for n in names)
    with tqdm(total=points, desc="engines × knob", unit="pt") as bar:
        for name in names:
            results.append(run_engine(name, cfg, bar))
    run = {**cfg, "mode": args.mode, "env": env, "results": results, "time": time.time()}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{ds.name}-k{args.k}-{args.mode}" + (
        "" if args.engines == "hnsw" else f"-{args.engines}"
    )
    stem = stem.replace(",", "+")
    run["stem"] = stem
    run["engines"] = args.engines
    (args.out / f"{stem}.json").write_text(json.dumps(run, indent=1))
    md = report.markdown(run)
    (args.out / f"{stem}.md").write_text(md + "\n")
    report.plot(run, args.out / f"{stem}.png")
    print(md)
    print(f"\nwrote {args.out / stem}.{{json,md,png}}")
    if args.write_benchmarks:
        write_benchmarks(args.write_benchmarks, args.out)
        print(f"wrote {args.write_benchmarks}")


def write_benchmarks(path: Path, results_dir: Path) -> None:
    """BENCHMARKS.md from every run in ``results_dir`` (debian-minilm HNSW
    first), each with its command, machine, versions, plot and tables."""
    runs = [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]
    # debian-minilm HNSW first, then other datasets, IVF runs after HNSW ones.
    runs.sort(
        key=lambda r: (
            r["dataset"] != "debian-minilm",
            r["dataset"],
            r.get("engines", "hnsw") != "hnsw",
            r["env"]["command"],
        )
    )
    parts = [
        "# Benchmarks\n\n"
        "Produced by the harness in `bench/` (see bench/README.md): every engine runs in "
        "its own process on the same data in the same run; QPS 1t is one query per call "
        "on one thread. The machine is shared and noisy: compare engines within a run, "
        "not across runs.\n"
    ]
    for run in runs:
        env = run["env"]
        stem = run.get("stem") or f"{run['dataset']}-k{run['k']}-{run['mode']}"
        png = results_dir / f"{stem}.png"
        png = png if png.exists() else None
        versions = ", ".join(f"{r['engine']} {r['version']}" for r in run["results"])
        parts.append(
            f"\n## {run['dataset']}: {', '.join(r['engine'] for r in run['results'])}\n\n"
            f"Command: `{env['command']}`\n\n"
            f"Machine: {env['cpu']}, {env['cores']} cores; Python {env['python']}; "
            f"Sagitta ISA {env['isa']}. Versions: {versions}.\n\n"
            + (f"![recall vs QPS]({os.path.relpath(png, path.parent)})\n\n" if png else "")
            + report.markdown(run)
            + "\n"
        )
    for md in sorted((results_dir / "filtered").glob("*.md")):
        parts.append(
            f"\n## Filtered search ({md.stem})\n\n"
            "Recall@k against the exact top-k among the rows that pass the filter, and "
            "single-thread QPS, per filter family and selectivity "
            "(`sagitta_bench/filtered.py` describes the payload and the filters). Sagitta is "
            "a Collection at default settings reopened from disk, searched on one thread with "
            "ef 64. Runs made before the background optimizer (the stored one, if it says "
            "two sealed segments) searched two sealed segments plus an active one replayed "
            "from the WAL, each in turn, while each peer searched one graph: that, not the "
            "filters, was most of the gap in unfiltered QPS; the harness now waits for "
            "`optimize()` before it closes the collection, so a new run searches one "
            "segment.\n\n" + md.read_text()
        )
    for md in sorted((results_dir / "lifecycle").glob("*.md")):
        parts.append(
            f"\n## Collection lifecycle ({md.stem})\n\n"
            "`sagitta lifecycle-bench` (Rust, in-process): a default `Collection` loaded by "
            "`upsert` in batches of 1,000 beside a Flat one, the time until the background "
            "optimizer has settled (`optimize()`), open after `close()` (read-write and "
            "read-only, 10k and 100k rows), and single-thread QPS of the settled collection "
            "beside a bare HNSW `Index` with the same parameters, interleaved, in the same "
            "run. Command: `target/release/sagitta lifecycle-bench --reps 5`.\n\n" + md.read_text()
        )
    for md in sorted((results_dir / "server").glob("*.md")):
        parts.append(
            f"\n## Server ({md.stem})\n\n"
            "`sagitta serve` (the release binary) measured on the same machine "
            "(`sagitta_bench/server.py`): ingest of the dataset through Flight DoPut and "
            "HTTP (acknowledged after the WAL fsync) into default HNSW collections and into "
            "Flat ones (protocol and WAL cost without index build); then k=10 searches, one "
            "query per request, at concurrency 1, 4 and 16 over HTTP, over Flight and "
            "in-process (a read-only Collection on the server's own segments), from lean "
            "Rust clients (`sagitta bench-serve`) and from Python clients. The clients share "
            "the machine's cores with the server. "
            "Latencies include the client.\n\n" + md.read_text()
        )
    path.write_text("".join(parts))
