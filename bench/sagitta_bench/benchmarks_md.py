"""BENCHMARKS.md from the harness's results: every run's section, with its
command, machine, versions, plot and tables, spliced into the page between
its markers (or the whole page written when it has none)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import report

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
