"""The recorded history of a cluster run and the rows its clients write.

An :class:`Op` is one client call as a Jepsen history holds it: who made
it (``process``), what it was (``kind``: ``upsert``, ``remove``, ``get``,
``search``, ``count``), on which keys, what it wrote or saw, when it was
invoked and when it completed (``time.monotonic_ns``), and its outcome:

- ``ok``: acknowledged (a write) or answered (a read);
- ``fail``: definitely not applied (refused before anything was sent);
- ``info``: unknown (a timeout, a lost node, any error after the request
  left): a write may take effect at any time after its invocation, or
  never; a read that ends so tells nothing.

Every key is a register. An upsert writes a *version* (a number unique
over the whole run) per key, in the payload column ``v``, with the
vector :func:`vector` of ``(key, version)``; a remove writes "absent"
(``None``). The vectors make an exact search's answer unambiguous: key
``k`` sits on axis ``k`` at distance :data:`SCALE` from the origin, and
its version is an angle on two more axes, so any version of the query's
key is at squared distance <= 4 from the query and every other key at
>= 2 * SCALE**2 (200). The nearest hit is the query's key whenever it
is present, in whatever version.

Pure Python and numpy: no Ray, so the checker and its tests run
anywhere.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("upsert", "remove", "get", "search", "count")
OUTCOMES = ("ok", "fail", "info")
WRITES = ("upsert", "remove")

# Distance of every key's axis from the origin.
SCALE = 10.0
# Radians between consecutive versions on the version circle (the golden
# angle: nearby versions land far apart).
STEP = math.pi * (3.0 - math.sqrt(5.0))


@dataclass
class Op:
    """One client call. ``values``: for an upsert the version written per
    key; for a get the version seen per key (``None``: absent). ``query``
    and ``k``: a search's query row ``(key, version)`` and its k;
    ``hits``: its answer, ``[key, version, distance]`` nearest first.
    ``count``: a count's answer. ``torn``: keys a get returned with a
    vector that is not the one its version was written with. ``final``:
    a read made after the run healed (the lost-write check)."""

    id: int
    process: int
    kind: str
    keys: list
    invoke: int
    complete: int | None = None
    outcome: str = "info"
    values: list | None = None
    query: list | None = None
    k: int = 0
    hits: list | None = None
    count: int | None = None
    torn: list = field(default_factory=list)
    error: str | None = None
    final: bool = False

    def to_dict(self) -> dict:
        """The op as JSON-ready fields, empty ones left out."""
        keep = ("id", "process", "kind", "keys", "invoke", "outcome")
        return {k: v for k, v in asdict(self).items() if k in keep or v not in (None, [], False)}

    @classmethod
    def from_dict(cls, d: dict) -> Op:
        return cls(**d)

    @property
    def is_write(self) -> bool:
        return self.kind in WRITES

    def written(self, key: int) -> int | None:
        """The value this write gives ``key`` (None: removed)."""
        if self.kind == "remove":
            return None
        return self.values[self.keys.index(key)]


def angle(version: int) -> float:
    return (version * STEP) % (2.0 * math.pi)


def vector(key: int, version: int, nkeys: int) -> np.ndarray:
    """The row written for ``key`` at ``version``: ``nkeys + 2`` floats."""
    v = np.zeros(nkeys + 2, dtype=np.float32)
    v[key] = SCALE
    a = angle(version)
    v[nkeys] = math.cos(a)
    v[nkeys + 1] = math.sin(a)
    return v


def vectors(keys: list, versions: list, nkeys: int) -> np.ndarray:
    return np.stack([vector(k, v, nkeys) for k, v in zip(keys, versions)])


def distance(qkey: int, qversion: int, key: int, version: int) -> float:
    """Squared L2 distance between the rows of ``(qkey, qversion)`` and
    ``(key, version)`` (what an ``l2`` collection reports)."""
    a, b = angle(qversion), angle(version)
    d = (math.cos(a) - math.cos(b)) ** 2 + (math.sin(a) - math.sin(b)) ** 2
    return d if qkey == key else d + 2.0 * SCALE * SCALE


def row_matches(row: Any, key: int, version: int, nkeys: int) -> bool:
    """Whether ``row`` is exactly the row written for ``(key, version)``
    (float32 as stored)."""
    return bool(np.array_equal(np.asarray(row, dtype=np.float32), vector(key, version, nkeys)))


def save(path: Path, ops: list, meta: dict | None = None) -> None:
    """Writes a history as gzipped JSON lines: a header line (``meta``),
    then one op per line."""
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"meta": meta or {}}) + "\n")
        for op in ops:
            f.write(json.dumps(op.to_dict()) + "\n")


def load(path: Path) -> tuple:
    """``(ops, meta)`` of a history written by :func:`save`."""
    ops, meta = [], {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            d = json.loads(line)
            if "meta" in d:
                meta = d["meta"]
            else:
                ops.append(Op.from_dict(d))
    return ops, meta
