"""The cluster history checker (bench/sagitta_bench/history) on histories
built by hand: known-good ones pass, known-bad ones (a stale read, a lost
write, a read of a value nobody wrote, a remove that comes back, a search
that misses a present key, a count out of bounds) are caught with the ops
involved, and info ops (outcome unknown) may take effect late or never.
Pure Python: no Ray, no cluster."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sagitta_bench.history import checker, model
from sagitta_bench.history.model import Op

NKEYS = 4


class H:
    """A history under construction; times are plain integers."""

    def __init__(self) -> None:
        self.ops: list = []

    def add(self, kind, keys, t0, t1, outcome="ok", **kw) -> Op:
        op = Op(
            id=len(self.ops),
            process=len(self.ops) % 3,
            kind=kind,
            keys=list(keys),
            invoke=t0,
            complete=None if outcome == "info" else t1,
            outcome=outcome,
            **kw,
        )
        self.ops.append(op)
        return op

    def w(self, key, v, t0, t1, outcome="ok") -> Op:
        return self.add("upsert", [key], t0, t1, outcome, values=[v])

    def rm(self, key, t0, t1, outcome="ok") -> Op:
        return self.add("remove", [key], t0, t1, outcome)

    def r(self, key, v, t0, t1, final=False) -> Op:
        return self.add("get", [key], t0, t1, values=[v], final=final)

    def search(self, q, k, hits, t0, t1) -> Op:
        full = [[key, v, model.distance(q[0], q[1], key, v)] for key, v in hits]
        return self.add("search", [q[0]], t0, t1, query=list(q), k=k, hits=full)

    def finals(self, t0, values: dict) -> None:
        for key in range(NKEYS):
            self.r(key, values.get(key), t0 + 10 * key, t0 + 10 * key + 5, final=True)

    def check(self, **kw) -> dict:
        return checker.check(self.ops, NKEYS, **kw)


def types(rep: dict) -> set:
    return {a["type"] for a in rep["anomalies"]}


def op_ids(rep: dict, kind: str) -> set:
    return {o["id"] for a in rep["anomalies"] if a["type"] == kind for o in a["ops"]}


def test_sequential_history_is_valid():
    h = H()
    h.w(0, 1, 0, 10)
    h.r(0, 1, 20, 30)
    h.rm(0, 40, 50)
    h.r(0, None, 60, 70)
    h.w(0, 2, 80, 90)
    h.w(1, 3, 80, 95)
    h.finals(1000, {0: 2, 1: 3})
    rep = h.check()
    assert rep["verdict"] == "valid", rep["anomalies"]
    assert rep["linearizable"]["valid"] == NKEYS
    assert rep["ops"]["get"] == {"ok": 2 + NKEYS}


def test_reads_concurrent_with_a_write_may_see_old_or_new():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(0, 2, 20, 100)  # slow write
    h.r(0, 1, 30, 40)
    h.r(0, 1, 35, 45)
    h.r(0, 2, 50, 60)
    h.r(0, 2, 110, 120)
    h.finals(1000, {0: 2})
    assert h.check()["verdict"] == "valid"


def test_stale_read_is_caught_with_its_ops():
    h = H()
    h.w(0, 1, 0, 10)
    w2 = h.w(0, 2, 20, 30)
    r = h.r(0, 1, 40, 50)  # w2 was acknowledged before the read began
    h.finals(1000, {0: 2})
    rep = h.check()
    assert rep["verdict"] == "invalid"
    assert types(rep) == {"nonlinearizable", "stale_read"}
    assert {r.id, w2.id} <= op_ids(rep, "stale_read")
    lin = next(a for a in rep["anomalies"] if a["type"] == "nonlinearizable")
    assert lin["key"] == 0 and lin["blocked"] == r.id
    assert rep["linearizable"]["invalid"] == [0]


def test_new_then_old_breaks_linearizability_but_not_the_claims():
    """A read sees the new value of a write still in flight, a later read
    the old one: not linearizable; allowed by "reads after an
    acknowledged write see it" (the write was not acknowledged yet)."""
    h = H()
    h.w(0, 1, 0, 10)
    h.w(0, 2, 20, 100)
    h.r(0, 2, 30, 40)
    h.r(0, 1, 50, 60)
    h.finals(1000, {0: 2})
    rep = h.check()
    assert types(rep) == {"nonlinearizable"}


def test_lost_write_after_healing():
    h = H()
    h.w(0, 1, 0, 10)
    lost = h.w(0, 2, 20, 30)
    h.w(1, 5, 0, 10)  # acknowledged, then gone
    h.finals(1000, {0: 1})
    rep = h.check()
    assert rep["lost_writes"] == 2
    assert lost.id in op_ids(rep, "lost_write")
    assert {a["key"] for a in rep["anomalies"] if a["type"] == "lost_write"} == {0, 1}


