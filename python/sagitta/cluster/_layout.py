"""Pure helpers of the cluster: which shard a key belongs to, where the
replicas go, and the exact top-k merge of per-shard answers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

NO_KEY = np.iinfo(np.uint64).max


def shard_of(keys: np.ndarray, shards: int) -> np.ndarray:
    """The shard of each key: the splitmix64 finaliser of the key, modulo
    the shard count (keys that are sequential spread evenly)."""
    z = np.asarray(keys, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z % np.uint64(shards)).astype(np.int64)


def place(replicas: int, nodes: Sequence[str], load: Counter, avoid: Sequence[str] = ()) -> list:
    """``replicas`` distinct nodes for one shard, least loaded first (ties
    by node order), none in ``avoid``; fewer when there are not enough
    nodes. Updates ``load``."""
    free = [n for n in nodes if n not in avoid]
    free.sort(key=lambda n: (load[n], nodes.index(n)))
    out = free[:replicas]
    for n in out:
        load[n] += 1
    return out


def rebalance_moves(assignment: dict, nodes: Sequence[str]) -> list:
    """Moves ``(shard, from_node, to_node)`` that even out the replica
    count per node (within one), never putting two replicas of a shard on
    one node. ``assignment`` maps shard -> list of nodes holding it."""
    load = Counter({n: 0 for n in nodes})
    for held in assignment.values():
        for n in held:
            load[n] += 1
    held = {s: list(v) for s, v in assignment.items()}
    moves = []
    while True:
        hi = max(nodes, key=lambda n: (load[n], -nodes.index(n)))
        lo = min(nodes, key=lambda n: (load[n], nodes.index(n)))
        if load[hi] - load[lo] <= 1:
            return moves
        shard = next((s for s in sorted(held) if hi in held[s] and lo not in held[s]), None)
        if shard is None:
            return moves
        held[shard][held[shard].index(hi)] = lo
        load[hi] -= 1
        load[lo] += 1
        moves.append((shard, hi, lo))


def merge_topk(parts: Sequence[tuple], k: int) -> tuple:
    """Merges per-shard answers ``(keys (n, k_s), distances (n, k_s))`` into
    the ``k`` nearest per query, by distance then key (the order a local
    collection uses). Returns ``(keys, distances, source)`` where
    ``source[i, j] = (part, column)`` flattened as ``part * width + column``
    (``-1`` for empty slots), to pick payload rows."""
    n = parts[0][0].shape[0]
    if n == 1:
        return _merge_one(parts, k)
    keys = np.concatenate([p[0] for p in parts], axis=1)
    dists = np.concatenate([p[1] for p in parts], axis=1).astype(np.float32)
    width = max(p[0].shape[1] for p in parts)
    origin = np.concatenate(
        [
            np.broadcast_to(i * width + np.arange(p[0].shape[1]), p[0].shape)
            for i, p in enumerate(parts)
        ],
        axis=1,
    )
    # lexsort: last key is primary (distance), then key.
    order = np.lexsort((keys, dists), axis=1)[:, :k]
    rows = np.arange(n)[:, None]
    out_k = keys[rows, order]
    out_d = dists[rows, order]
    src = origin[rows, order].astype(np.int64)
    empty = out_k == NO_KEY
    src[empty] = -1
    out_d[empty] = np.inf
    if out_k.shape[1] < k:
        pad = k - out_k.shape[1]
        out_k = np.pad(out_k, ((0, 0), (0, pad)), constant_values=NO_KEY)
        out_d = np.pad(out_d, ((0, 0), (0, pad)), constant_values=np.inf)
        src = np.pad(src, ((0, 0), (0, pad)), constant_values=-1)
    return out_k, out_d, src


def _merge_one(parts: Sequence[tuple], k: int) -> tuple:
    """:func:`merge_topk` of one query, in plain Python: the same order
    (distance, then key, then position) without numpy's per-call cost,
    which is most of a merge of a few dozen entries."""
    width = max(p[0].shape[1] for p in parts)
    cand = []
    for i, (pk, pd) in enumerate(parts):
        dl = np.asarray(pd, dtype=np.float32)[0].tolist()
        for j, key in enumerate(pk[0].tolist()):
            cand.append((dl[j], key, i * width + j))
    cand.sort()
    top = cand[:k]
    out_k = np.full((1, k), NO_KEY, dtype=np.uint64)
    out_d = np.full((1, k), np.inf, dtype=np.float32)
    src = np.full((1, k), -1, dtype=np.int64)
    for j, (d, key, o) in enumerate(top):
        if key != NO_KEY:
            out_k[0, j], out_d[0, j], src[0, j] = key, d, o
    return out_k, out_d, src
