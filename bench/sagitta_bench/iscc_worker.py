"""One engine's side of the iscc-usearch comparison (run by ``iscc.py`` in
the engine's own environment; needs only numpy and the engine).

    python iscc_worker.py ENGINE SPEC.json  ->  JSON results on stdout

ENGINE is ``iscc`` (``iscc_usearch``) or ``sagitta`` (``sagitta.compat.iscc``):
the same ShardedIndex calls drive both. SPEC names the data files (codes,
lengths for NPHD, queries, ground truth), the directory, the number of
segments to lay the rows out in, and the repeats."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def classes(engine: str, wide: bool):
    if engine == "iscc":
        from loguru import logger

        logger.remove()
        import iscc_usearch as m
    else:
        import sagitta.compat.iscc as m
    if wide:
        return m.ShardedIndex128, m.ShardedNphdIndex128
    return m.ShardedIndex, m.ShardedNphdIndex


# The high half of the 128-bit keys (the low half is the 64-bit key).
HIGH = np.uint64(0xA5C3_0000_0000_0000)


def key_codec(wide: bool):
    """(encode, one, low): uint64 keys -> the engine's keys; one key ->
    the engine's single key; the engine's keys -> their uint64 low halves."""
    if not wide:
        return (lambda u: u), int, (lambda k: np.asarray(k, dtype=np.uint64))

    def encode(u):
        u = np.asarray(u, dtype=np.uint64)
        halves = np.stack([u ^ HIGH, u], axis=1).astype(">u8")
        return np.ascontiguousarray(halves).view("V16").ravel()

    def low(k):
        b = np.ascontiguousarray(k).tobytes()
        return np.frombuffer(b, ">u8").reshape(-1, 2)[:, 1].astype(np.uint64)

    return encode, bytes, low


def timed(fn, repeats: int) -> dict:
    """Median, min and max seconds of ``repeats`` calls of ``fn``."""
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return {"median": statistics.median(t), "min": min(t), "max": max(t)}


# A 100-key call takes tens of microseconds: one call per repeat is mostly
# timer and scheduler noise, so each repeat times this many calls on
# different keys and reports the time per call.
CALLS_OF_100 = 50


def hundreds(keys):
    """``CALLS_OF_100`` disjoint 100-key slices of ``keys``."""
    return [keys[i * 100 : (i + 1) * 100] for i in range(CALLS_OF_100)]


def per_call(t: dict) -> dict:
    return {k: v / CALLS_OF_100 for k, v in t.items()}


def main() -> None:
    engine, spec_path = sys.argv[1], sys.argv[2]
    spec = json.loads(Path(spec_path).read_text())
    wide = spec.get("key_bits", 64) == 128
    sharded, nphd_cls = classes(engine, wide)
    encode, one_key, low = key_codec(wide)
    nphd = spec["metric"] == "nphd"
    base = np.load(spec["base"], mmap_mode="r")
    queries = np.load(spec["queries"])
    n = len(base)
    if nphd:
        blens = np.load(spec["base_len"])
        qlens = np.load(spec["queries_len"])
        rows = [bytes(base[i, : blens[i]]) for i in range(n)]
        qs = [np.frombuffer(bytes(queries[i, : qlens[i]]), np.uint8) for i in range(len(queries))]
    else:
        rows = np.ascontiguousarray(base)
        qs = queries
    keys = np.arange(n, dtype=np.uint64) * np.uint64(spec.get("key_stride", 1))
    path = Path(spec["dir"]) / engine
    shutil.rmtree(path, ignore_errors=True)
    segs = spec["segments"]
    per = -(-n // segs)
    bpv = spec["bytes_per_row"]

    def make(read_only=False, first=False):
        kw = {"path": path, "read_only": read_only}
        if first:
            if engine == "iscc":
                kw["shard_size"] = 1  # rotate after every add call: one shard per batch
            else:
                kw["shard_size"] = int(per * bpv * 1.5)  # no two batches merge
            kw.update(connectivity=16, expansion_add=128, expansion_search=64)
            if nphd:
                return nphd_cls(max_dim=spec["max_dim"], **kw)
            return sharded(ndim=spec["ndim"], metric="hamming", dtype="b1", **kw)
        return (nphd_cls if nphd else sharded)(**kw)

    out: dict = {"engine": engine, "rows": n, "segments_asked": segs}
    # add: every row written and searchable at its final speed, then closed
    # (iscc-usearch builds a graph per shard; Sagitta's optimizer is waited
    # for, and builds graphs only for segments past its index threshold:
    # smaller ones are searched by exact scan, which costs less there).
    t0 = time.perf_counter()
    idx = make(first=True)
    for s in range(segs):
        lo, hi = s * per, min(n, (s + 1) * per)
        idx.add(encode(keys[lo:hi]), rows[lo:hi])
        if engine == "sagitta":
            idx._c.seal()  # one segment per batch, as iscc's shard per add
    if engine == "sagitta":
        idx._c.optimize()
    idx.close()
    out["add_s"] = time.perf_counter() - t0
    reps = spec["repeats"]

    def reopen():
        r = make(read_only=True)
        assert r.contains(one_key(encode(keys[:1])[0]))
        r.close()

    out["open_sealed_s"] = timed(reopen, reps)
    ro = make(read_only=True)
    out["segments"] = ro.shard_count
    assert len(ro) == n, (len(ro), n)
    rng = np.random.default_rng(1)
    present = encode(keys[rng.integers(0, n, 100_000)])
    absent = encode(
        (np.arange(100_000, dtype=np.uint64) * np.uint64(7919)) + keys[-1] + np.uint64(1)
    )
    for name, ks in (("present", present), ("absent", absent)):
        one = [one_key(k) for k in ks[:1000]]
        out[f"contains_{name}_1_s"] = timed(lambda one=one: [ro.contains(k) for k in one], reps)
        out[f"contains_{name}_1_s"] = {
            k: v / len(one) for k, v in out[f"contains_{name}_1_s"].items()
        }
        out[f"contains_{name}_100_s"] = per_call(
            timed(lambda ks=ks: [ro.contains(b) for b in hundreds(ks)], reps)
        )
        out[f"contains_{name}_100k_s"] = timed(lambda ks=ks: ro.contains(ks), reps)
        got = ro.contains(ks)
        assert bool(np.all(got)) == (name == "present") and bool(np.any(got)) == (name == "present")
    out["get_100_s"] = per_call(timed(lambda: [ro.get(b) for b in hundreds(present)], reps))
    one = [one_key(k) for k in present[:1000]]
    g = timed(lambda: [ro.get(k) for k in one], reps)
    out["get_1_s"] = {k: v / len(one) for k, v in g.items()}

    # search: one at a time, and a batch of every query, with recall@10
    # against the exact oracle, tie-aware (a hit at the 10th distance counts).
    k = 10
    gt_dist = np.load(spec["gt_dist"])[:, k - 1]
    single = qs[: spec["single_queries"]]
    s1 = timed(lambda: [ro.search(q, k) for q in single], reps)
    out["search_1_s"] = {kk: v / len(single) for kk, v in s1.items()}
    batch_q = qs if nphd else np.ascontiguousarray(qs)
    res = [None]

    def batch():
        res[0] = ro.search(batch_q, k)

    out["search_batch_s"] = timed(batch, reps)
    stride = np.uint64(spec.get("key_stride", 1))

    def recall(bm) -> float:
        hits = 0
        for i in range(len(qs)):
            got = low(bm.keys[i][: int(bm.counts[i])]) // stride
            # distances recomputed from the returned rows, not taken on trust
            if nphd:
                q = qs[i]
                d = []
                for r in got:
                    m = min(len(q), int(blens[r]))
                    x = np.bitwise_count(base[r, :m] ^ q[:m]).sum()
                    d.append(x / (8.0 * m))
                d = np.asarray(d)
            else:
                d = np.bitwise_count(base[np.sort(got)] ^ qs[i]).sum(axis=1)
            hits += int(np.sum(d <= gt_dist[i] + 1e-9))
        return min(1.0, hits / (k * len(qs)))

    out["recall_at_10"] = recall(res[0])
    # The batch again at each search expansion of the sweep, on a fresh
    # read-only open with `expansion_search` set, and the single queries at
    # that expansion: the report compares the engines at equal recall (each
    # at its smallest expansion reaching the recall of the better one at the
    # shared default, or the highest recall both reach).
    sweep = []
    for ef in spec.get("ef_sweep", []):
        r2 = make(read_only=True)
        r2.expansion_search = ef
        r2.search(batch_q, k)  # first touch of every shard's pages
        t = timed(lambda r2=r2: res.__setitem__(0, r2.search(batch_q, k)), reps)
        t1 = timed(lambda r2=r2: [r2.search(q, k) for q in single], reps)
        sweep.append(
            {
                "ef": ef,
                "ef_read_back": int(r2.expansion_search),
                "recall_at_10": recall(res[0]),
                "time_s": t,
                "single_s": {kk: v / len(single) for kk, v in t1.items()},
            }
        )
        r2.close()
    out["batch_sweep"] = sweep
    out["batch_queries"] = len(qs)
    ro.close()

    # reopen after an unsealed tail: 10k more rows written, then closed.
    w = make()
    tail = min(10_000, n)
    w.add(encode(keys[:tail] + keys[-1] + np.uint64(1)), rows[:tail])
    w.close()
    out["open_after_tail_s"] = timed(reopen, reps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
