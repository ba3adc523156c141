"""The checker of a recorded history (:mod:`.model`): pure Python, no Ray.

Every key is a register (a version number, or absent). Checked:

1. **Linearizability per key** (:func:`linearizable`): a search in the
   manner of Wing & Gong with Lowe's memoisation (the algorithm of
   porcupine and of Knossos' ``linear``): the ops' call and return
   events in a linked list ordered by time, a depth-first search that
   *lifts* an op out of the list when it can be linearized next (its
   call before the first pending return), backtracks at a return it
   could not place, and never visits a (linearized set, register value)
   pair twice. A ``fail`` op is left out; an ``info`` write may take
   effect at any time after its invocation or never (its return is put
   at infinity, after every other event, where linearizing it changes
   nothing that is read); an ``info`` read is left out; an ``info``
   write whose value nobody read is left out too (it cannot help or hurt
   a linearization). Reads come from gets, and from exact searches: each
   hit is a read of its key (the version from the payload); a search
   that returned fewer than ``k`` hits returned every live row, so every
   key it did not return was absent; and the query's own key, if
   present in any version, is the nearest row (:mod:`.model`), so a
   search with ``k`` hits none of which is the query's key read it
   absent.
2. **What docs/CLUSTER.md claims**, op by op, with the ops named
   (:func:`claim_anomalies`): a read returns a value some write wrote
   (``never_written``), not one of a failed write
   (``read_of_failed_write``), not one written after the read ended
   (``read_from_future``), and never a value that an acknowledged write
   had replaced before the read began (``stale_read``; called
   ``lost_write`` for the final reads after the run healed: an
   acknowledged write that is gone). These hold under the weaker
   "regular register" reading of the docs' claims (a read after an
   acknowledged write sees it), so an anomaly here is a broken claim,
   where a linearizability failure alone may be the documented
   "what a concurrent read sees is not guaranteed".
3. **Searches** (:func:`search_anomalies`): hits ordered by (distance,
   key), no key twice, every distance the one of the row its payload
   names, no hit without its payload.
4. **Counts** (:func:`count_anomalies`): between the keys surely
   present throughout the count's window and the keys not surely
   absent throughout it.
5. **Gets**: the vector returned is the one written with the version
   returned (``torn_row``).
6. **Replicas** (:func:`replica_anomalies`): after healing, every
   replica of every shard holds what the final reads saw.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

from .model import WRITES, Op, distance

INF = float("inf")
NEG = float("-inf")
# Steps (candidate ops tried) of the search per key before it gives up.
BUDGET = 2_000_000


@dataclass
class RegOp:
    """One op on one key's register. ``complete`` is INF for an info
    write; ``value`` None is "absent". ``via``: for a read, what read it
    (``get``, ``search``: a hit, ``search-short``: absent from a search
    that returned fewer than k hits, ``search-query``: the query's own
    key absent from a search of k hits)."""

    op: int
    write: bool
    value: int | None
    invoke: float
    complete: float
    final: bool = False
    via: str = ""


# ----------------------------------------------------------------- reads


def search_reads(op: Op, nkeys: int) -> dict:
    """What an ok exact search read, key -> (version, how) (version None:
    absent; how: see :class:`RegOp`'s ``via``); hits without a payload
    or repeated keys are left out (reported by
    :func:`search_anomalies`)."""
    seen: dict = {}
    bad = set()
    for key, version, _ in op.hits or []:
        if version is None or key in seen:
            bad.add(key)
        seen[key] = (version, "search")
    for key in bad:
        seen.pop(key, None)
    if len(op.hits or []) < op.k:
        for key in range(nkeys):
            if key not in seen and key not in bad:
                seen[key] = (None, "search-short")
    elif op.query is not None and op.query[0] not in seen and op.query[0] not in bad:
        seen[op.query[0]] = (None, "search-query")
    return seen


def register_histories(ops: list, nkeys: int) -> dict:
    """Key -> its register ops, in the order of the history."""
    out: dict = {k: [] for k in range(nkeys)}
    for op in ops:
        if op.outcome == "fail":
            continue
        if op.kind in WRITES:
            end = op.complete if op.outcome == "ok" else INF
            for key in op.keys:
                out.setdefault(key, []).append(RegOp(op.id, True, op.written(key), op.invoke, end))
            continue
        if op.outcome != "ok":
            continue
        if op.kind == "get":
            reads = {k: (v, "get") for k, v in zip(op.keys, op.values)}
        elif op.kind == "search":
            reads = search_reads(op, nkeys)
        else:
            continue
        for key, (v, via) in reads.items():
            out.setdefault(key, []).append(
                RegOp(op.id, False, v, op.invoke, op.complete, final=op.final, via=via)
            )
    return out


# ------------------------------------------------------ linearizability


def _prune(rops: list) -> list:
    """Leaves out the info writes of a value no read returned."""
    read = {r.value for r in rops if not r.write and r.value is not None}
    return [
        r
        for r in rops
        if not (r.write and r.complete == INF and r.value is not None and r.value not in read)
    ]


def linearizable(rops: list, init: int | None = None, budget: int = BUDGET) -> dict:
    """Whether one key's register history is linearizable. Returns
    ``valid`` (True, False, or None when the search ran past ``budget``
    steps), the ``steps`` taken, and when not valid, where the deepest
    partial linearization got stuck: ``blocked`` (the op whose return
    could not be passed), ``states`` (the register values reachable
    there) and ``prefix`` (the last ops linearized before it)."""
    rops = _prune(rops)
    n = len(rops)
    events = []
    for i, r in enumerate(rops):
        events.append((r.invoke, 0, i))
        events.append((r.complete, 1, i))
    # Calls before returns at equal times: such ops count as concurrent.
    events.sort(key=lambda e: (e[0], e[1]))
    m = len(events)
    if m == 0:
        return {"valid": True, "ops": 0, "steps": 0}
    # A doubly linked list of event positions, `head` (= m) its sentinel.
    head = m
    nxt = [*range(1, m), -1, 0]
    prv = [head, *range(m - 1), -1]
    is_ret = [e[1] == 1 for e in events]
    op_at = [e[2] for e in events]
    call_pos = [0] * n
    ret_pos = [0] * n
    for p, (_, r, i) in enumerate(events):
        if r:
            ret_pos[i] = p
        else:
            call_pos[i] = p
    info = [r.complete == INF for r in rops]
    remaining = sum(1 for x in info if not x)

    def unlink(p: int) -> None:
        nxt[prv[p]] = nxt[p]
        if nxt[p] != -1:
            prv[nxt[p]] = prv[p]

    def relink(p: int) -> None:
        nxt[prv[p]] = p
        if nxt[p] != -1:
            prv[nxt[p]] = p

    def candidates() -> list:
        out, later = [], []
        p = nxt[head]
        while p != -1 and not is_ret[p]:
            i = op_at[p]
            (later if info[i] else out).append(i)
            p = nxt[p]
        # Ops that completed are tried before info ops, which are best
        # left for later (they may take effect at any time).
        return out + later

    def first_return() -> int | None:
        p = nxt[head]
        while p != -1 and not is_ret[p]:
            p = nxt[p]
        return None if p == -1 else op_at[p]

    state = init
    lin = 0
    seen: set = set()
    frames: list = []
    cands = candidates()
    idx = 0
    steps = 0
    deepest = -1
    stuck: dict = {}
    while remaining:
        advanced = False
        while idx < len(cands):
            i = cands[idx]
            idx += 1
            steps += 1
            r = rops[i]
            if r.write:
                ns = r.value
            elif r.value == state:
                ns = state
            else:
                continue
            nl = lin | (1 << i)
            if (nl, ns) in seen:
                continue
            seen.add((nl, ns))
            frames.append((i, state, cands, idx))
            unlink(call_pos[i])
            unlink(ret_pos[i])
            if not info[i]:
                remaining -= 1
            state, lin = ns, nl
            cands, idx = candidates(), 0
            advanced = True
            break
        if advanced:
            continue
        if steps > budget:
            return {"valid": None, "ops": n, "steps": steps}
        depth = len(frames)
        if depth > deepest:
            deepest = depth
            stuck = {
                "blocked": first_return(),
                "states": {state},
                "prefix": [f[0] for f in frames[-8:]],
            }
        elif depth == deepest:
            stuck["states"].add(state)
        if not frames:
            return {
                "valid": False,
                "ops": n,
                "steps": steps,
                "blocked": None if stuck.get("blocked") is None else rops[stuck["blocked"]].op,
                "states": sorted(stuck["states"], key=lambda v: (v is not None, v or 0)),
                "prefix": [rops[i].op for i in stuck["prefix"]],
                "_blocked_index": stuck.get("blocked"),
            }
        i, state, cands, idx = frames.pop()
        relink(ret_pos[i])
        relink(call_pos[i])
        if not info[i]:
            remaining += 1
        lin ^= 1 << i
    return {"valid": True, "ops": n, "steps": steps}


# ------------------------------------------------------------- claims


class _Superseders:
    """Acknowledged writes of one key by invocation, with the earliest
    completion among those invoked after a time: who replaced a value
    before a read began."""

    def __init__(self, writes: list):
        ws = sorted(writes, key=lambda w: w.invoke)
        self.inv = [w.invoke for w in ws]
        self.best: list = [None] * (len(ws) + 1)
        for j in range(len(ws) - 1, -1, -1):
            b = self.best[j + 1]
            self.best[j] = ws[j] if b is None or ws[j].complete < b.complete else b

    def before(self, after: float, until: float) -> RegOp | None:
        """An acknowledged write invoked after ``after`` and complete
        before ``until``, if there is one (the earliest to complete)."""
        j = bisect.bisect_right(self.inv, after)
        w = self.best[j]
        return w if w is not None and w.complete < until else None


def claim_anomalies(key: int, rops: list, failed: dict) -> list:
    """The reads of one key that break docs/CLUSTER.md's claims (see the
    module's doc). ``failed``: value -> op id of writes that failed."""
    out: list = []
    writes = [r for r in rops if r.write]
    by_value = {w.value: w for w in writes if w.value is not None}
    ok = [w for w in writes if w.complete != INF]
    any_ok = _Superseders(ok)
    ok_upserts = _Superseders([w for w in ok if w.value is not None])
    removes = sorted((w for w in writes if w.value is None), key=lambda w: w.invoke)
    rm_inv = [w.invoke for w in removes]
    # Latest completion among removes invoked up to each point.
    rm_latest: list = []
    for w in removes:
        prev = rm_latest[-1] if rm_latest else None
        rm_latest.append(w if prev is None or w.complete >= prev.complete else prev)
    for r in rops:
        if r.write:
            continue
        if r.value is not None:
            w = by_value.get(r.value)
            if w is None:
                kind = "read_of_failed_write" if r.value in failed else "never_written"
                ops = [r.op] + ([failed[r.value]] if r.value in failed else [])
                out.append({"type": kind, "key": key, "value": r.value, "via": r.via, "ops": ops})
                continue
            if w.invoke > r.complete:
                out.append(
                    {
                        "type": "read_from_future",
                        "key": key,
                        "value": r.value,
                        "via": r.via,
                        "ops": [r.op, w.op],
                    }
                )
                continue
            sup = any_ok.before(w.complete, r.invoke)
            source = w
        else:
            j = bisect.bisect_left(rm_inv, r.complete)
            source = rm_latest[j - 1] if j else None
            after = NEG if source is None else source.complete
            sup = ok_upserts.before(after, r.invoke)
        if sup is not None:
            out.append(
                {
                    "type": "lost_write" if r.final else "stale_read",
                    "key": key,
                    "value": r.value,
                    "replaced_by": sup.value,
                    "via": r.via,
                    "ops": [r.op, sup.op] + ([source.op] if source is not None else []),
                }
            )
    return out


class _Reads:
    """Reads of one key by invocation, with, for the reads invoked after
    a time, the two earliest to complete that returned different values
    (so the earliest that returned anything but a given value is one of
    them)."""

    def __init__(self, reads: list):
        rs = sorted(reads, key=lambda r: r.invoke)
        self.inv = [r.invoke for r in rs]
        self.best: list = [()] * (len(rs) + 1)
        for j in range(len(rs) - 1, -1, -1):
            out: list = []
            for c in sorted((rs[j], *self.best[j + 1]), key=lambda r: r.complete):
                if all(c.value != o.value for o in out):
                    out.append(c)
                if len(out) == 2:
                    break
            self.best[j] = tuple(out)

    def other(self, after: float, until: float, value: int | None) -> RegOp | None:
        """A read invoked after ``after``, complete before ``until``, that
        returned something else than ``value``."""
        for r in self.best[bisect.bisect_right(self.inv, after)]:
            if r.value != value:
                return r if r.complete < until else None
        return None


def new_then_old(rops: list) -> list:
    """Reads of one key that prove the history not linearizable on their
    own without being stale reads: a read ``r`` returned ``v`` although
    an earlier read ``r2`` (complete before ``r`` began, invoked after
    every write that could have written ``v`` had completed) returned
    something else. Once ``r2`` saw another value, ``v`` could only come
    back by a second effect of a write that was already over. The
    pattern of a read served by a replica behind another one that served
    a write still in flight. Returns ``(r, r2, writer of r2's value or
    None)`` op ids."""
    writes = [w for w in rops if w.write]
    by_value = {w.value: w for w in writes if w.value is not None}
    reads = [r for r in rops if not r.write]
    index = _Reads(reads)
    ok = [w for w in writes if w.complete != INF]
    any_ok = _Superseders(ok)
    ok_upserts = _Superseders([w for w in ok if w.value is not None])
    removes = [w for w in writes if w.value is None]
    out = []
    for r in reads:
        if r.value is None:
            src = max((w.complete for w in removes if w.invoke < r.complete), default=NEG)
            stale = ok_upserts.before(src, r.invoke)
        elif r.value in by_value:
            src = by_value[r.value].complete
            stale = any_ok.before(src, r.invoke)
        else:
            continue  # never written: claim_anomalies names it
        if stale is not None:
            continue  # a stale read: claim_anomalies names it
        r2 = index.other(src, r.invoke, r.value)
        if r2 is not None:
            w = by_value.get(r2.value)
            out.append((r.op, r2.op, None if w is None else w.op))
    return out


# ----------------------------------------------------------- searches


def search_anomalies(op: Op, nkeys: int) -> list:
    """What is wrong with one ok exact search's answer on its own."""
    out = []
    hits = op.hits or []
    qk, qv = op.query
    if len(hits) > op.k:
        out.append(f"{len(hits)} hits for k={op.k}")
    keys = [h[0] for h in hits]
    if len(set(keys)) != len(keys):
        out.append("a key twice")
    for key, version, dist in hits:
        if not 0 <= key < nkeys:
            out.append(f"key {key} was never written")
        elif version is None:
            out.append(f"hit {key} without its payload")
        else:
            want = distance(qk, qv, key, version)
            if abs(dist - want) > 1e-3 + 1e-4 * want:
                out.append(f"hit {key}: distance {dist}, its row (version {version}) is at {want}")
    order = [(h[2], h[0]) for h in hits]
    if order != sorted(order):
        out.append("hits not ordered by (distance, key)")
    return out


# -------------------------------------------------------------- counts


class _Surely:
    """For one key: whether it is surely present (or surely absent)
    throughout a window. Present throughout [a, b] if some acknowledged
    upsert U completed before a and every remove (acknowledged or info)
    invoked before b completed before U began; absent likewise with the
    roles swapped (or no upsert invoked before b at all)."""

    def __init__(self, rops: list):
        ws = [r for r in rops if r.write]
        self.present = self._side(
            [w for w in ws if w.value is not None and w.complete != INF],
            [w for w in ws if w.value is None],
        )
        self.absent = self._side(
            [w for w in ws if w.value is None and w.complete != INF],
            [w for w in ws if w.value is not None],
        )
        ups = sorted(w.invoke for w in ws if w.value is not None)
        self.first_upsert = ups[0] if ups else INF

    @staticmethod
    def _side(setters: list, undoers: list):
        s = sorted(setters, key=lambda w: w.complete)
        s_done = [w.complete for w in s]
        s_inv: list = []
        for w in s:  # latest invocation among setters done by a point
            s_inv.append(max(w.invoke, s_inv[-1]) if s_inv else w.invoke)
        u = sorted(undoers, key=lambda w: w.invoke)
        u_inv = [w.invoke for w in u]
        u_done: list = []
        for w in u:  # latest completion among undoers invoked by a point
            u_done.append(max(w.complete, u_done[-1]) if u_done else w.complete)

        def holds(a: float, b: float) -> bool:
            j = bisect.bisect_left(s_done, a)
            if j == 0:
                return False
            latest = s_inv[j - 1]
            k = bisect.bisect_left(u_inv, b)
            return k == 0 or u_done[k - 1] < latest

        return holds

    def surely_absent(self, a: float, b: float) -> bool:
        return self.first_upsert >= b or self.absent(a, b)


def count_anomalies(ops: list, regs: dict) -> list:
    """Counts outside [keys surely present, keys not surely absent]."""
    sure = {k: _Surely(r) for k, r in regs.items()}
    out = []
    for op in ops:
        if op.kind != "count" or op.outcome != "ok":
            continue
        a, b = op.invoke, op.complete
        lo = sum(1 for s in sure.values() if s.present(a, b))
        hi = sum(1 for s in sure.values() if not s.surely_absent(a, b))
        if not lo <= op.count <= hi:
            out.append(
                {
                    "type": "count_out_of_bounds",
                    "count": op.count,
                    "bounds": [lo, hi],
                    "ops": [op.id],
                }
            )
    return out


# ------------------------------------------------------------ replicas


def replica_anomalies(final: dict, replicas: list) -> list:
    """``final``: key -> the version the final reads saw (None: absent);
    ``replicas``: one entry per replica (``shard``, ``node``,
    ``values``: key -> version of the keys of its shard). Every replica
    must hold what the final reads saw."""
    out = []
    for rep in replicas:
        diff = {
            int(k): [v, final.get(int(k))]
            for k, v in rep["values"].items()
            if int(k) in final and final[int(k)] != v
        }
        if diff:
            out.append(
                {
                    "type": "replica_divergence",
                    "shard": rep["shard"],
                    "node": rep["node"],
                    "differs": diff,
                    "ops": [],
                }
            )
    return out


# -------------------------------------------------------------- report


def brief(op: Op, t0: int) -> dict:
    """An op for a report: times in ms from the start of the run."""
    d = op.to_dict()
    d["invoke"] = round((op.invoke - t0) / 1e6, 3)
    if op.complete is not None:
        d["complete"] = round((op.complete - t0) / 1e6, 3)
    return d


def _window(regs: list, res: dict, by_id: dict) -> list:
    """The ops around where a non-linearizable key's search got stuck:
    the last ops linearized, the blocked op and every op of the key
    concurrent with it."""
    ids = list(res.get("prefix", []))
    b = res.get("blocked")
    if b is not None:
        ids.append(b)
        blk = by_id[b]
        lo = blk.invoke
        hi = blk.complete if blk.complete is not None else INF
        ids += [r.op for r in regs if r.invoke <= hi and r.complete >= lo]
    seen, out = set(), []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return sorted(out, key=lambda i: by_id[i].invoke)


def check(
    ops: list,
    nkeys: int,
    replicas: list | None = None,
    budget: int = BUDGET,
) -> dict:
    """Every check of the module over a history; the report's
    ``checker`` section. ``verdict``: ``valid`` (nothing found),
    ``invalid`` (an anomaly, listed with its ops) or ``unknown`` (a
    key's search ran out of budget, nothing else found);
    ``linearizability`` the same for the registers alone, ``claims``
    for every other check."""
    by_id = {op.id: op for op in ops}
    t0 = min((op.invoke for op in ops), default=0)
    regs = register_histories(ops, nkeys)
    failed_by_key: dict = {}
    for op in ops:
        if op.kind == "upsert" and op.outcome == "fail":
            for key, v in zip(op.keys, op.values):
                failed_by_key.setdefault(key, {})[v] = op.id
    anomalies: list = []
    lin: dict = {}
    inversions: dict = {}
    for key, rops in sorted(regs.items()):
        res = linearizable(rops, budget=budget)
        res.pop("_blocked_index", None)
        lin[key] = res
        inv = new_then_old(rops)
        if inv:
            inversions[key] = inv
        if res["valid"] is False:
            anomalies.append(
                {
                    "type": "nonlinearizable",
                    "key": key,
                    "blocked": res["blocked"],
                    "blocked_via": next(
                        (r.via for r in rops if r.op == res["blocked"] and not r.write), None
                    ),
                    "states": res["states"],
                    "new_then_old_reads": len(inv),
                    "ops": _window(rops, res, by_id),
                }
            )
        anomalies += claim_anomalies(key, rops, failed_by_key.get(key, {}))
    for op in ops:
        if op.kind == "search" and op.outcome == "ok":
            for what in search_anomalies(op, nkeys):
                anomalies.append({"type": "bad_search", "what": what, "ops": [op.id]})
        if op.kind == "get" and op.outcome == "ok" and op.torn:
            anomalies.append({"type": "torn_row", "keys": op.torn, "ops": [op.id]})
    anomalies += count_anomalies(ops, regs)
    finals: dict = {}
    for op in ops:
        if op.final and op.kind == "get" and op.outcome == "ok":
            finals.update(zip(op.keys, op.values))
    missing = [k for k in range(nkeys) if k not in finals]
    if missing:
        anomalies.append({"type": "final_read_missing", "keys": missing, "ops": []})
    anomalies += replica_anomalies(finals, replicas or [])
    for a in anomalies:
        a["ops"] = [brief(by_id[i], t0) for i in a["ops"]]
    unknown = [k for k, r in lin.items() if r["valid"] is None]
    by_kind = Counter(a["type"] for a in anomalies)
    outcomes: dict = {}
    for op in ops:
        outcomes.setdefault(op.kind, Counter())[op.outcome] += 1
    invalid = sorted(k for k, r in lin.items() if r["valid"] is False)
    broken = [a for a in anomalies if a["type"] != "nonlinearizable"]
    return {
        "verdict": "invalid" if anomalies else ("unknown" if unknown else "valid"),
        # Linearizability alone, and everything else (the claims of
        # docs/CLUSTER.md, the searches, counts, rows and replicas).
        "linearizability": "invalid" if invalid else ("unknown" if unknown else "valid"),
        "claims": "invalid" if broken else "valid",
        "ops": {k: dict(v) for k, v in sorted(outcomes.items())},
        "ops_total": len(ops),
        "linearizable": {
            "keys": len(lin),
            "valid": sum(1 for r in lin.values() if r["valid"] is True),
            "invalid": invalid,
            "unknown": unknown,
            "register_ops": sum(r["ops"] for r in lin.values()),
            "steps": sum(r["steps"] for r in lin.values()),
            # Reads that prove a key not linearizable by themselves (see
            # new_then_old): how many, on which keys, and a few of them.
            "new_then_old": {
                "reads": sum(len(v) for v in inversions.values()),
                "keys": sorted(inversions),
                "examples": [
                    {"key": k, "ops": [brief(by_id[i], t0) for i in v[0] if i is not None]}
                    for k, v in sorted(inversions.items())[:5]
                ],
            },
        },
        "lost_writes": by_kind.get("lost_write", 0),
        "anomalies_by_type": dict(by_kind),
        "anomalies": anomalies,
    }
