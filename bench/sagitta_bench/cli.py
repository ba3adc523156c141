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

import psutil
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


def pin_cpu(enabled: bool) -> tuple[int | None, dict]:
    """The core every engine's single-thread passes run on (the last one
    this process may use), and what the run records about it."""
    if not enabled:
        return None, {"used": False, "cpu": None, "why": "--no-pin"}
    if not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir():
        return None, {"used": False, "cpu": None, "why": "no sched_setaffinity here"}
    cpu = max(os.sched_getaffinity(0))
    return cpu, {"used": True, "cpu": cpu, "why": "os.sched_setaffinity"}


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


HEADER = (
    "# Benchmarks\n\n"
    "Produced by the harness in `bench/` (see bench/README.md): every engine builds and "
    "searches in processes of its own, on the same data in the same run; QPS 1t is one "
    "query per call on one thread. Each run's text says how it was timed: runs of the "
    "interleaved harness keep every engine's search process open at once and let the "
    "engines take turns pass by pass (one core pinned), and report the median pass with "
    "the min-max spread; older runs searched one engine after another and kept the "
    "fastest pass. The machine is shared and noisy: compare engines within a run, not "
    "across runs.\n"
)

FILTERED_INTRO = (
    "Recall@k against the exact top-k among the rows that pass the filter, and "
    "single-thread QPS, per filter family and selectivity "
    "(`sagitta_bench/filtered.py` describes the payload and the filters). Sagitta is "
    "a Collection at default settings reopened from disk, searched on one thread with "
    "ef 64. Runs made before the background optimizer (the stored one, if it says "
    "two sealed segments) searched two sealed segments plus an active one replayed "
    "from the WAL, each in turn, while each peer searched one graph: that, not the "
    "filters, was most of the gap in unfiltered QPS; the harness now waits for "
    "`optimize()` before it closes the collection, so a new run searches one "
    "segment.\n\n"
)

LIFECYCLE_INTRO = (
    "`sagitta-bench lifecycle-bench` (Rust, in-process): a default `Collection` loaded by "
    "`upsert` in batches of 1,000 beside a Flat one, the time until the background "
    "optimizer has settled (`optimize()`), open after `close()` (read-write and "
    "read-only, 10k and 100k rows), and single-thread QPS of the settled collection "
    "beside a bare HNSW `Index` with the same parameters, interleaved, in the same "
    "run. Command: `target/release/sagitta-bench lifecycle-bench --reps 5`.\n\n"
)

TEXT_INTRO = (
    "`python -m sagitta_bench text` (`sagitta_bench/text.py`): a Debian package's "
    "short description is the query, the corpus rows that are paragraphs of its long "
    "description are relevant (`shared/data/debian-pkg-retrieval/README.md`); BM25, "
    "dense and hybrid search of Sagitta and LanceDB over the same 100k debian-minilm "
    "rows and vectors, in one run.\n\n"
)

SERVER_INTRO = (
    "`sagitta serve` (the release binary) measured on the same machine "
    "(`sagitta_bench/server.py`): ingest of the dataset through Flight DoPut and "
    "HTTP (acknowledged after the WAL fsync) into default HNSW collections and into "
    "Flat ones (protocol and WAL cost without index build); then k=10 searches, one "
    "query per request, at concurrency 1, 4 and 16 over HTTP, over Flight and "
    "in-process (a read-only Collection on the server's own segments), from lean "
    "Rust clients (`sagitta-bench bench-serve`) and from Python clients. The clients share "
    "the machine's cores with the server. "
    "Latencies include the client.\n\n"
)

CLUSTER_INTRO = (
    "`python -m sagitta_bench cluster` (`sagitta_bench/cluster.py`): `sagitta.cluster` "
    "(docs/CLUSTER.md) on a Ray cluster of three nodes on this one machine, beside a "
    "single-node `Collection` in the benchmark's own process, same rows, same default "
    "settings, same run, the two taking turns pass by pass. All three Ray nodes and the "
    "client share the machine's two cores: the figures are the cost of Ray calls, fan-out "
    "and merge, not what more machines buy.\n\n"
)

