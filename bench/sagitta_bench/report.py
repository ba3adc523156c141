"""Pareto frontiers, QPS at recall targets, markdown tables and plots."""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = (0.90, 0.95, 0.99)


def save(out: Path, stamp: str, res: dict, md: str) -> None:
    """A run's results as ``out/<stamp>.json`` and its table as
    ``out/<stamp>.md``, the table printed too."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stamp}.json").write_text(json.dumps(res, indent=1))
    (out / f"{stamp}.md").write_text(md)
    print(md)


def qps_at(sweep: list[dict], target: float, key: str = "qps_1t") -> float | None:
    """Best QPS among the sweep points reaching ``target`` recall (the
    Pareto frontier read at that recall), or None if never reached."""
    ok = [p[key] for p in sweep if p["recall"] >= target]
    return max(ok) if ok else None


def point_at(sweep: list[dict], target: float) -> dict | None:
    ok = [p for p in sweep if p["recall"] >= target]
    return max(ok, key=lambda p: p["qps_1t"]) if ok else None


def fmt(x: float | None, spec: str = ".0f") -> str:
    return "–" if x is None else format(x, spec)


def ratios(results: list[dict]) -> dict[float, tuple]:
    """Per target: (our best QPS, our engine, best peer name, best peer
    QPS, ratio). With several Sagitta configurations in a run (the
    IVF-RaBitQ grid), the best of them meets the best peer; the reference
    rows with an explicit dtype (``-f32``, ``-f16``) are not defaults and
    take no part."""
    out = {}
    explicit = ("-f32", "-f16")
    ours = [
        r
        for r in results
        if r["engine"].startswith("sagitta") and not r["engine"].endswith(explicit)
    ]
    peers_all = [r for r in results if not r["engine"].startswith("sagitta")]
    for t in TARGETS:
        mine = [(qps_at(r["sweep"], t), r["engine"]) for r in ours]
        mine = [m for m in mine if m[0] is not None]
        q, qname = max(mine) if mine else (None, "–")
        peers = [(qps_at(r["sweep"], t), r["engine"]) for r in peers_all]
        peers = [p for p in peers if p[0] is not None]
        best = max(peers) if peers else (None, "–")
        ratio = q / best[0] if q and best[0] else None
        out[t] = (q, qname, best[1], best[0], ratio)
    return out


def spread(p: dict | None, key: str = "qps_1t") -> str:
    """The min-max of a point's single-thread passes; a dash for runs that
    kept only one figure."""
    if p is None or f"{key}_min" not in p:
        return "–"
    return f"{p[f'{key}_min']:.0f}–{p[f'{key}_max']:.0f}"


def method(run: dict) -> str:
    """How the run's search figures were taken, in words."""
    passes = run.get("passes", 1)
    if run.get("method") != "interleaved":
        return (
            f"Single-thread figures: the fastest of {passes} passes; each engine's whole sweep "
            "ran in its own process, engines one after another (the harness before "
            "interleaving; no spread was kept). All-thread figures: the fastest of three batch "
            "calls."
        )
    pin = run["env"].get("pinning") or {}
    pinned = (
        f"pinned to cpu {pin['cpu']} (the same core for every engine; unpinned for batch "
        "calls and builds)"
        if pin.get("used")
        else f"not pinned ({pin.get('why', 'unknown')})"
    )
    groups = run.get("search_groups") or [[r["engine"] for r in run["results"]]]
    text = (
        "Search method: every engine's search process (a fresh process that reopens the saved "
        "index and never built it) was open at once; for each knob value each engine set the "
        f"knob and ran {run.get('warmup', 50)} warm-up queries, then the engines took turns "
        f"pass by pass, {passes} passes, the starting engine rotating, each pass one query per "
        "call on the calling thread over all queries, one engine timing at a time. "
        f"Single-thread passes {pinned}. **QPS 1t is the median pass** (tables, ratios and "
        "plot); the sweeps give min and max, and p50 / p95 / p99 come from the median pass. "
        f"QPS all: the median of {run.get('batch_reps', 3)} batch calls, taken in turn the "
        "same way."
    )
    if len(groups) > 1:
        mem = run.get("memory") or {}
        text += (
            f" With all engines resident the estimated RSS exceeded "
            f"{mem.get('fraction', 0.7):.0%} of MemAvailable "
            f"({mem.get('budget_mb', 0):.0f} MB), so the search phase ran in "
            f"{len(groups)} groups, one after another, each interleaved: "
            + "; ".join(", ".join(g) for g in groups)
            + ". Engines in different groups were not timed side by side."
        )
    return text


def opened(r: dict) -> str:
    """How the engine opened the index it searched (old runs: the
    adapter's ``opened``; its ``open`` has not changed)."""
    how = r.get("opened")
    if how is None:
        from .engines import ENGINES

        e = ENGINES.get(r["engine"])
        how = e.opened if e is not None else "?"
    if "rss_search_peak_mb" not in r:
        how += "; reopened in the process that had built it (a run before the build/search split)"
    return how


