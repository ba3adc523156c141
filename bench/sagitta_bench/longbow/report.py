"""The Longbow benchmark's Markdown report."""

from __future__ import annotations

import re

# ------------------------------------------------------------------ report


def _f(x, fmt="{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def cell(op: str, r) -> str:
    if r is None:
        return "–"
    if isinstance(r, str):
        return r.replace("|", "\\|")
    if op == "doput":
        return f"{r['mb_per_s']:.1f} MB/s ({r['seconds']:.2f} s, {r['rows_per_s']:,.0f} rows/s)"
    if op == "indexed":
        if "error" in r:
            return f"error: {r['error']}"
        s = f"{_f(r.get('indexed_s'), '{:.1f}')} s after DoPut"
        if "settled_s" in r:
            segs = r.get("status", {}).get("segments")
            s += f"; settled ({segs} segment(s), no task left) at {r['settled_s']:.1f} s"
        if "wait_s" in r:
            s += f" (longbow.sh wait returned at {r['wait_s']:.0f} s)"
        return s
    if op in ("download", "download_filtered"):
        s = f"{r['mb_per_s']:.0f} MB/s ({r['rows']:,} rows, {r['mb']:.0f} MB, {r['seconds']:.2f} s)"
        if "categories_returned" in r:
            s += f"; categories {r['categories_returned']}, expected {r['expected_rows']:,} rows"
        return s
    if op.startswith("delete"):
        s = f"{r['ops_per_s']:,.0f} ops/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
        if r.get("answered_deleted_total") is not None:
            s += f"; answers report {r['answered_deleted_total']:,} deleted"
        return s + (f"; {r['errors']} errors: {r['first_error']}" if r["errors"] else "")
    if op == "rows_after_delete":
        return (
            f"{r['rows']:,} rows (expected {r['expected']:,}); ids still there: "
            f"{r['still_present_str']} of those deleted by string id, "
            f"{r['still_present_int']} of those deleted by number"
        )
    if op == "prepare":
        return f"create-collection {r['create_collection']}" if r else "–"
    s = f"{r['qps']:,.0f} QPS, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms"
    if r.get("recall_at_10") is not None:
        s += f", recall@10 {r['recall_at_10']:.3f}"
    if r.get("filter_pass_share") is not None:
        s += f", {100 * r['filter_pass_share']:.0f} % of hits pass the filter"
    if r.get("self_included_share"):
        s += f", row itself returned in {100 * r['self_included_share']:.0f} %"
    if r["errors"]:
        s += f"; {r['errors']} errors: {r['first_error']}"
    if r.get("truncated_after_s"):
        s += f"; stopped after {r['truncated_after_s']} s ({r['ok']} answered)"
    return s.replace("|", "\\|")


LABELS = {
    "start": "server start",
    "prepare": "setup",
    "doput": "DoPut (vector+id bytes)",
    "indexed": "indexed (all rows in the HNSW index)",
    "download": "DoGet download, whole dataset (Arrow bytes)",
    "download_filtered": "DoGet download with `filters` (category = amber)",
    "search_by_id_str": 'VectorSearchByID (DoAction), id as a string ("123"), c1',
    "search_by_id_int": "VectorSearchByID (DoAction), id as a JSON number, c1",
    "delete_str": 'delete (DoAction, one id each, as a string "123"), c1',
    "delete_int": "delete (DoAction, one id each, as a JSON number), c1",
    "rows_after_delete": "rows after delete (full download)",
}


def label(op: str) -> str:
    if op in LABELS:
        return LABELS[op]
    kind, conc = op.rsplit("_c", 1)
    what = {
        "search": "search",
        "filtered": "filtered search (category eq X)",
        "hybrid": "hybrid search (text_query, alpha 0.5)",
    }
    return f"{what.get(kind, kind)}, c{conc}"


def markdown(run: dict) -> str:
    env, engines = run["env"], run["engines"]
    lines = [
        f"# Longbow-style Flight benchmark: debian-minilm, {run['rows']:,} rows\n",
        f"Command: `{env['command']}`\n",
        f"Machine: {env['cpu']}, {env['cores']} cores, {env.get('mem_gib')} GiB, "
        f"kernel {env['kernel']}; ISA {env.get('isa')} ({' '.join(env.get('isa_flags', []))}); "
        f"Python {env['python']}, pyarrow {env['pyarrow']}.\n",
        f"Load average (1, 5, 15 min): start {env['loadavg_start']}, after ingest "
        f"{env.get('loadavg_after_ingest')}, end {env['loadavg_end']}. Run wall time "
        f"{run['wall_s']:.0f} s.\n",
    ]
    for eng in engines:
        s = run["servers"].get(eng, {})
        desc = ", ".join(
            f"{k} {v}"
            for k, v in s.items()
            if k
            in ("version", "binary_mtime", "repo_head", "commit", "rss_after_ingest", "rss_end")
        )
        lines.append(f"- {eng}: {desc}")
    lines.append(
        f"\n{run['queries']} queries, k={run['k']}, DoPut batches of {run['batch_rows']:,} rows "
        f"in one stream; ground truth: {run['ground_truth']}. Every engine gets the same "
        "requests from the same pyarrow.flight code; c8 = 8 client threads, each with its own "
        "FlightClient, on the same 2-core machine as the server.\n"
    )
    lines.append("| operation | " + " | ".join(engines) + " |")
    lines.append("|---|" + "---|" * len(engines))
    for op, per in run["results"].items():
        lines.append(f"| {label(op)} | " + " | ".join(cell(op, per.get(e)) for e in engines) + " |")
    notes = []
    for op, per in run["results"].items():
        for e in engines:
            r = per.get(e)
            if isinstance(r, dict) and r.get("result_schema"):
                notes.append(f"- {e} {op}: result schema `{r['result_schema']}`")
            if isinstance(r, dict) and r.get("first_answer") is not None:
                notes.append(f"- {e} {op}: first answer `{r['first_answer']}`")
            if isinstance(r, dict) and op == "download":
                notes.append(f"- {e} download schema `{r['schema']}`")
    for eng in engines:
        s = run["servers"].get(eng, {})
        if s.get("exited_during"):
            lines.append(
                f"\n{eng}'s server process exited during {s['exited_during']}; its log's "
                "panic (or last lines):\n\n```\n" + (s.get("log_tail") or "(empty)") + "\n```"
            )
    if notes:
        lines.append("\nWhat came back (first request of each operation):\n")
        seen = set()
        for n in notes:
            key = re.sub(r"_c\d+", "", n)
            if key not in seen:
                seen.add(key)
                lines.append(n)
    return "\n".join(lines) + "\n"