def test_remove_that_comes_back():
    h = H()
    h.w(0, 1, 0, 10)
    rm = h.rm(0, 20, 30)
    h.r(0, None, 40, 50)
    h.finals(1000, {0: 1})
    rep = h.check()
    assert "lost_write" in types(rep) and "nonlinearizable" in types(rep)
    assert rm.id in op_ids(rep, "lost_write")


def test_read_of_a_value_never_written():
    h = H()
    h.w(0, 1, 0, 10)
    bad = h.r(0, 99, 20, 30)
    h.finals(1000, {0: 1})
    rep = h.check()
    assert types(rep) == {"never_written", "nonlinearizable"}
    assert op_ids(rep, "never_written") == {bad.id}


def test_read_of_a_failed_write_and_from_the_future():
    h = H()
    failed = h.w(0, 1, 0, 10, outcome="fail")
    h.r(0, 1, 20, 30)
    h.r(1, 7, 20, 30)
    h.w(1, 7, 40, 50)
    h.finals(1000, {1: 7})
    rep = h.check()
    assert failed.id in op_ids(rep, "read_of_failed_write")
    assert "read_from_future" in types(rep)


def test_info_write_may_take_effect_late_or_never():
    h = H()
    h.w(0, 1, 0, 10, outcome="info")  # a timeout: unknown
    h.r(0, None, 20, 30)
    h.r(0, 1, 5000, 5010)  # applied long after the client gave up
    h.w(1, 2, 0, 10, outcome="info")  # never seen: never applied
    h.r(1, None, 20, 30)
    h.finals(10_000, {0: 1})
    assert h.check()["verdict"] == "valid"


def test_info_remove_explains_absence_but_cannot_be_undone():
    h = H()
    h.w(0, 1, 0, 10)
    h.rm(0, 20, 30, outcome="info")
    h.r(0, 1, 40, 50)
    h.r(0, None, 60, 70)
    h.finals(1000, {})
    assert h.check()["verdict"] == "valid"
    h.r(0, 1, 2000, 2010)  # the remove happened (None was read): 1 cannot return
    rep = h.check()
    assert types(rep) == {"nonlinearizable"}


def test_exact_search_hits_are_reads():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(1, 2, 0, 10)
    # Fewer hits than k: every other key was absent.
    h.search((0, 1), 5, [(0, 1), (1, 2)], 20, 30)
    # k hits, the query's key among them.
    h.search((1, 9), 1, [(1, 2)], 20, 30)
    h.finals(1000, {0: 1, 1: 2})
    rep = h.check()
    assert rep["verdict"] == "valid", rep["anomalies"]


def test_search_that_misses_an_acknowledged_key_is_caught():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(1, 2, 0, 10)
    # k=1: key 0 present in any version would be the nearest hit.
    s = h.search((0, 1), 1, [(1, 2)], 20, 30)
    h.finals(1000, {0: 1, 1: 2})
    rep = h.check()
    assert "stale_read" in types(rep) and "nonlinearizable" in types(rep)
    assert s.id in op_ids(rep, "stale_read")
    # A short answer (fewer than k) leaves key 2 absent: fine, never written.
    h2 = H()
    h2.w(2, 3, 0, 10)
    h2.search((0, 4), 4, [], 20, 30)  # key 2 acknowledged, not returned
    h2.finals(1000, {2: 3})
    assert types(h2.check()) == {"nonlinearizable", "stale_read"}


def test_malformed_search_answers():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(1, 2, 0, 10)
    s = h.search((0, 1), 2, [(0, 1), (1, 2)], 20, 30)
    s.hits[1][2] += 1.0  # a distance that is not its row's
    s2 = h.search((0, 1), 2, [(0, 1), (1, 2)], 20, 30)
    s2.hits.reverse()  # out of order
    s3 = h.search((0, 1), 2, [(0, 1), (1, 2)], 20, 30)
    s3.hits[1][1] = None  # no payload
    h.finals(1000, {0: 1, 1: 2})
    rep = h.check()
    bad = [a for a in rep["anomalies"] if a["type"] == "bad_search"]
    assert {a["ops"][0]["id"] for a in bad} == {s.id, s2.id, s3.id}
    assert any("without its payload" in a["what"] for a in bad)


