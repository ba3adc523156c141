"""The load: client threads mixing writes and reads over HTTP or Flight,
each checking every answer about its own key range online, and the
monitor thread polling health and index status."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .api import FlightApi, HttpApi, OpError
from .model import (
    DIMS,
    GROUPS,
    KINDS,
    MAX_SAMPLES,
    TAGS,
    WEIGHTS,
    Filter,
    Hits,
    K,
    Model,
    Row,
    Rows,
    f_grp,
    f_grp_tag,
    f_owner,
    f_owner_grp,
    f_owner_grp_tag,
    l2,
    payload_of,
    vectors_of,
)
from .server import Server, loadavg

# ----------------------------------------------------------------- checks


@dataclass
class Checks:
    """Counts of the checks passed and failed, with the first failures."""

    ok: Counter = field(default_factory=Counter)
    bad: Counter = field(default_factory=Counter)
    samples: list = field(default_factory=list)

    def check(self, name: str, good: bool, detail: Any = None) -> bool:
        if good:
            self.ok[name] += 1
        else:
            self.bad[name] += 1
            if len(self.samples) < MAX_SAMPLES:
                self.samples.append({"check": name, "detail": detail})
        return good

    def merge(self, other: Checks) -> None:
        self.ok.update(other.ok)
        self.bad.update(other.bad)
        self.samples.extend(other.samples[: MAX_SAMPLES - len(self.samples)])


def check_rows(checks: Checks, m: Model, name: str, keys: Any, got: Rows) -> None:
    """Rows read back (``got``) for ``keys`` against the model: a live key
    with its exact vector and payload, an absent key absent. A key whose
    last write's outcome was unknown is settled by what was read, if that
    is one of the states it may be in."""
    for k in keys:
        if k in got:
            vec, pay = got[k]
            found: Row | None = Row(-1, -1, None)  # present, and no state it may be in
            for r in m.possible(k):
                if (
                    r is not None
                    and pay == payload_of(m.owner, r)
                    and np.array_equal(vec, vectors_of([r.seed])[0])
                ):
                    found = r
                    break
        else:
            found = None
        if not m.settle(k, found):
            checks.check(
                name,
                False,
                {
                    "key": k,
                    "model": [r and payload_of(m.owner, r) for r in m.possible(k)],
                    "server": got[k][1] if k in got else None,
                    "server_vector_is_a_models": k in got
                    and any(
                        r is not None and np.array_equal(got[k][0], vectors_of([r.seed])[0])
                        for r in m.possible(k)
                    ),
                },
            )
        else:
            checks.check(name, True)


# ----------------------------------------------------------------- clients


@dataclass
class Shared:
    """What every client thread reads or adds to."""

    t0: float
    deadline: float
    last_write_ack: float  # perf_counter of the last acknowledged write
    stop: threading.Event = field(default_factory=threading.Event)


class Client(threading.Thread):
    """One client: a protocol, a key range, its model, and its records."""

    def __init__(self, cid: int, api: HttpApi | FlightApi, keys: int, shared: Shared, seed: int):
        super().__init__(name=f"client-{cid}", daemon=True)
        self.cid, self.api, self.shared = cid, api, shared
        self.model = Model(cid, cid * keys, (cid + 1) * keys)
        self.nkeys = keys
        self.rng = random.Random(seed * 1000 + cid)
        self.nrng = np.random.default_rng([seed, cid])
        weights = WEIGHTS[api.proto]
        self.kinds = list(weights)
        self.weights = list(weights.values())
        self.writes = 0
        # (start s, kind index, latency s, outcome: 0 ok, 1 overload, 2 error)
        self.records: list[tuple[float, int, float, int]] = []
        self.errors: Counter[tuple[str, str]] = Counter()
        self.error_samples: dict[tuple[str, str], str] = {}  # (kind, status) -> message
        self.checks = Checks()
        self.recall = [0.0, 0]  # summed recall, searches
        self.crash: str | None = None

    # -- plumbing

    def run(self) -> None:
        try:
            while not self.shared.stop.is_set() and time.perf_counter() < self.shared.deadline:
                kind = self.rng.choices(self.kinds, self.weights)[0]
                getattr(self, f"op_{kind}")()
        except Exception as e:  # a client bug: reported, the run fails
            import traceback

            self.crash = "".join(traceback.format_exception(e))[-3000:]

    def _record(self, kind: str, t_start: float, outcome: int) -> None:
        self.records.append((t_start - self.shared.t0, KINDS.index(kind), self.api.lat, outcome))

    def _do(self, kind: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Runs one request; (True, result) or (False, OpError)."""
        t = time.perf_counter()
        try:
            out = fn()
        except OpError as e:
            self._record(kind, t, 1 if e.overload else 2)
            if not e.overload:
                self.errors[(kind, e.status)] += 1
                self.error_samples.setdefault((kind, e.status), e.message)
            else:
                # The well-behaved client backs off a little (the server asks
                # for a second; the load is meant to stay high).
                time.sleep(self.rng.uniform(0.01, 0.05))
            return False, e
        self._record(kind, t, 0)
        return True, out

    def _own_keys(self, n: int) -> list[int]:
        return [self.model.lo + i for i in self.rng.sample(range(self.nkeys), n)]

    def _query(self) -> np.ndarray:
        return self.nrng.uniform(-1, 1, DIMS).astype(np.float32)

    # -- operations

    def op_upsert(self) -> None:
        n = self.rng.randint(1, 64)
        keys = self._own_keys(n)
        self.writes += 1
        rows = [
            Row(
                (k << 24) | (self.writes & 0xFFFFFF),
                self.rng.randrange(GROUPS),
                None if self.rng.random() < 0.1 else self.rng.choice(TAGS),
            )
            for k in keys
        ]
        vecs = vectors_of([r.seed for r in rows])
        payloads = [payload_of(self.cid, r) for r in rows]
        ok, out = self._do("upsert", lambda: self.api.upsert(keys, vecs, payloads))
        if ok:
            self.shared.last_write_ack = time.perf_counter()
            self.checks.check("upsert_acknowledged_rows", out == n, {"sent": n, "acked": out})
            for k, r in zip(keys, rows):
                self.model.apply(k, r)
        elif not out.definite:
            for k, r in zip(keys, rows):
                self.model.maybe(k, r)

    def op_delete(self) -> None:
        n = self.rng.randint(1, 16)
        live = list(self.model.live)
        keys = set(self.rng.sample(live, min(len(live), n // 2 + 1)))
        keys.update(self._own_keys(n - len(keys)) if n > len(keys) else [])
        keys_l = sorted(keys)
        ok, out = self._do("delete", lambda: self.api.delete(keys_l))
        if ok:
            self.shared.last_write_ack = time.perf_counter()
            if not any(k in self.model.uncertain for k in keys_l):
                want = sum(k in self.model.live for k in keys_l)
                self.checks.check(
                    "delete_count", out == want, {"keys": keys_l, "deleted": out, "model": want}
                )
        self._deleted(keys_l, ok, ok or out.definite)

    def _deleted(self, keys: list[int], acked: bool, definite: bool) -> None:
        """Enters a delete of ``keys`` into the model: done when acknowledged,
        either way when its outcome is unknown, not at all when refused."""
        for k in keys:
            if acked:
                self.model.apply(k, None)
            elif not definite:
                self.model.maybe(k, None)

    def op_delete_where(self) -> None:
        if self.model.uncertain or not isinstance(self.api, HttpApi):
            return self.op_delete()
        f = f_owner_grp_tag(self.cid, self.rng.randrange(GROUPS), self.rng.choice(TAGS))
        matched = [k for k, r in self.model.live.items() if f.pred(self.cid, r)]
        api = self.api
        ok, out = self._do("delete_where", lambda: api.delete_where(f))
        if ok:
            self.checks.check(
                "delete_where_count",
                out == len(matched),
                {"filter": f.expr, "deleted": out, "model": len(matched)},
            )
        self._deleted(matched, ok, ok or out.definite)

    def op_search(self) -> None:
        q = self._query()
        ok, hits = self._do("search", lambda: self.api.search(q, K, None, False))
        if ok:
            self._check_hits(q, hits, None, False)

    def op_search_filtered(self) -> None:
        q = self._query()
        r = self.rng.random()
        if r < 0.4:
            f = f_owner(self.cid)
        elif r < 0.7:
            f = f_grp(self.rng.randrange(GROUPS))
        else:
            f = f_grp_tag(sorted(self.rng.sample(range(GROUPS), 2)), self.rng.choice(TAGS))
        exact = f.own and self.rng.random() < 0.5
        ok, hits = self._do("search_filtered", lambda: self.api.search(q, K, f, exact))
        if ok:
            self._check_hits(q, hits, f, exact)

    def _check_hits(self, q: np.ndarray, hits: Hits, f: Filter | None, exact: bool) -> None:
        c, m = self.checks, self.model
        scores = [h[1] for h in hits]
        keys = [h[0] for h in hits]
        c.check("search_sorted", all(a <= b for a, b in zip(scores, scores[1:])), scores)
        c.check("search_unique_ids", len(set(keys)) == len(keys), keys)
        c.check("search_k", len(hits) <= K, len(hits))
        # Every version of a key has the owner of its range: a hit whose
        # payload says otherwise (an empty one included) is a torn or
        # foreign read. A hit without payload (None) is a row deleted
        # between the search and the read of its payload (HTTP leaves
        # `payload` out; over Flight all its columns are null, which an
        # empty row would look like too: HTTP tells the two apart).
        torn = [h for h in hits if h[2] is not None and h[2].get("owner") != h[0] // self.nkeys]
        c.check("search_hit_payload_owner", not torn, [type(self.api).__name__, *torn[:3]])
        for h in hits:
            if h[2] is None:
                # Counted (in the JSON's passed checks), not failed.
                c.check("search_hit_deleted_before_payload_read", True)
        mine = [h for h in hits if m.owns(h[0]) and h[0] not in m.uncertain]
        if f is not None and f.own:
            c.check("search_owner_filter_only_own_rows", all(m.owns(k) for k in keys), keys)
        if mine:
            live = [h for h in mine if h[0] in m.live]
            c.check(
                "search_hit_is_live",
                len(live) == len(mine),
                [h[0] for h in mine if h[0] not in m.live],
            )
            if live:
                rows = [m.live[h[0]] for h in live]
                d = l2(vectors_of([r.seed for r in rows]), q)
                got = np.asarray([h[1] for h in live])
                c.check(
                    "search_score_is_distance",
                    bool(np.allclose(got, d, rtol=1e-4, atol=1e-3)),
                    {"keys": [h[0] for h in live], "scores": got.tolist(), "model": d.tolist()},
                )
            if f is not None:
                c.check(
                    "search_hit_passes_filter",
                    all(f.pred(self.cid, r) for r in (m.live[h[0]] for h in live)),
                    {"filter": f.expr},
                )
            pay = [(h[0], h[2], payload_of(self.cid, m.live[h[0]])) for h in live]
            c.check(
                "search_hit_payload",
                all(p == want for _, p, want in pay),
                [x for x in pay if x[1] != x[2]][:3],
            )
        if f is not None and f.own and not m.uncertain:
            cand = [(k, r) for k, r in m.live.items() if f.pred(self.cid, r)]
            want_n = min(K, len(cand))
            if cand:
                d = l2(vectors_of([r.seed for _, r in cand]), q)
                order = np.argsort(d, kind="stable")[:want_n]
                truth = [cand[i][0] for i in order]
                if exact:
                    got = np.asarray(scores, dtype=np.float64)
                    good = len(hits) == want_n and bool(
                        np.allclose(got, d[order], rtol=1e-4, atol=1e-3)
                    )
                    c.check("exact_search_equals_brute_force", good, {"got": keys, "truth": truth})
                else:
                    self.recall[0] += len(set(keys) & set(truth)) / want_n
                    self.recall[1] += 1
            else:
                c.check("exact_search_equals_brute_force", not hits or not exact, keys)

    def _check_rows(self, name: str, keys: list[int], got: Rows) -> None:
        check_rows(self.checks, self.model, name, keys, got)

    def op_get(self) -> None:
        keys = self._own_keys(self.rng.randint(1, 64))
        ok, got = self._do("get", lambda: self.api.get(keys, self.cid))
        if ok:
            self.checks.check(
                "get_only_asked_keys", set(got) <= set(keys), sorted(set(got) - set(keys))
            )
            self._check_rows("get_row", keys, got)

    def op_scan(self) -> None:
        api = self.api
        assert isinstance(api, FlightApi)
        ok, got = self._do("scan", lambda: api.scan(f_owner(self.cid)))
        if ok:
            self.checks.check("scan_only_own_rows", all(self.model.owns(k) for k in got), None)
            own = range(self.model.lo, self.model.hi)
            self._check_rows(
                "scan_row",
                [k for k in own if k in got or k in self.model.live or k in self.model.uncertain],
                got,
            )

    def op_count(self) -> None:
        if isinstance(self.api, FlightApi):
            self._do("count", lambda: self.api.count(None))
            return
        r = self.rng.random()
        f = (
            None
            if r < 0.25
            else f_owner(self.cid)
            if r < 0.75
            else f_owner_grp(self.cid, self.rng.randrange(GROUPS))
        )
        ok, n = self._do("count", lambda: self.api.count(f))
        if ok and f is not None and not self.model.uncertain:
            want = sum(f.pred(self.cid, r) for r in self.model.live.values())
            self.checks.check(
                "count_own_rows", n == want, {"filter": f.expr, "count": n, "model": want}
            )


# ------------------------------------------------------------------ monitor


class Monitor(threading.Thread):
    """Every ``every`` seconds: the server's RSS, ``/health`` and (with
    ``index_poll``) the collection's index status, the load average. Stops
    the load (``shared.stop``) if the server dies, answers no HTTP request
    for ``hang_s``, or acknowledges no write for ``hang_s``."""

    def __init__(self, srv: Server, shared: Shared, every: float, index_poll: bool, hang_s: float):
        super().__init__(name="monitor", daemon=True)
        self.srv, self.shared, self.every = srv, shared, every
        self.index_poll, self.hang_s = index_poll, hang_s
        self.api = HttpApi(srv.http_addr, timeout=min(10.0, hang_s))
        self.samples: list[dict] = []
        self.done = threading.Event()
        self.died = False
        self.hang: str | None = None
        self.unanswered_since: float | None = None
        self.failures: Counter[str] = Counter()

    def sample(self) -> None:
        now = time.perf_counter()
        s: dict[str, Any] = {
            "t": round(now - self.shared.t0, 2),
            "rss_kib": self.srv.rss_kib(),
            "load1": (loadavg() or [None])[0],
        }
        try:
            self.api.call("GET", "/health")
            s["health_ms"] = round(self.api.lat * 1e3, 2)
            if self.index_poll:
                st = self.api.index_status()
                for k in ("segments", "active_vectors", "unindexed_vectors", "optimizer_task"):
                    s[k] = st.get(k)
                s["optimizer_errors"] = st.get("optimizer_errors")
                s["index_status_ms"] = round(self.api.lat * 1e3, 2)
            self.unanswered_since = None
        except OpError as e:
            self.failures[e.status] += 1
            s["error"] = e.status
            if self.unanswered_since is None:
                self.unanswered_since = now
        self.samples.append(s)

    def watchdog(self) -> None:
        now = time.perf_counter()
        if self.unanswered_since is not None and now - self.unanswered_since >= self.hang_s:
            self.hang = (
                f"the server answered no HTTP request for {now - self.unanswered_since:.0f} s "
                f"(from t = {self.unanswered_since - self.shared.t0:.0f} s)"
            )
        elif now - self.shared.last_write_ack >= self.hang_s:
            self.hang = (
                f"no write was acknowledged for {now - self.shared.last_write_ack:.0f} s "
                f"(the last at t = {self.shared.last_write_ack - self.shared.t0:.0f} s)"
            )
        if self.hang:
            self.shared.stop.set()

    def run(self) -> None:
        self.sample()
        while not self.done.wait(self.every):
            if not self.srv.alive():
                self.died = True
                self.shared.stop.set()
                return
            self.sample()
            self.watchdog()
            if self.hang:
                return
