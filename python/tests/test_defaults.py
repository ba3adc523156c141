"""The default storage of float HNSW indexes and collections: sq8 codes for
graph traversal, float32 rows kept for an exact rerank. Checked against a
numpy brute force (the oracle)."""

import numpy as np
import pytest
from conftest import brute_force

import sagitta


@pytest.mark.parametrize("metric", ["l2", "ip", "cos"])
def test_default_index_reranks_to_exact_float32(rng, metric):
    base = rng.standard_normal((4000, 32)).astype(np.float32)
    queries = rng.standard_normal((100, 32)).astype(np.float32)
    if metric == "ip":
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = sagitta.Index(32, metric=metric, expansion_search=64)
    assert (index.dtype, index.keep_full) == ("sq8", True)
    index.add(np.arange(len(base)), base)
    want_keys, want_dist = brute_force(base, queries, metric, 10)
    res = index.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(res.keys, want_keys)])
    assert recall >= 0.95
    # Distances are the exact float32 ones wherever the key is right.
    hit = res.keys == want_keys
    np.testing.assert_allclose(res.distances[hit], want_dist[hit], rtol=1e-4, atol=1e-4)
    # exact=True reads only the float32 rows: the oracle's answer.
    ex = index.search(queries, 10, exact=True)
    np.testing.assert_allclose(ex.distances, want_dist, rtol=1e-4, atol=1e-4)
    # get returns the kept float32 row as given (cosine included), not the codes.
    np.testing.assert_array_equal(index.get(7), base[7])


def test_default_index_survives_save_and_open(tmp_path, rng):
    base = rng.standard_normal((1500, 16)).astype(np.float32)
    index = sagitta.Index(16, metric="l2")
    index.add(np.arange(len(base)), base)
    index.save(tmp_path / "i.sgt")
    opened = sagitta.Index.open(tmp_path / "i.sgt")
    assert (opened.dtype, opened.keep_full) == ("sq8", True)
    np.testing.assert_array_equal(opened.get(42), base[42])
    q = base[:20] + 0.01
    a, b = index.search(q, 5), opened.search(q, 5)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_allclose(a.distances, b.distances, rtol=1e-6)


def test_explicit_dtype_or_keep_full_false_keeps_float32():
    assert (sagitta.Index(8).dtype, sagitta.Index(8, dtype="f32").dtype) == ("sq8", "f32")
    assert sagitta.Index(8, keep_full=False).dtype == "f32"
    assert sagitta.Index(8, kind="flat").dtype == "f32"
    assert sagitta.Index(64, metric="hamming").dtype == "b1"


def test_default_collection_has_graph_codes_and_float32_vectors(tmp_path, rng):
    base = rng.standard_normal((2000, 16)).astype(np.float32)
    c = sagitta.Collection.create(tmp_path / "c", ndim=16, metric="l2")
    assert (c.dtype, c.codes) == ("f32", "sq8")
    c.add(np.arange(len(base)), base)
    c.optimize()
    np.testing.assert_array_equal(c.get(1234), base[1234])
    q = rng.standard_normal((30, 16)).astype(np.float32)
    want_keys, want_dist = brute_force(base, q, "l2", 10)
    res = c.search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(res.keys, want_keys)])
    assert recall >= 0.95
    hit = res.keys == want_keys
    np.testing.assert_allclose(res.distances[hit], want_dist[hit], rtol=1e-4, atol=1e-4)
    c.close()
    # dtype names the vectors' storage, not the graph's: f32 spelled out
    # gets the same codes as the default (the server does the same).
    spelled = sagitta.Collection.create(tmp_path / "s", ndim=16, dtype="f32")
    assert (spelled.dtype, spelled.codes) == ("f32", "sq8")
    plain = sagitta.Collection.create(tmp_path / "p", ndim=16, dtype="f32", codes="none")
    assert plain.codes is None
    assert sagitta.Collection.create(tmp_path / "h16", ndim=16, dtype="f16").codes is None
    f16 = sagitta.Collection.create(tmp_path / "h", ndim=16, codes="f16")
    assert f16.codes == "f16"
    with pytest.raises(ValueError, match="codes"):
        sagitta.Collection.create(tmp_path / "x", ndim=16, codes="bogus")