def test_counts_within_the_bounds_of_concurrent_ops():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(1, 2, 0, 10)
    h.add("count", [], 20, 30, count=2)
    h.rm(1, 40, 100)  # concurrent with the next counts
    h.add("count", [], 50, 60, count=1)
    h.add("count", [], 50, 60, count=2)
    h.w(2, 3, 40, 60, outcome="info")
    h.add("count", [], 70, 80, count=3)
    h.finals(1000, {0: 1, 2: 3})
    assert h.check()["verdict"] == "valid"
    # Key 0 surely there, key 1 surely gone, key 2 maybe (an info write).
    fine = h.add("count", [], 110, 120, count=2)
    bad = h.add("count", [], 110, 120, count=0)
    rep = h.check()
    assert types(rep) == {"count_out_of_bounds"}
    got = {a["ops"][0]["id"]: a["bounds"] for a in rep["anomalies"]}
    assert got == {bad.id: [1, 2]}, got
    fine.count = 3
    rep = h.check()
    assert {a["ops"][0]["id"] for a in rep["anomalies"]} == {fine.id, bad.id}


def test_torn_rows_and_replica_divergence():
    h = H()
    h.w(0, 1, 0, 10)
    g = h.r(0, 1, 20, 30)
    g.torn = [0]
    h.finals(1000, {0: 1})
    reps = [
        {"shard": 0, "node": "n1", "values": {"0": 1}},
        {"shard": 0, "node": "n2", "values": {"0": None}},
    ]
    rep = h.check(replicas=reps)
    assert types(rep) == {"torn_row", "replica_divergence"}
    div = next(a for a in rep["anomalies"] if a["type"] == "replica_divergence")
    assert div["node"] == "n2" and div["differs"] == {0: [None, 1]}


def test_missing_final_read_is_reported():
    h = H()
    h.w(0, 1, 0, 10)
    rep = h.check()
    assert types(rep) == {"final_read_missing"}


def test_budget_exhausted_is_unknown_not_valid():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(0, 2, 20, 100)
    h.r(0, 2, 30, 40)
    h.r(0, 1, 50, 60)
    h.finals(1000, {0: 2})
    rep = h.check(budget=1)
    assert rep["verdict"] == "unknown" and rep["linearizable"]["unknown"] == [0]


def simulate(seed: int, n: int, procs: int = 5) -> H:
    """A linearizable history: each op takes effect at a random point of
    its window (an info write at a random point after its invocation, or
    never); reads return the register at their point."""
    rnd = random.Random(seed)
    h = H()
    t = [0] * procs
    pending = []  # (point, op, key, value)
    version = 0
    for _ in range(n):
        p = rnd.randrange(procs)
        t0 = t[p] + rnd.randint(0, 30)
        t1 = t0 + rnd.randint(1, 60)
        t[p] = t1
        key = rnd.randrange(NKEYS)
        point = rnd.uniform(t0, t1)
        x = rnd.random()
        if x < 0.3:
            version += 1
            outcome = "info" if rnd.random() < 0.05 else "ok"
            op = h.w(key, version, t0, t1, outcome)
            if outcome == "info":
                point = rnd.choice([None, t0 + rnd.uniform(0, 2000)])
                t[p] = t0 + 2000  # a new process takes over
            pending.append((point, op, key, version))
        elif x < 0.4:
            op = h.rm(key, t0, t1)
            pending.append((point, op, key, None))
        else:
            op = h.r(key, "?", t0, t1)
            pending.append((point, op, key, "?"))
    state: dict = {}
    for _point, op, key, v in sorted((e for e in pending if e[0] is not None), key=lambda e: e[0]):
        if v == "?":
            op.values = [state.get(key)]
        else:
            state[key] = v
    end = max(t) + 5000
    h.finals(end, state)
    return h


def test_simulated_linearizable_histories_pass_fast():
    t = time.perf_counter()
    for seed in range(5):
        h = simulate(seed, 1500)
        rep = h.check()
        assert rep["verdict"] == "valid", (seed, rep["anomalies"][:2])
    assert time.perf_counter() - t < 4.0


def test_a_stale_read_planted_in_a_long_history_is_found():
    h = simulate(11, 1500)
    acked = {o.values[0] for o in h.ops if o.kind == "upsert" and o.outcome == "ok"}
    reads = [
        o
        for o in h.ops
        if o.kind == "get" and not o.final and o.keys == [1] and o.values[0] in acked
    ]
    # Plant: a late read of key 1 returns the first acknowledged value it
    # was read with.
    first = reads[0].values[0]
    last = h.ops[-NKEYS]  # the first final read
    h.r(1, first, last.invoke - 20, last.invoke - 10)
    rep = h.check()
    assert "nonlinearizable" in types(rep)
    assert 1 in rep["linearizable"]["invalid"]


def test_rows_put_the_query_key_nearest():
    rng = np.random.default_rng(3)
    n = 16
    for _ in range(50):
        qk, qv = int(rng.integers(n)), int(rng.integers(1, 10**6))
        q = model.vector(qk, qv, n)
        rows = [(k, int(rng.integers(1, 10**6))) for k in range(n)]
        d = [float(((model.vector(k, v, n) - q).astype(np.float64) ** 2).sum()) for k, v in rows]
        assert int(np.argmin(d)) == qk
        for (k, v), got in zip(rows, d):
            assert got == pytest.approx(model.distance(qk, qv, k, v), abs=1e-4)
        assert model.row_matches(model.vector(qk, qv, n), qk, qv, n)
        assert not model.row_matches(model.vector(qk, qv + 1, n), qk, qv, n)


