"""The cluster's pure functions, without Ray: key -> shard, placement,
rebalance moves and the exact top-k merge."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from sagitta.cluster._layout import NO_KEY, merge_topk, place, rebalance_moves, shard_of


def test_shard_of_is_stable_in_range_and_even():
    keys = np.arange(30_000, dtype=np.uint64)
    a = shard_of(keys, 7)
    assert (a == shard_of(keys, 7)).all()
    assert a.min() >= 0 and a.max() < 7
    counts = np.bincount(a, minlength=7)
    assert (np.abs(counts - 30_000 / 7) < 0.05 * 30_000 / 7).all(), counts
    # Keys near 2^64 too.
    big = np.array([2**64 - 2, 2**63, 2**63 + 1], dtype=np.uint64)
    assert ((shard_of(big, 3) >= 0) & (shard_of(big, 3) < 3)).all()


def test_place_picks_distinct_least_loaded_nodes():
    load = Counter({"a": 2, "b": 0, "c": 1})
    got = place(2, ["a", "b", "c"], load)
    assert got == ["b", "c"]
    assert load == Counter({"a": 2, "b": 1, "c": 2})
    assert place(2, ["a", "b", "c"], Counter(), avoid=["b"]) == ["a", "c"]
    assert place(3, ["a", "b"], Counter()) == ["a", "b"]  # not enough nodes
    assert place(1, ["a"], Counter(), avoid=["a"]) == []


@pytest.mark.parametrize("shards,replicas,nodes", [(3, 2, 3), (8, 3, 5), (5, 2, 2)])
def test_rebalance_evens_out_a_new_node(shards, replicas, nodes):
    names = [f"n{i}" for i in range(nodes)]
    load: Counter = Counter()
    assignment = {s: place(replicas, names, load) for s in range(shards)}
    names.append("new")
    moves = rebalance_moves(assignment, names)
    held = {s: list(v) for s, v in assignment.items()}
    for s, src, dst in moves:
        assert src in held[s] and dst not in held[s]
        held[s][held[s].index(src)] = dst
    per = Counter(n for v in held.values() for n in v)
    counts = [per[n] for n in names]
    assert max(counts) - min(counts) <= 1, per
    for v in held.values():
        assert len(set(v)) == len(v)
    assert all(dst == "new" for _, _, dst in moves)
    assert rebalance_moves(held, names) == []  # balanced: nothing to do


def test_merge_topk_equals_a_sort_of_everything():
    rng = np.random.default_rng(0)
    n, k = 20, 10
    parts = []
    for width in (10, 4, 10):  # a shard with fewer rows than k
        keys = rng.choice(10_000, size=(n, width), replace=False).astype(np.uint64)
        d = rng.random((n, width)).astype(np.float32)
        d[:, 1] = d[:, 0]  # exact ties: broken by key
        parts.append((keys, d))
    out_k, out_d, src = merge_topk(parts, k)
    allk = np.concatenate([p[0] for p in parts], axis=1)
    alld = np.concatenate([p[1] for p in parts], axis=1)
    for i in range(n):
        want = sorted(zip(alld[i].tolist(), allk[i].tolist()))[:k]
        assert list(zip(out_d[i].tolist(), out_k[i].tolist())) == want
        for j in range(k):
            part, col = divmod(int(src[i, j]), 10)
            assert parts[part][0][i, col] == out_k[i, j]


def test_merge_topk_pads_when_fewer_rows_than_k():
    parts = [
        (np.array([[5, NO_KEY]], dtype=np.uint64), np.array([[0.5, np.inf]], dtype=np.float32)),
        (np.array([[7]], dtype=np.uint64), np.array([[0.1]], dtype=np.float32)),
    ]
    k_, d_, src = merge_topk(parts, 4)
    assert k_.tolist() == [[7, 5, NO_KEY, NO_KEY]]
    assert d_[0, :2].tolist() == pytest.approx([0.1, 0.5])
    assert np.isinf(d_[0, 2:]).all()
    assert src[0, 2:].tolist() == [-1, -1]


def test_merge_of_one_query_equals_the_batch_merge():
    """A single query is merged in plain Python: row for row the batch
    merge's answer (ties, empty slots, shards narrower than k)."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        parts = []
        for width in rng.integers(1, 12, size=3):
            keys = rng.choice(50, size=(4, width), replace=False).astype(np.uint64)
            d = rng.integers(0, 4, size=(4, width)).astype(np.float32)  # many ties
            empty = rng.random((4, width)) < 0.2
            keys[empty], d[empty] = NO_KEY, np.inf
            parts.append((keys, d))
        k = int(rng.integers(1, 15))
        batch = merge_topk(parts, k)
        for i in range(4):
            one = merge_topk([(p[0][i : i + 1], p[1][i : i + 1]) for p in parts], k)
            for got, want in zip(one, batch):
                np.testing.assert_array_equal(got[0], want[i])
