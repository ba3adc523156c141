"""`sagitta-bench run ...`: every engine on the same data in one run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tqdm import tqdm

from . import datasets, report
from .benchmarks_md import write_benchmarks
from .engines import ENGINES, select
from .env import pin_cpu, run_env

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


BENCH = Path(__file__).resolve().parents[1]
BATCH_REPS = 3  # all-thread batch calls per point, interleaved like the passes


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def build_engine(name: str, cfg: dict, tmp: Path) -> dict:
    """Builds and saves ``name``'s index in a worker process of its own
    (``tmp/name/work``); returns what the build measured."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    cfg_path, out_path, log = d / "build.json", d / "build-out.json", d / "build.log"
    cfg_path.write_text(json.dumps({**cfg, "engine": name, "workdir": str(d / "work")}))
    with log.open("w") as err:
        rc = subprocess.run(
            [sys.executable, "-m", "sagitta_bench.worker", str(cfg_path), str(out_path)],
            stderr=err,
            cwd=BENCH,
        ).returncode
    if rc != 0:
        raise SystemExit(f"{name} (build) failed:\n{log_tail(log)}")
    return json.loads(out_path.read_text())


class SearchWorker:
    """One engine's search process (``worker --serve``): it reopens what
    the build saved and answers the line protocol of ``worker``."""

    def __init__(self, name: str, cfg: dict, tmp: Path) -> None:
        self.name = name
        d = tmp / name
        cfg_path, self.log = d / "search.json", d / "search.log"
        cfg_path.write_text(json.dumps({**cfg, "engine": name, "workdir": str(d / "work")}))
        self.err = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sagitta_bench.worker", "--serve", str(cfg_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            cwd=BENCH,
        )
        self.info: dict = {}

    def recv(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            raise SystemExit(f"{self.name}: search process exited ({rc}):\n{log_tail(self.log)}")
        msg = json.loads(line)
        if not msg.pop("ok"):
            raise SystemExit(f"{self.name}: {msg['error']}\n{log_tail(self.log)}")
        return msg

    def ask(self, cmd: str, **args) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        return self.recv()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def rotate(seq: list, r: int) -> list:
    r %= len(seq)
    return seq[r:] + seq[:r]


def search_group(
    names: list[str], cfg: dict, tmp: Path, pin: int | None, warmup: int, bar: tqdm
) -> dict[str, dict]:
    """Every engine of ``names`` open at once, each in its own search
    process, taking turns: for each knob step, all set the knob and warm
    up, then pass by pass each times one pass over the queries in turn
    (the first engine rotating), then the batch calls likewise. Only one
    process searches at any time; the others wait on their stdin."""
    workers = [SearchWorker(n, cfg, tmp) for n in names]
    try:
        for w in workers:
            w.recv()  # ready: queries loaded, engine module imported
        for w in workers:  # one at a time: open times are undisturbed
            w.info = w.ask("open")
        knobs = {w.name: cfg["knobs"][w.info["knob"]] for w in workers}
        sweeps: dict[str, list] = {w.name: [] for w in workers}
        for step in range(max(len(v) for v in knobs.values())):
            active = [w for w in workers if step < len(knobs[w.name])]
            if pin is not None:
                for w in active:
                    if w.ask("pin", cpus=[pin])["cpus"] != [pin]:
                        raise SystemExit(f"{w.name}: could not pin to cpu {pin}")
            for w in active:
                bar.set_postfix_str(f"{w.name} {w.info['knob']}={knobs[w.name][step]} warm-up")
                w.ask("knob", value=knobs[w.name][step], warmup=warmup)
            passes = max(w.info["passes"] for w in active)
            for p in range(passes):
                for w in rotate(active, step + p):
                    if p < w.info["passes"]:
                        bar.set_postfix_str(
                            f"{w.name} {w.info['knob']}={knobs[w.name][step]} pass {p + 1}"
                        )
                        w.ask("pass")
            if pin is not None:
                for w in active:
                    w.ask("unpin")
            for rep in range(BATCH_REPS):
                for w in rotate(active, step + rep):
                    bar.set_postfix_str(f"{w.name} batch {rep + 1}")
                    w.ask("batch")
            for w in active:
                sweeps[w.name].append(w.ask("point")["point"])
                bar.update(1)
        out = {}
        for w in workers:
            out[w.name] = {**w.info, **w.ask("finish"), "sweep": sweeps[w.name]}
            w.proc.wait(timeout=60)
        return out
    finally:
        for w in workers:
            w.close()


def estimate_search_mb(build: dict) -> float:
    """A search process's RSS guessed from the build: the process's
    baseline plus the index, taken as the larger of its size on disk and
    what building it held beyond the baseline and the data."""
    held = build["rss_after_build_mb"] - build["rss_base_mb"] - build.get("data_bytes", 0) / 2**20
    return build["rss_base_mb"] + max(build["size_bytes"] / 2**20, held)


def plan_groups(
    names: list[str], builds: dict[str, dict], fraction: float
) -> tuple[list[list[str]], dict]:
    """Engines whose search processes fit in ``fraction`` of the memory
    available now share a group (in order); a group is searched
    interleaved, groups one after another."""
    avail = psutil.virtual_memory().available / 2**20
    budget = fraction * avail
    est = {n: estimate_search_mb(builds[n]) for n in names}
    groups: list[list[str]] = [[]]
    used = 0.0
    for n in names:
        if groups[-1] and used + est[n] > budget:
            groups.append([])
            used = 0.0
        groups[-1].append(n)
        used += est[n]
    memory = {
        "available_mb": avail,
        "fraction": fraction,
        "budget_mb": budget,
        "estimate_mb": est,
    }
    return groups, memory


def main(argv: list[str] | None = None) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["filtered"]:
        from . import filtered

        filtered.main(args_in[1:])
        return
    if args_in[:1] == ["text"]:
        from . import text

        text.main(args_in[1:])
        return
    if args_in[:1] == ["server"]:
        from . import server

        server.main(args_in[1:])
        return
    if args_in[:1] == ["busy"]:
        from . import busy

        busy.main(args_in[1:])
        return
    if args_in[:1] == ["memory"]:
        from . import memory

        memory.main(args_in[1:])
        return
    if args_in[:1] == ["cluster"]:
        from . import cluster

        cluster.main(args_in[1:])
        return
    if args_in[:1] == ["longbow"]:
        from . import longbow

        longbow.main(args_in[1:])
        return
    ap = argparse.ArgumentParser(prog="sagitta-bench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="benchmark engines on one dataset")
    r.add_argument(
        "--dataset",
        default="debian-minilm",
        help="debian-minilm | minilm-gmm-1m | minilm-gmm:N[:SEED] | synthetic:N:D[:SEED] | ...",
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
        "--ef",
        help="comma list of beam widths, overriding the mode's (larger sets need wider beams "
        "for the same recall)",
    )
    r.add_argument(
        "--passes",
        type=int,
        default=5,
        help="single-thread passes per point, engines taking turns; the median is the headline",
    )
    r.add_argument("--warmup", type=int, default=50, help="untimed queries after each knob change")
    r.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin the single-thread passes to one core (os.sched_setaffinity)",
    )
    r.add_argument(
        "--memory-fraction",
        type=float,
        default=0.7,
        help="search engines at once while their estimated RSS fits in this share of "
        "MemAvailable; else in groups, one after another",
    )
    r.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    r.add_argument("--write-benchmarks", type=Path, help="also write this BENCHMARKS.md")
    sub.add_parser(
        "filtered",
        help="filtered search at 0.1-100%% selectivity (see sagitta_bench.filtered)",
        add_help=False,
    )
    sub.add_parser(
        "text",
        help="full-text and hybrid retrieval on debian-pkg-retrieval (see sagitta_bench.text)",
        add_help=False,
    )
    sub.add_parser(
        "server",
        help="the server over HTTP and Flight: ingest, latency at concurrency 1/4/16, kill -9",
        add_help=False,
    )
    sub.add_parser(
        "longbow",
        help="Arrow Flight: sagitta serve beside the peer Longbow (see sagitta_bench.longbow)",
        add_help=False,
    )
    sub.add_parser(
        "busy",
        help="optimize() alone and beside CPU-bound processes (see sagitta_bench.busy)",
        add_help=False,
    )
    sub.add_parser(
        "memory",
        help="resident memory while an index is built, beside peers (see sagitta_bench.memory)",
        add_help=False,
    )
    sub.add_parser(
        "cluster",
        help="sagitta.cluster on 3 Ray nodes vs one node: search, failover, cold open",
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
    if args.ef:
        ef = [int(x) for x in args.ef.split(",")]
        mode = {**mode, "knobs": {**mode["knobs"], "ef": ef}}
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
    pin, env["pinning"] = pin_cpu(not args.no_pin)
    warmup = min(args.warmup, n_queries)
    points = sum(len(mode["knobs"][ENGINES[n].knob]) for n in names)
    with (
        tempfile.TemporaryDirectory(prefix="sgb-") as tmp,
        tqdm(total=points, desc="engines × knob", unit="pt") as bar,
    ):
        builds = {}
        for name in names:  # one after another, all cores each
            bar.set_postfix_str(f"building {name}")
            builds[name] = build_engine(name, cfg, Path(tmp))
        groups, memory = plan_groups(names, builds, args.memory_fraction)
        searched: dict[str, dict] = {}
        for group in groups:
            searched.update(search_group(group, cfg, Path(tmp), pin, warmup, bar))
    results = []
    for name in names:
        r = {**builds[name], **searched[name]}
        r["rss_peak_mb"] = max(r["rss_build_peak_mb"], r["rss_search_peak_mb"])
        r["search_group"] = next(i for i, g in enumerate(groups) if name in g)
        results.append(r)
    run = {
        **cfg,
        "mode": args.mode,
        "env": env,
        "method": "interleaved",
        "warmup": warmup,
        "batch_reps": BATCH_REPS,
        "search_groups": groups,
        "memory": memory,
        "results": results,
        "time": time.time(),
    }
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
