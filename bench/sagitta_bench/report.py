"""Pareto frontiers, QPS at recall targets, markdown tables and plots."""

from __future__ import annotations

from pathlib import Path

TARGETS = (0.90, 0.95, 0.99)


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
    IVF-RaBitQ grid), the best of them meets the best peer."""
    out = {}
    ours = [r for r in results if r["engine"].startswith("sagitta")]
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


def markdown(run: dict) -> str:
    res = run["results"]
    env = run["env"]
    lines = [
        f"Dataset **{run['dataset']}** ({res[0]['n']} × {res[0]['dims']}, {run['metric']}), "
        f"k = {run['k']}, {run['queries']} queries (single-thread figures: fastest of "
        f"{run.get('passes', 1)} passes), HNSW M = {run['m']}, "
        f"ef_construction = {run['ef_construction']}; build and all-thread search on "
        f"{run['threads']} threads. CPU: {env['cpu']} ({env['cores']} cores), "
        f"Sagitta ISA {env['isa']}.",
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
    lines += ["", "Sagitta's single-thread QPS against the best peer at each recall target:", ""]
    lines += [
        "| recall ≥ | Sagitta QPS | Sagitta engine | best peer | peer QPS | ratio |",
        "|---:|---:|---|---|---:|---:|",
    ]
    for t, (q, qname, name, pq, ratio) in ratios(res).items():
        lines.append(
            f"| {t:.2f} | {fmt(q)} | {qname} | {name} | {fmt(pq)} | {fmt(ratio, '.2f')}× |"
        )
    lines += ["", "Sweeps (1t = one thread, one query per call; all = one batch call):", ""]
    for r in res:
        lines.append(f"<details><summary>{r['engine']}</summary>\n")
        lines.append(f"| {r['knob']} | recall@k | QPS 1t | QPS all | p50 µs | p95 µs | p99 µs |")
        lines.append("|---:|---:|---:|---:|---:|---:|---:|")
        for p in r["sweep"]:
            lines.append(
                f"| {p['knob']} | {p['recall']:.4f} | {p['qps_1t']:.0f} | {p['qps_all']:.0f} "
                f"| {p['p50_us']:.0f} | {p['p95_us']:.0f} | {p['p99_us']:.0f} |"
            )
        lines.append("\n</details>\n")
    return "\n".join(lines)


def plot(run: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, title in (
        (axes[0], "qps_1t", "one thread"),
        (axes[1], "qps_all", f"{run['threads']} threads (batch)"),
    ):
        for r in run["results"]:
            pts = sorted(r["sweep"], key=lambda p: p["recall"])
            ax.plot(
                [p["recall"] for p in pts],
                [p[key] for p in pts],
                marker="o",
                markersize=3,
                label=r["engine"],
                linewidth=2.2 if r["engine"].startswith("sagitta") else 1.2,
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
