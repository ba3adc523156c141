"""The workload of the mixed load: its constants, the rows and vectors a
client writes, payload filters, and each client's exact model of its key
range (what the server must return)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[3]  # sagitta_bench/mixed_load/ in bench/
COLLECTION = "mixed"
DIMS = 64
K = 10
GROUPS = 8
TAGS = ("alpha", "beta", "gamma", "delta", "épsilon", "数据")
KINDS = ("upsert", "delete", "delete_where", "search", "search_filtered", "get", "count", "scan")
# Relative weights of the operations per protocol (delete_where is HTTP
# only, scan Flight only).
WEIGHTS = {
    "http": {
        "upsert": 30,
        "delete": 8,
        "delete_where": 1,
        "search": 18,
        "search_filtered": 18,
        "get": 13,
        "count": 12,
    },
    "flight": {
        "upsert": 30,
        "delete": 9,
        "search": 18,
        "search_filtered": 18,
        "get": 12,
        "count": 10,
        "scan": 3,
    },
}
RECALL_EF = 256  # the final check's recall is also taken at this beam width
SEED_KEY = 1 << 40  # the key of the row that declares the payload columns
SEED_ROW = {"owner": -1, "grp": 0, "tag": "alpha"}
MAX_SAMPLES = 20  # error and mismatch messages kept per run


# ------------------------------------------------------------------ vectors


def vectors_of(seeds: Any) -> np.ndarray:
    """The vectors of ``seeds`` (one uint64 each), ``(n, DIMS)`` float32:
    splitmix64 of ``seed * DIMS + j``, its top 24 bits mapped onto [-1, 1)
    (exact in float32, so they survive JSON both ways bit for bit)."""
    s = np.asarray(seeds, dtype=np.uint64).reshape(-1, 1)
    with np.errstate(over="ignore"):
        x = s * np.uint64(DIMS) + np.arange(DIMS, dtype=np.uint64)
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    bits = (x >> np.uint64(40)).astype(np.float32)
    return bits * np.float32(2.0 / (1 << 24)) - np.float32(1.0)


def l2(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Squared L2 distances of the rows of ``x`` to ``q`` (float64)."""
    d = x.astype(np.float64) - q.astype(np.float64)
    return np.einsum("ij,ij->i", d, d)


# -------------------------------------------------------------------- model


class Row(NamedTuple):
    """A written row: the vector's seed and the payload (``owner`` is the
    client owning the key)."""

    seed: int
    grp: int
    tag: str | None


def payload_of(owner: int, row: Row) -> dict:
    """The payload as the server answers it (null columns left out)."""
    p: dict[str, Any] = {"owner": owner, "grp": row.grp}
    if row.tag is not None:
        p["tag"] = row.tag
    return p


class Model:
    """One client's view of its key range ``[lo, hi)``: the live rows, and
    for keys whose last write's outcome is unknown, every state they may be
    in (``None``: absent)."""

    def __init__(self, owner: int, lo: int, hi: int):
        self.owner, self.lo, self.hi = owner, lo, hi
        self.live: dict[int, Row] = {}
        self.uncertain: dict[int, list[Row | None]] = {}
        # Writes of unknown outcome since the key's last acknowledged one: a
        # read settles the key for now, but such a write may still be
        # applied later (stuck in a hung server, or replayed from the WAL
        # after a restart).
        self.unacked: dict[int, list[Row | None]] = {}

    def owns(self, key: int) -> bool:
        return self.lo <= key < self.hi

    def possible(self, key: int) -> list[Row | None]:
        return self.uncertain.get(key) or [self.live.get(key)]

    def apply(self, key: int, row: Row | None, acked: bool = True) -> None:
        """An acknowledged write (or, ``acked`` false, a read that settled
        the key)."""
        self.uncertain.pop(key, None)
        if acked:
            self.unacked.pop(key, None)
        if row is None:
            self.live.pop(key, None)
        else:
            self.live[key] = row

    def maybe(self, key: int, row: Row | None, new: bool = True) -> None:
        """A write whose outcome is unknown (``new``: just failed)."""
        states = self.possible(key)
        if row not in states:
            self.uncertain[key] = [*states, row]
        if new:
            self.unacked.setdefault(key, []).append(row)

    def reopen(self) -> None:
        """After a restart: every write of unknown outcome since the key's
        last acknowledged one may have been applied (replayed) or not."""
        for key, rows in self.unacked.items():
            for row in rows:
                self.maybe(key, row, new=False)

    def settle(self, key: int, found: Row | None) -> bool:
        """What a read found for ``key``: true when it is a state the key
        may be in (an uncertain key is then settled)."""
        if found not in self.possible(key):
            return False
        if key in self.uncertain:
            self.apply(key, found, acked=False)
        return True


@dataclass(frozen=True)
class Filter:
    """A payload filter: its JSON and the same predicate in Python."""

    name: str
    expr: Any
    pred: Callable[[int, Row], bool]
    own: bool = False  # only the filtering client's rows can match


def f_owner(c: int) -> Filter:
    return Filter("owner", {"field": "owner", "op": "eq", "value": c}, lambda o, r: o == c, True)


def f_grp(g: int) -> Filter:
    return Filter("grp", {"field": "grp", "op": "eq", "value": g}, lambda o, r: r.grp == g)


def f_grp_tag(gs: list[int], t: str) -> Filter:
    expr = {
        "and": [
            {"field": "grp", "op": "in", "value": gs},
            {"field": "tag", "op": "eq", "value": t},
        ]
    }
    return Filter("grp_in_and_tag", expr, lambda o, r: r.grp in gs and r.tag == t)


def f_owner_grp(c: int, g: int) -> Filter:
    expr = {
        "and": [
            {"field": "owner", "op": "eq", "value": c},
            {"field": "grp", "op": "eq", "value": g},
        ]
    }
    return Filter("owner_and_grp", expr, lambda o, r: o == c and r.grp == g, True)


def f_owner_grp_tag(c: int, g: int, t: str) -> Filter:
    expr = {
        "and": [
            {"field": "owner", "op": "eq", "value": c},
            {"field": "grp", "op": "eq", "value": g},
            {"field": "tag", "op": "eq", "value": t},
        ]
    }
    return Filter(
        "owner_and_grp_and_tag", expr, lambda o, r: o == c and r.grp == g and r.tag == t, True
    )


Hits = list[tuple[int, float, "dict | None"]]
Rows = dict[int, tuple[np.ndarray, dict]]