def markdown(run: dict, full: bool = True) -> str:
    """The run's tables. ``full=False`` (the summary BENCHMARKS.md keeps):
    no list of how each engine opened its index and no per-knob sweeps;
    the results directory's ``<stem>.md`` has them."""
    res = run["results"]
    env = run["env"]
    lines = [
        f"Dataset **{run['dataset']}** ({res[0]['n']} × {res[0]['dims']}, {run['metric']}), "
        f"k = {run['k']}, {run['queries']} queries, HNSW M = {run['m']}, "
        f"ef_construction = {run['ef_construction']}; build and all-thread search on "
        f"{run['threads']} threads. CPU: {env['cpu']} ({env['cores']} cores), "
        f"Sagitta ISA {env['isa']}.",
        "",
        method(run),
        "",
        "| engine | version | build s | build vec/s | size MB | peak RSS MB (Δ) "
        "| resident B/vec | open ms | max recall "
        "| QPS@0.90 1t | QPS@0.95 1t | QPS@0.99 1t | QPS@0.95 all | p50 / p99 µs @0.95 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res:
        p95 = point_at(r["sweep"], 0.95)
        lat = f"{p95['p50_us']:.0f} / {p95['p99_us']:.0f}" if p95 else "–"
        capped = (
            f" ({r['queries']} queries, {r['passes']} pass)"
            if r.get("queries", run["queries"]) < run["queries"]
            else ""
        )
        lines.append(
            f"| {r['engine']}{capped} | {r['version']} | {r['build_s']:.1f} | {r['build_vps']:.0f} "
            f"| {r['size_bytes'] / 1e6:.1f} | {r['rss_peak_mb']:.0f} "
            f"({r['rss_peak_mb'] - r['rss_base_mb']:+.0f}) "
            f"| {fmt(r.get('resident_bytes_per_vector'))} | {r['open_s'] * 1e3:.1f} "
            f"| {max(p['recall'] for p in r['sweep']):.3f} "
            f"| {fmt(qps_at(r['sweep'], 0.90))} | {fmt(qps_at(r['sweep'], 0.95))} "
            f"| {fmt(qps_at(r['sweep'], 0.99))} | {fmt(qps_at(r['sweep'], 0.95, 'qps_all'))} "
            f"| {lat} |"
        )
    if full:
        lines += ["", "How each engine opened the saved index that it searched:", ""]
        lines += [f"- {r['engine']}: {opened(r)}" for r in res]
    lines += [
        "",
        "Resident B/vec: RSS growth of the search process from before the open to after the "
        "sweep, per base vector (for a memory-mapped index, the pages the searches touched)"
        + (
            "; – where the run predates that measurement."
            if any("resident_bytes_per_vector" not in r for r in res)
            else "."
        ),
    ]
    lines += ["", "Sagitta's single-thread QPS against the best peer at each recall target:", ""]
    lines += [
        "| recall ≥ | Sagitta QPS | min–max | Sagitta engine | best peer | peer QPS "
        "| min–max | ratio |",
        "|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    by_name = {r["engine"]: r for r in res}
    for t, (q, qname, name, pq, ratio) in ratios(res).items():
        ours = point_at(by_name[qname]["sweep"], t) if qname in by_name else None
        peer = point_at(by_name[name]["sweep"], t) if name in by_name else None
        lines.append(
            f"| {t:.2f} | {fmt(q)} | {spread(ours)} | {qname} | {name} | {fmt(pq)} "
            f"| {spread(peer)} | {fmt(ratio, '.2f')}× |"
        )
    if not full:
        return "\n".join(lines)
    interleaved = run.get("method") == "interleaved"
    lines += [
        "",
        "Sweeps (1t = one thread, one query per call: "
        + (
            "median, min and max of the passes; all = the median batch call):"
            if interleaved
            else "the fastest pass; all = the fastest batch call):"
        ),
        "",
    ]
    for r in res:
        lines.append(f"<details><summary>{r['engine']}</summary>\n")
        lines.append(
            f"| {r['knob']} | recall@k | QPS 1t | 1t min | 1t max | QPS all "
            "| p50 µs | p95 µs | p99 µs |"
        )
        lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in r["sweep"]:
            lines.append(
                f"| {p['knob']} | {p['recall']:.4f} | {p['qps_1t']:.0f} "
                f"| {fmt(p.get('qps_1t_min'))} | {fmt(p.get('qps_1t_max'))} "
                f"| {p['qps_all']:.0f} | {p['p50_us']:.0f} | {p['p95_us']:.0f} "
                f"| {p['p99_us']:.0f} |"
            )
        lines.append("\n</details>\n")
    return "\n".join(lines)


def plot(run: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, title in (
        (axes[0], "qps_1t", "one thread (median pass; bars: min-max)"),
        (axes[1], "qps_all", f"{run['threads']} threads (batch)"),
    ):
        for r in run["results"]:
            pts = sorted(r["sweep"], key=lambda p: p["recall"])
            x, y = [p["recall"] for p in pts], [p[key] for p in pts]
            (line,) = ax.plot(
                x,
                y,
                marker="o",
                markersize=3,
                label=r["engine"],
                linewidth=2.2 if r["engine"].startswith("sagitta") else 1.2,
            )
            if all(f"{key}_min" in p for p in pts):  # the passes' min-max
                ax.vlines(
                    x,
                    [p[f"{key}_min"] for p in pts],
                    [p[f"{key}_max"] for p in pts],
                    color=line.get_color(),
                    linewidth=1,
                    alpha=0.6,
                )
        ax.set_yscale("log")
        ax.set_xlabel(f"recall@{run['k']}")
        ax.set_ylabel("queries / s")
        ax.set_title(f"{run['dataset']}: {title}")
        ax.grid(True, which="both", alpha=0.3)
        ax.axvline(0.95, color="grey", linestyle=":", linewidth=1)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TEXT_HEAD = (
    "| engine | method | queries | recall@10 | nDCG@10 | MRR@10 | nDCG@10 common "
    "| mean ms | p50 ms | p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def text_row(engine: str, m: dict) -> str:
    return (
        f"| {engine} | {m['method']} | {m['queries']:,} | {m['recall']:.4f} "
        f"| {m['ndcg']:.4f} | {m['mrr']:.4f} | {m['common']['ndcg']:.4f} "
        f"| {m['mean_ms']:.2f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} |"
    )


def text_markdown(run: dict, full: bool = True) -> str:
    """The text mode's section (``text.py``): accuracy and latency per
    method, Sagitta's fusion sweep (``full=False``: its best setting alone),
    the ingest steps, how it was run."""
    env = run["env"]
    pin = env.get("pinning") or {}
    pinned = (
        f"every thread of the engine's process pinned to cpu {pin['cpu']} (`os.sched_setaffinity`)"
        if pin.get("used")
        else f"not pinned ({pin.get('why', 'unknown')})"
    )
    la, lb = (" ".join(f"{x:.2f}" for x in run[k]) for k in ("loadavg_start", "loadavg_end"))
    corpus = f"{run['corpus_rows']:,} rows" + (
        " (reduced with `--rows`: not the task's scores)" if run.get("rows") else ""
    )
    lines = [
        f"Command: `{env['command']}`",
        "",
        f"Machine: {env['cpu']}, {env['cores']} cores; Python {env['python']}; Sagitta ISA "
        f"{env['isa']}. Load average at start {la}, at end {lb}. Versions: "
        + ", ".join(f"{r['engine']} {r['version']}" for r in run["results"])
        + ".",
        "",
        f"Corpus {corpus}; {run['queries']:,} dev queries (a seeded permutation; smaller "
        "query sets are its prefixes). Each method asks for the top 11 through the engine's "
        "public Python API, one query per call, and drops the query's own row before scoring "
        "the top 10 (recall@10 capped at min(10, relevant), nDCG@10 with binary gains, "
        "MRR@10). Engines one after another, each in a process of its own; ingest and index "
        f"builds on all cores; query loops {pinned}, after {run['warmup']} untimed queries, "
        f"one timed pass. *common*: nDCG@10 over the first {run['common']:,} queries, which "
        "every method ran.",
        "",
        TEXT_HEAD,
    ]
    for r in run["results"]:
        lines += [text_row(r["engine"], m) for m in r["methods"] if m["group"] == "main"]
    sweep = [
        (r["engine"], m) for r in run["results"] for m in r["methods"] if m["group"] == "sweep"
    ]
    if sweep:
        best = max(sweep, key=lambda em: em[1]["ndcg"])
        lines += [
            "",
            f"Fusion sweep ({best[0]}; best nDCG@10: {best[1]['method']}, {best[1]['ndcg']:.4f})"
            + (":" if full else f", {len(sweep)} settings."),
        ]
        if full:
            lines += ["", TEXT_HEAD, *(text_row(e, m) for e, m in sweep)]
    lines += ["", "| engine | ingest step | s | rows/s | size MB |", "|---|---|---:|---:|---:|"]
    for r in run["results"]:
        for s in r["ingest"]:
            rps = f"{s['rows_per_s']:,.0f}" if "rows_per_s" in s else "–"
            mb = fmt(s.get("size_mb"), ".1f")
            lines.append(f"| {r['engine']} | {s['step']} | {s['seconds']:.2f} | {rps} | {mb} |")
    notes = [f"- {r['engine']}: {n}" for r in run["results"] for n in r.get("notes", [])]
    notes += [
        f"- {r['engine']}, {m['method']}: {round(m['short'] * m['queries'])} of "
        f"{m['queries']:,} queries got fewer than 10 rows besides their own"
        for r in run["results"]
        for m in r["methods"]
        if m.get("short")
    ]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)
