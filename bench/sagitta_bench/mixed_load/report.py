"""Figures of a run (latency per kind, protocol and time bucket), its
Markdown report and its verdict."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import numpy as np

from .clients import Checks, Client
from .model import COLLECTION, KINDS, RECALL_EF

# ------------------------------------------------------------------ report


def _ms(a: np.ndarray, p: float | None) -> float | None:
    """The ``p`` percentile (None: the mean) of ``a`` seconds, in ms."""
    if not len(a):
        return None
    return round(float(np.mean(a) if p is None else np.percentile(a, p)) * 1e3, 3)


def op_stats(clients: list[Client], load_s: float, bucket_s: float) -> tuple[list, list]:
    """Per kind and protocol: counts, rates, latency percentiles; per kind
    and time bucket: latency percentiles."""
    recs = []
    for c in clients:
        if c.records:
            a = np.asarray(c.records, dtype=np.float64)
            proto = np.full(len(a), 0 if c.api.proto == "http" else 1)
            recs.append(np.column_stack([a, proto]))
    if not recs:
        return [], []
    a = np.concatenate(recs)
    t, kind, lat, outcome, proto = a.T
    rows = []
    for ki, kname in enumerate(KINDS):
        for pi, pname in enumerate(("http", "flight")):
            sel = (kind == ki) & (proto == pi)
            if not sel.any():
                continue
            ok = lat[sel & (outcome == 0)]
            rows.append(
                {
                    "kind": kname,
                    "proto": pname,
                    "ok": len(ok),
                    "overload_503": int((sel & (outcome == 1)).sum()),
                    "errors": int((sel & (outcome == 2)).sum()),
                    "ops_per_s": round(len(ok) / load_s, 2),
                    "p50_ms": _ms(ok, 50),
                    "p99_ms": _ms(ok, 99),
                    "max_ms": _ms(ok, 100),
                    "mean_ms": _ms(ok, None),
                }
            )
    timeline = []
    # A last bucket of a few seconds (requests answered after the deadline)
    # joins the one before.
    nb = max(1, int(np.ceil(load_s / bucket_s - 0.1)))
    b = np.minimum((t // bucket_s).astype(int), nb - 1)
    for bi in range(nb):
        for ki, kname in enumerate((*KINDS, "all")):
            sel = (b == bi) & (outcome == 0)
            if kname != "all":
                sel &= kind == ki
            ok = lat[sel]
            if not len(ok):
                continue
            span = load_s - bi * bucket_s if bi == nb - 1 else bucket_s
            timeline.append(
                {
                    "bucket": bi,
                    "t0_s": bi * bucket_s,
                    "kind": kname,
                    "ok": len(ok),
                    "ops_per_s": round(len(ok) / max(span, 1e-9), 2),
                    "p50_ms": _ms(ok, 50),
                    "p99_ms": _ms(ok, 99),
                    "max_ms": _ms(ok, 100),
                }
            )
    return rows, timeline


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def markdown(res: dict) -> str:
    cfg, mach, srv = res["config"], res["machine"], res["server"]
    out = [f"# Sustained mixed load: {res['verdict']['result']}", ""]
    out.append(
        f"{cfg['clients']} clients ({cfg['http_clients']} HTTP, {cfg['flight_clients']} Flight) "
        f"for {res['load_seconds']:.0f} s against `sagitta serve` "
        f"({' '.join(cfg['server_args']) or 'default flags'}); collection `{COLLECTION}`: "
        f"{json.dumps(cfg['collection'])}; {cfg['keys_per_client']} keys per client."
    )
    binfo = cfg["server_binary"]
    out.append("")
    out.append(
        f"Server binary: sha256 {binfo['sha256'][:16]}, built {binfo['mtime']}; repository at "
        f"{binfo.get('repo_head', '?')}"
        + (
            f", uncommitted under crates/: {', '.join(binfo['repo_crates_uncommitted'])}"
            if binfo.get("repo_crates_uncommitted")
            else ""
        )
        + ". Index status polled during the load: "
        + ("yes" if cfg["index_poll_during_load"] else "no")
        + "."
    )
    out.append("")
    out.append(
        f"Machine: {mach['cpu']}, {mach['logical_cpus']} logical CPUs, ISA "
        f"{' '.join(mach['isa']) or '–'}; load average at start {mach['loadavg_start']}, "
        f"at end {mach['loadavg_end']}; kernel {mach['kernel']}, Python {mach['python']}."
    )
    out += ["", "## Operations", ""]
    out.append("| kind | protocol | ok | ops/s | p50 ms | p99 ms | max ms | 503 | errors |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in res["ops"]:
        out.append(
            f"| {r['kind']} | {r['proto']} | {r['ok']} | {r['ops_per_s']:.1f} | "
            f"{_f(r['p50_ms'], 2)} | {_f(r['p99_ms'], 2)} | {_f(r['max_ms'], 1)} | "
            f"{r['overload_503']} | {r['errors']} |"
        )
    tot_ok = sum(r["ok"] for r in res["ops"])
    out.append(
        f"| **all** | | {tot_ok} | {tot_ok / res['load_seconds']:.1f} | | | | "
        f"{sum(r['overload_503'] for r in res['ops'])} | {sum(r['errors'] for r in res['ops'])} |"
    )
    tl = res["timeline"]
    buckets = sorted({x["bucket"] for x in tl})
    if buckets:
        bs = cfg["bucket_s"]
        out += ["", f"## Latency over time (p50 / p99 ms per {bs:g} s bucket, both protocols)", ""]
        out.append(
            "| kind | " + " | ".join(f"{b * bs:g}-{(b + 1) * bs:g} s" for b in buckets) + " |"
        )
        out.append("|---" * (len(buckets) + 1) + "|")
        by = {(x["kind"], x["bucket"]): x for x in tl}
        for kname in (*KINDS, "all"):
            if not any((kname, b) in by for b in buckets):
                continue
            cells = []
            for b in buckets:
                x = by.get((kname, b))
                cells.append("–" if x is None else f"{x['p50_ms']:.2f} / {x['p99_ms']:.1f}")
            out.append(f"| {kname} | " + " | ".join(cells) + " |")
        cells = [_f(by[("all", b)]["ops_per_s"]) if ("all", b) in by else "–" for b in buckets]
        out.append("| ops/s (all) | " + " | ".join(cells) + " |")
        for key, title, scale in (
            ("rss_kib", "RSS MiB (max)", 1 / 1024),
            ("segments", "segments (max)", 1),
            ("unindexed_vectors", "unindexed rows (max)", 1),
        ):
            cells = []
            for b in buckets:
                v = [
                    s[key]
                    for s in srv["samples"]
                    if s.get(key) is not None and b * bs <= s["t"] < (b + 1) * bs
                ]
                cells.append(f"{max(v) * scale:.0f}" if v else "–")
            if any(x != "–" for x in cells):
                out.append(f"| {title} | " + " | ".join(cells) + " |")
    out += ["", "## Errors", ""]
    if res["errors"]:
        out.append("| kind | protocol | status | count |")
        out.append("|---|---|---|---|")
        for e in res["errors"]:
            out.append(f"| {e['kind']} | {e['proto']} | {e['status']} | {e['count']} |")
        out.append("")
        out.append("First message of each:")
        out.append("")
        for e in res["error_samples"]:
            out.append(f"- {e['proto']} {e['kind']}: {e['status']}: `{e['message'][:240]}`")
    else:
        out.append("No request failed other than with 503 / UNAVAILABLE (overload).")
    ov = sum(r["overload_503"] for r in res["ops"])
    rej = {
        k.split("reason=")[-1].strip('"}'): v
        for k, v in srv["metrics_end"].items()
        if k.startswith("sagitta_rejected_requests_total")
    }
    out.append("")
    out.append(
        f"Overload (503 / UNAVAILABLE, deliberate): {ov} requests; the server counted "
        f"rejections {json.dumps(rej) if rej else '{}'}."
    )
    rss = srv["rss_mib"]
    out += ["", "## Server", ""]
    out.append(f"- RSS MiB: start {_f(rss['start'])}, end {_f(rss['end'])}, max {_f(rss['max'])}")
    segs = [s["segments"] for s in srv["samples"] if s.get("segments") is not None]
    me = srv["metrics_end"]
    seg_end = me.get(f'sagitta_collection_segments{{collection="{COLLECTION}"}}')
    tomb_end = me.get(f'sagitta_collection_tombstones{{collection="{COLLECTION}"}}')
    out.append(
        f"- after the load: {_f(seg_end, 0)} segments, {_f(tomb_end, 0)} tombstones; "
        f"optimizer tasks finished {_f(srv['optimizer_tasks'], 0)}, optimizer errors "
        f"{_f(srv['optimizer_errors'], 0)}"
    )
    if segs:
        out.append(f"- segments during the load (index status samples): max {max(segs)}")
    tasks = Counter(s.get("optimizer_task") for s in srv["samples"] if s.get("optimizer_task"))
    if tasks:
        out.append(f"- optimizer seen running (samples): {dict(tasks)}")
    st = srv.get("settle") or {}
    if st:
        out.append(
            f"- settle after load: {'settled' if st.get('settled') else 'NOT settled'} "
            f"in {st.get('seconds')} s ({st.get('segments')} segments)"
        )
    else:
        out.append("- settle after load: skipped")
    out.append(
        f"- exit codes (SIGTERM): {srv['exit_codes']}"
        + (
            f" (the hung server was killed with SIGKILL: {srv['killed_hung_server']})"
            if srv.get("killed_hung_server") is not None
            else ""
        )
        + f"; restart to listening: {_f(srv.get('restart_s'), 2)} s; died during load: "
        f"{srv['died']}"
    )
    out.append(f"- log lines by level: {json.dumps(srv['log']['levels'])}")
    if srv["hang"]:
        out += ["", "## Hang", "", f"The load was stopped: {srv['hang']}.", ""]
        if srv["stacks"]:
            out.append(f"Threads waiting for a lock or in Sagitta code ({srv['stacks_file']}):")
            out.append("")
            out += [f"- `{line}`" for line in srv["stacks"]]
    out += ["", "## Consistency", ""]
    on = res["online_checks"]
    out.append(
        f"- online (during load, own rows): {on['checks']} checks, "
        f"**{on['mismatches']} mismatches** {json.dumps(on['mismatches_by_check'])}; "
        f"recall@10 of approximate owner-filtered searches: {_f(on['recall_at_10'], 3)}"
    )
    out.append("")
    out.append(
        "| final pass | keys checked | live rows | checks | mismatches | recall@10 http "
        f"(ef default / {RECALL_EF}) | recall@10 flight (ef default / {RECALL_EF}) | seconds |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for p in res["final_checks"]:
        rc = p["recall_at_10"]
        cells = [
            f"{_f(rc.get(proto), 3)} / {_f(rc.get(f'{proto}_ef{RECALL_EF}'), 3)}"
            for proto in ("http", "flight")
        ]
        out.append(
            f"| {p['pass']} | {p['keys_checked']} | {p['live_rows']} | {p['checks']} | "
            f"**{p['mismatches']}** | {cells[0]} | {cells[1]} | {p['seconds']} |"
        )
    for p in res["final_checks"]:
        for s in p["mismatch_samples"][:5]:
            out.append(f"- {p['pass']}: {s['check']}: {json.dumps(s['detail'])[:300]}")
    for s in on["mismatch_samples"][:5]:
        out.append(f"- online: {s['check']}: {json.dumps(s['detail'])[:300]}")
    v = res["verdict"]
    out += ["", f"**{v['result']}**" + (": " + "; ".join(v["failures"]) if v["failures"] else "")]
    return "\n".join(out) + "\n"


def summarize(clients: list[Client], load_s: float, bucket_s: float) -> dict:
    """The clients' records, errors and online checks, merged."""
    ops, timeline = op_stats(clients, load_s, bucket_s)
    errors: Counter[tuple[str, str, str]] = Counter()
    online = Checks()
    recall = [0.0, 0]
    samples: dict[tuple[str, str, str], dict] = {}
    for c in clients:
        for (kind, status), n in c.errors.items():
            errors[(kind, c.api.proto, status)] += n
        for (kind, status), msg in c.error_samples.items():
            samples.setdefault(
                (kind, c.api.proto, status),
                {"kind": kind, "proto": c.api.proto, "status": status, "message": msg},
            )
        online.merge(c.checks)
        recall[0] += c.recall[0]
        recall[1] += c.recall[1]
    return {
        "ops": ops,
        "timeline": timeline,
        "errors": [
            {"kind": k, "proto": p, "status": s, "count": n}
            for (k, p, s), n in sorted(errors.items())
        ],
        "error_samples": list(samples.values()),
        "client_crashes": [{"client": c.cid, "traceback": c.crash} for c in clients if c.crash],
        "online_checks": {
            "checks": sum(online.ok.values()) + sum(online.bad.values()),
            "by_check": {k: online.ok[k] + online.bad[k] for k in sorted(online.ok | online.bad)},
            "mismatches": sum(online.bad.values()),
            "mismatches_by_check": dict(online.bad),
            "mismatch_samples": online.samples,
            "recall_at_10": recall[0] / recall[1] if recall[1] else None,
        },
    }


def verdict(res: dict, args: argparse.Namespace) -> dict:
    """PASS, or FAIL with the reasons."""
    failures = []
    finals, srv = res["final_checks"], res["server"]
    n_bad = res["online_checks"]["mismatches"] + sum(p["mismatches"] for p in finals)
    if n_bad:
        failures.append(f"{n_bad} consistency mismatches")
    n_err = sum(e["count"] for e in res["errors"])
    if n_err:
        failures.append(f"{n_err} failed requests (not 503)")
    if res["client_crashes"]:
        failures.append(f"{len(res['client_crashes'])} client threads crashed")
    if srv["died"]:
        failures.append("the server died during the load")
    if srv["hang"]:
        failures.append(f"the server hung: {srv['hang']}")
    want = 3 - int(args.no_restart) - int(bool(srv["hang"]))
    if any(srv["exit_codes"]) or len(finals) < want:
        failures.append(f"server exit codes {srv['exit_codes']}, {len(finals)} final passes")
    if srv["log"]["levels"].get("ERROR") or srv["log"]["levels"].get("PANIC"):
        failures.append(f"server log: {srv['log']['levels']}")
    return {"result": "FAIL" if failures else "PASS", "failures": failures}