def test_history_file_round_trip(tmp_path):
    h = simulate(2, 50)
    h.ops[3].torn = [1]
    p = tmp_path / "h.jsonl.gz"
    model.save(p, h.ops, {"seed": 2})
    ops, meta = model.load(p)
    assert meta == {"seed": 2}
    assert [o.to_dict() for o in ops] == [o.to_dict() for o in h.ops]


def brute_force(rops: list) -> bool:
    """Linearizability of a small one-key history by trying every order
    (and every subset of the info writes)."""
    from itertools import combinations, permutations

    must = [r for r in rops if r.complete != checker.INF]
    maybe = [r for r in rops if r.complete == checker.INF]
    for n in range(len(maybe) + 1):
        for extra in combinations(maybe, n):
            for order in permutations(must + list(extra)):
                if any(b.complete < a.invoke for i, a in enumerate(order) for b in order[i + 1 :]):
                    continue
                state = None
                for r in order:
                    if r.write:
                        state = r.value
                    elif r.value != state:
                        break
                else:
                    return True
    return False


def test_search_agrees_with_brute_force_on_small_histories():
    rnd = random.Random(5)
    verdicts = Counter()
    for _ in range(400):
        rops, version = [], 0
        for i in range(rnd.randint(1, 6)):
            t0 = rnd.randint(0, 40)
            t1 = t0 + rnd.randint(1, 25)
            x = rnd.random()
            if x < 0.45:
                version += 1
                info = rnd.random() < 0.2
                rops.append(checker.RegOp(i, True, version, t0, checker.INF if info else t1))
            elif x < 0.55:
                rops.append(checker.RegOp(i, True, None, t0, t1))
            else:
                v = rnd.choice([None, *range(1, version + 2)])
                rops.append(checker.RegOp(i, False, v, t0, t1))
        want = brute_force(rops)
        got = checker.linearizable(rops)["valid"]
        assert got == want, rops
        verdicts[want] += 1
    assert verdicts[True] > 50 and verdicts[False] > 50, verdicts


def test_verdicts_split_linearizability_from_the_claims():
    h = H()
    h.w(0, 1, 0, 10)
    h.w(0, 2, 20, 100)
    h.r(0, 2, 30, 40)
    h.r(0, 1, 50, 60)
    h.finals(1000, {0: 2})
    rep = h.check()
    assert (rep["linearizability"], rep["claims"]) == ("invalid", "valid")
    h.w(1, 3, 0, 10)
    h.search((1, 3), 4, [], 20, 30)  # a short search without the acknowledged key 1
    rep = h.check()
    assert rep["claims"] == "invalid"
    stale = next(a for a in rep["anomalies"] if a["type"] == "stale_read")
    assert stale["via"] == "search-short"


def test_new_then_old_reads_are_counted_and_named():
    h = H()
    h.w(0, 1, 0, 10)
    w2 = h.w(0, 2, 20, 100)
    first = h.r(0, 2, 30, 40)
    late = h.r(0, 1, 50, 60)
    h.r(0, 2, 70, 80)  # fine: new after new
    h.finals(1000, {0: 2})
    rep = h.check()
    nto = rep["linearizable"]["new_then_old"]
    assert nto["reads"] == 1 and nto["keys"] == [0]
    assert [o["id"] for o in nto["examples"][0]["ops"]] == [late.id, first.id, w2.id]
    lin = next(a for a in rep["anomalies"] if a["type"] == "nonlinearizable")
    assert lin["new_then_old_reads"] == 1
    # Two writes concurrent with each other: one was seen after the other
    # had completed, then the other came back.
    h = H()
    h.w(0, 58, 840, 872)
    h.w(0, 59, 847, 930)
    h.r(0, 59, 884, 902)
    back = h.r(0, 58, 921, 932)
    h.finals(1000, {0: 59})
    assert [e[0] for e in checker.new_then_old(checker.register_histories(h.ops, NKEYS)[0])] == [
        back.id
    ]
    # A remove in flight seen, then the value it removes again.
    h = H()
    h.w(0, 1, 0, 10)
    h.rm(0, 20, 100)
    gone = h.r(0, None, 30, 40)
    again = h.r(0, 1, 50, 60)
    got = checker.new_then_old(checker.register_histories(h.ops, NKEYS)[0])
    assert got == [(again.id, gone.id, None)]
    # Simulated linearizable histories have none.
    for seed in range(3):
        assert simulate(seed, 800).check()["linearizable"]["new_then_old"]["reads"] == 0
