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
