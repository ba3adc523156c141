"""The final check after the load: every key of every range read back,
a full scan, the counts, and exact searches against a numpy brute force
over the models."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import numpy as np

from .api import FlightApi, HttpApi, OpError
from .clients import Checks, Client, check_rows
from .model import (
    DIMS,
    GROUPS,
    RECALL_EF,
    TAGS,
    Filter,
    Hits,
    K,
    Row,
    f_grp,
    f_grp_tag,
    f_owner,
    l2,
    vectors_of,
)

# -------------------------------------------------------------- final check


def everything(clients: list[Client]) -> tuple[np.ndarray, np.ndarray, list[Row], np.ndarray]:
    """Every live row of every model: keys, owners, rows, vectors."""
    keys: list[int] = []
    owners: list[int] = []
    rows: list[Row] = []
    for c in clients:
        for k, r in c.model.live.items():
            keys.append(k)
            owners.append(c.cid)
            rows.append(r)
    vecs = vectors_of([r.seed for r in rows]) if rows else np.zeros((0, DIMS), np.float32)
    return np.asarray(keys, dtype=np.int64), np.asarray(owners), rows, vecs


def compare_search(
    checks: Checks,
    name: str,
    hits: Hits,
    truth_keys: np.ndarray,
    truth_d: np.ndarray,
    live: dict[int, float],
) -> None:
    """An exact search's hits against the brute force (distances compared,
    so ties may come in any order), and each hit's score against its row."""
    got_keys = [h[0] for h in hits]
    got_d = np.asarray([h[1] for h in hits], dtype=np.float64)
    n = len(truth_keys)
    good = len(hits) == n and bool(np.allclose(got_d, truth_d, rtol=1e-4, atol=1e-3))
    known = all(k in live for k in got_keys)
    if known and hits:
        own_d = np.asarray([live[k] for k in got_keys])
        good = good and bool(np.allclose(got_d, own_d, rtol=1e-4, atol=1e-3))
    checks.check(
        name,
        good and known,
        {
            "got": got_keys[:K],
            "truth": truth_keys[:K].tolist(),
            "got_d": got_d[:K].tolist(),
            "truth_d": truth_d[:K].tolist(),
        },
    )


def final_check(
    label: str, http: HttpApi, flight: FlightApi, clients: list[Client], queries: int, seed: int
) -> dict:
    """Reads back every key of every client's range and compares with the
    models (see the module docstring)."""
    checks = Checks()
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 99])
    gone: list[str] = []  # set when the server stopped answering

    def req(name: str, fn: Callable[[], Any]) -> Any:
        if gone:
            checks.check(f"{name}_request", False, f"not sent: {gone[0]}")
            return None
        try:
            return fn()
        except OpError as e:
            checks.check(f"{name}_request", False, str(e))
            if e.status.startswith("conn") or "DEADLINE" in e.status:
                gone.append(e.status)
            return None

    # 1. Every key of every range, by HTTP get.
    for c in clients:
        m = c.model
        for s in range(m.lo, m.hi, 1024):
            keys = list(range(s, min(m.hi, s + 1024)))
            got = req("get_all", lambda keys=keys, c=c: http.get(keys, c.cid))
            if got is not None:
                checks.check("get_all_only_asked_keys", set(got) <= set(keys))
                check_rows(checks, m, "get_all_row", keys, got)
    unsettled = sum(len(c.model.uncertain) for c in clients)
    checks.check("no_unsettled_keys", unsettled == 0, unsettled)
    keys_all, owners_all, _rows_all, vecs_all = everything(clients)
    total = len(keys_all)
    # 2. A full Flight scan.
    got = req("scan_all", lambda: flight.scan(None))
    if got is not None:
        nkeys = clients[0].nkeys
        foreign = [k for k in got if not 0 <= k < nkeys * len(clients)]
        checks.check("scan_all_no_foreign_keys", not foreign, foreign[:10])
        for c in clients:
            m = c.model
            ks = [k for k in range(m.lo, m.hi) if k in got or k in m.live]
            check_rows(checks, m, "scan_all_row", ks, got)
    # 3. Counts.
    n = req("count", lambda: http.count(None))
    checks.check("count_total_http", n == total, {"server": n, "model": total})
    n = req("count", lambda: flight.count(None))
    checks.check("count_total_flight", n == total, {"server": n, "model": total})
    for c in clients:
        n = req("count", lambda c=c: http.count(f_owner(c.cid)))
        want = len(c.model.live)
        checks.check("count_per_owner", n == want, {"owner": c.cid, "server": n, "model": want})
    # 4. Exact searches against a brute force; recall of approximate ones.
    live_d: dict[int, float] = {}
    recall: dict[str, list[float]] = {}
    rows_by_key = {}
    for c in clients:
        for k, r in c.model.live.items():
            rows_by_key[k] = (c.cid, r)
    for i in range(queries):
        q = rng.uniform(-1, 1, DIMS).astype(np.float32)
        d = l2(vecs_all, q) if total else np.zeros(0)
        live_d = dict(zip(keys_all.tolist(), d.tolist()))
        g = int(rng.integers(GROUPS))
        fs: list[Filter | None] = [None, f_grp(g), f_grp_tag([g, (g + 3) % GROUPS], TAGS[i % 4])]
        for f in fs:
            if f is None:
                mask = np.ones(total, dtype=bool)
            else:
                mask = np.asarray(
                    [
                        f.pred(o, rows_by_key[k][1])
                        for k, o in zip(keys_all.tolist(), owners_all.tolist())
                    ],
                    dtype=bool,
                )
            idx = np.flatnonzero(mask)
            order = idx[np.argsort(d[idx], kind="stable")[:K]]
            name = "none" if f is None else f.name
            for api in (http, flight):
                hits = req("search", lambda api=api, f=f, q=q: api.search(q, K, f, True))
                if hits is not None:
                    compare_search(
                        checks,
                        f"exact_search_{api.proto}_{name}",
                        hits,
                        keys_all[order],
                        d[order],
                        live_d,
                    )
                if f is None:
                    for ef in (None, RECALL_EF):
                        hits = req(
                            "search", lambda api=api, q=q, ef=ef: api.search(q, K, None, False, ef)
                        )
                        if hits is not None and len(order):
                            found = {h[0] for h in hits}
                            at = api.proto if ef is None else f"{api.proto}_ef{ef}"
                            recall.setdefault(at, []).append(
                                len(found & set(keys_all[order].tolist())) / len(order)
                            )
    return {
        "pass": label,
        "seconds": round(time.perf_counter() - t0, 2),
        "keys_checked": sum(c.nkeys for c in clients),
        "live_rows": total,
        "checks": sum(checks.ok.values()) + sum(checks.bad.values()),
        "mismatches": sum(checks.bad.values()),
        "mismatches_by_check": dict(checks.bad),
        "mismatch_samples": checks.samples,
        "recall_at_10": {p: (float(np.mean(v)) if v else None) for p, v in recall.items()},
    }


def settle(http: HttpApi, timeout: float) -> dict:
    """Waits until the optimizer is idle with every row indexed."""
    t0 = time.perf_counter()
    quiet = 0
    st: dict = {}
    while time.perf_counter() - t0 < timeout:
        with contextlib.suppress(OpError):
            st = http.index_status()
            idle = st.get("optimizer_task") is None and st.get("unindexed_vectors") == 0
            quiet = quiet + 1 if idle else 0
            if quiet >= 3:
                return {"settled": True, "seconds": round(time.perf_counter() - t0, 1), **st}
        time.sleep(0.5)
    return {"settled": False, "seconds": round(time.perf_counter() - t0, 1), **st}
