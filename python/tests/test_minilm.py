"""Recall on real data: debian-minilm (100k x 384 sentence embeddings)."""

import numpy as np
import pytest
from conftest import data_dir

import sagitta


@pytest.fixture(scope="module")
def minilm():
    d = data_dir()
    assert (d / "base.f16.npy").exists(), f"debian-minilm not found at {d} (set SAGITTA_DATA)"
    base = np.load(d / "base.f16.npy")
    queries = np.load(d / "queries.f16.npy")
    gt = np.load(d / "gt.i32.npy")[:, :10]
    return base, queries, gt


def recall_at_10(keys: np.ndarray, gt: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(keys.astype(np.int64), gt)]))


def test_hnsw_recall_and_saved_file(minilm, tmp_path):
    base, queries, gt = minilm
    index = sagitta.Index(384, metric="cos")
    index.add(np.arange(len(base)), base)  # float16 input, converted once
    assert len(index) == 100_000
    res = index.search(queries, 10)
    recall = recall_at_10(res.keys, gt)
    print(f"debian-minilm HNSW M16 efc128 ef64 recall@10 = {recall:.4f}")
    assert recall >= 0.95

    path = tmp_path / "minilm.sgt"
    index.save(path)
    opened = sagitta.Index.open(path)
    res2 = opened.search(queries, 10)
    np.testing.assert_array_equal(res2.keys, res.keys)

    # exact search through the file agrees with the shipped ground truth
    exact = opened.search(queries[:100], 10, exact=True)
    assert recall_at_10(exact.keys, gt[:100]) >= 0.999


@pytest.mark.parametrize("bits", [1, 4])
def test_minilm_ivf(minilm, bits):
    """IVF-RaBitQ over the real embeddings, default partitioning (about
    4096 vectors per partition), recall against the shipped ground truth."""
    base, queries, gt = minilm
    index = sagitta.Index(384, metric="cos", kind="ivf_rq", bits=bits)
    index.add(np.arange(len(base)), base)
    assert index.partitions == 24
    # With 24 partitions the coarse stage dominates: probing half of them
    # finds about 0.96-0.97 of the true neighbours whatever the bits.
    res = index.search(queries, 10, nprobe=12, refine=50)
    recall = recall_at_10(res.keys, gt)
    print(
        f"debian-minilm IVF-RaBitQ {bits} bit(s), 24 partitions, nprobe 12, refine 50: {recall:.4f}"
    )
    assert recall >= 0.94


def test_filtered_collection_recall_at_every_selectivity(minilm, tmp_path):
    """A Collection at default settings with payload: recall@10 against the
    exact filtered top-10 at about 0.1%, 1%, 10% and 50% selectivity."""
    base, queries, _ = minilm
    base = base.astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    qs = queries[:200].astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    rng = np.random.default_rng(3)
    year = 1995 + rng.integers(0, 30, len(base))
    score = rng.random(len(base))
    c = sagitta.Collection.create(tmp_path / "c", ndim=384, metric="cos")
    for s in range(0, len(base), 25_000):
        e = s + 25_000
        c.upsert(np.arange(s, e), base[s:e], payload={"year": year[s:e], "score": score[s:e]})
    assert c.stats()["segments"] >= 2
    cases = [
        ({"field": "score", "op": "lt", "value": 0.001}, score < 0.001),
        (
            [
                {"field": "year", "op": ">=", "value": 2022},
                {"field": "score", "op": "<", "value": 0.1},
            ],
            (year >= 2022) & (score < 0.1),
        ),
        ({"field": "year", "op": "ge", "value": 2022}, year >= 2022),
        ({"field": "year", "op": "ge", "value": 2010}, year >= 2010),
    ]
    for where, mask in cases:
        rows = np.flatnonzero(mask)
        sims = qs @ base[rows].T
        gt = rows[np.argsort(-sims, axis=1, kind="stable")[:, :10]]
        res = c.search(qs, 10, where=where)
        assert (res.counts == 10).all(), where
        recall = recall_at_10(res.keys, gt)
        print(f"filtered {mask.mean():.4f}: recall@10 = {recall:.4f}")
        assert recall >= 0.95, (where, recall)