# A page with these markers gets each harness section spliced between the
# pair that names it; everything outside the pairs is the page's own.
MARK = "<!-- sagitta_bench:"
BEGIN = MARK + "begin {} -->"
END = MARK + "end {} -->"


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def harness_sections(path: Path, results_dir: Path, full: bool) -> list[tuple[str, str]]:
    """Every section the harness renders from ``results_dir``, as (key,
    text), debian-minilm HNSW first. ``full``: each with its heading, intro,
    and (for ``run`` results) every sweep, as a whole BENCHMARKS.md has them;
    else the body alone, run results without their sweeps (the spliced
    summary: the page gives the heading, ``<stem>.md`` the rest)."""
    out = []

    def rel(p: Path) -> str:
        return os.path.relpath(p, path.parent)

    def add(key: str, heading: str, intro: str, body: str, run: Path | None = None) -> None:
        """``run``: the JSON whose ``time`` dates the summary."""
        if full:
            out.append((key, f"\n## {heading}\n\n{intro}{body}"))
            return
        t = json.loads(run.read_text()).get("time") if run and run.exists() else None
        when = f"Run finished {utc(t)}.\n\n" if t else ""
        out.append((key, when + body.strip() + "\n"))

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
    for run in runs:
        env = run["env"]
        stem = run.get("stem") or f"{run['dataset']}-k{run['k']}-{run['mode']}"
        png = results_dir / f"{stem}.png"
        png = png if png.exists() else None
        versions = ", ".join(f"{r['engine']} {r['version']}" for r in run["results"])
        body = (
            f"Command: `{env['command']}`\n\n"
            f"Machine: {env['cpu']}, {env['cores']} cores; Python {env['python']}; "
            f"Sagitta ISA {env['isa']}. Versions: {versions}."
            + ("\n\n" if full else f" Run finished {utc(run['time'])}.\n\n")
            + (f"![recall vs QPS]({rel(png)})\n\n" if png else "")
            + report.markdown(run, full)
            + ("" if full else f"\n\nEvery sweep: {rel(results_dir / f'{stem}.md')}.")
            + "\n"
        )
        engines = ", ".join(r["engine"] for r in run["results"])
        add(f"run:{stem}", f"{run['dataset']}: {engines}", "", body)
    for md in sorted((results_dir / "filtered").glob("*.md")):
        heading = f"Filtered search ({md.stem})"
        body = md.read_text()
        if not full:  # the filters' JSON is in filtered.py and the .md
            body = body.split("\nFilters (JSON form):")[0].rstrip() + f"\n\nFilters: {rel(md)}.\n"
        add(f"filtered:{md.stem}", heading, FILTERED_INTRO, body, md.with_suffix(".json"))
    for md in sorted((results_dir / "lifecycle").glob("*.md")):
        heading = f"Collection lifecycle ({md.stem})"
        body = md.read_text()
        cut = body.find("#### one query per call"), body.find("#### QPS at a recall@10 target")
        if not full and 0 <= cut[0] < cut[1]:  # the per-ef tables stay in the .md
            body = body[: cut[0]] + f"Per ef: {rel(md)}.\n\n" + body[cut[1] :]
        add(f"lifecycle:{md.stem}", heading, LIFECYCLE_INTRO, body)
    texts = sorted((results_dir / "text").glob("text-*.json"))
    if texts:  # the newest run only
        body = (
            report.text_markdown(json.loads(texts[-1].read_text()), full)
            + f"\n\nJSON: {rel(texts[-1])}\n"
        )
        heading = "Full-text and hybrid search (debian-pkg-retrieval, dev split)"
        add("text", heading, TEXT_INTRO, body, texts[-1])
    for md in sorted((results_dir / "server").glob("*.md")):
        heading = f"Server ({md.stem})"
        add(f"server:{md.stem}", heading, SERVER_INTRO, md.read_text(), md.with_suffix(".json"))
    clusters = sorted((results_dir / "cluster").glob("*.md"))
    if clusters:  # the newest run only
        md = clusters[-1]
        body = md.read_text().split("\n", 1)[1].replace("\n## ", "\n### ").strip()
        body += f"\n\nJSON: {rel(md.with_suffix('.json'))}\n"
        add("cluster", f"Scale-out: sagitta.cluster on Ray ({md.stem})", CLUSTER_INTRO, body)
    return out


def write_benchmarks(path: Path, results_dir: Path) -> None:
    """BENCHMARKS.md from every run in ``results_dir``, each with its
    command, machine, versions, plot and tables. A file that has
    ``<!-- sagitta_bench:begin KEY -->`` / ``<!-- sagitta_bench:end KEY -->``
    pairs keeps everything outside them: each section the harness renders
    replaces the text between the pair naming it (its summary; the sweeps
    stay in ``results_dir``), and a section the file has no pair for is
    only named on stderr. Any other file is written whole."""
    page = path.read_text() if path.exists() else ""
    if MARK not in page:
        sections = harness_sections(path, results_dir, True)
        path.write_text(HEADER + "".join(text for _, text in sections))
        return
    for key, text in harness_sections(path, results_dir, False):
        begin, end = BEGIN.format(key), END.format(key)
        i, j = page.find(begin), page.find(end)
        if i < 0 or j < i:
            print(f"{path}: no {begin} ... {end}; section not written", file=sys.stderr)
            continue
        page = page[: i + len(begin)] + "\n" + text + page[j:]
    path.write_text(page)
