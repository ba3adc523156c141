"""Search results equal a numpy brute force (the oracle) on small data."""

import numpy as np
import pytest
from conftest import brute_force, hamming_brute_force, nphd

import sagitta


@pytest.mark.parametrize("metric", ["l2", "ip", "cos"])
@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_f32_exact_matches_brute_force(rng, metric, kind):
    base = rng.standard_normal((2000, 24)).astype(np.float32)
    queries = rng.standard_normal((50, 24)).astype(np.float32)
    if metric == "ip":
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = sagitta.Index(24, metric=metric, kind=kind)
    index.add(np.arange(len(base)), base)
    want_keys, want_dist = brute_force(base, queries, metric, 10)
    res = index.search(queries, 10, exact=True)
    assert res.keys.shape == (50, 10)
    assert res.keys.dtype == np.uint64
    assert res.distances.dtype == np.float32
    np.testing.assert_allclose(res.distances, want_dist, rtol=1e-4, atol=1e-4)
    # Keys agree wherever the distance is not tied with a neighbour.
    agree = (res.keys == want_keys).mean()
    assert agree > 0.99
    assert (res.counts == 10).all()


@pytest.mark.parametrize("metric", ["l2", "cos"])
def test_hnsw_recall_against_flat(rng, metric):
    base = rng.standard_normal((5000, 32)).astype(np.float32)
    queries = rng.standard_normal((200, 32)).astype(np.float32)
    flat = sagitta.Index(32, metric=metric, kind="flat")
    hnsw = sagitta.Index(32, metric=metric, expansion_search=128)
    keys = np.arange(len(base), dtype=np.uint64)
    flat.add(keys, base)
    hnsw.add(keys, base)
    truth = flat.search(queries, 10).keys
    got = hnsw.search(queries, 10).keys
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)])
    assert recall >= 0.95, recall


def test_f16_and_i8_match_brute_force_on_stored_values(rng):
    base = rng.standard_normal((1000, 16)).astype(np.float32)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    f16 = sagitta.Index(16, metric="l2", dtype="f16", kind="flat")
    f16.add(np.arange(1000), base)
    stored = base.astype(np.float16).astype(np.float32)
    _, want_dist = brute_force(stored, queries.astype(np.float16), "l2", 5)
    res = f16.search(queries, 5)
    np.testing.assert_allclose(res.distances, want_dist, rtol=2e-3, atol=2e-3)
    assert f16.get(7).dtype == np.float16
    np.testing.assert_array_equal(f16.get(7), base[7].astype(np.float16))

    ints = rng.integers(-100, 100, size=(1000, 16)).astype(np.int8)
    qi = rng.integers(-100, 100, size=(20, 16)).astype(np.int8)
    i8 = sagitta.Index(16, metric="l2", dtype="i8", kind="flat")
    i8.add(np.arange(1000), ints)
    _, want_dist = brute_force(ints, qi, "l2", 5)
    res = i8.search(qi, 5)
    np.testing.assert_array_equal(res.distances, want_dist.astype(np.float32))
    np.testing.assert_array_equal(i8.get(3), ints[3])


def test_hamming_matches_brute_force(rng):
    base = rng.integers(0, 256, size=(3000, 32), dtype=np.uint8)
    queries = rng.integers(0, 256, size=(30, 32), dtype=np.uint8)
    index = sagitta.Index(256, metric="hamming", kind="flat")
    assert index.dtype == "b1"
    index.add(np.arange(3000), base)
    want_keys, want_dist = hamming_brute_force(base, queries, 10)
    res = index.search(queries, 10)
    np.testing.assert_array_equal(res.distances, want_dist.astype(np.float32))
    np.testing.assert_array_equal(res.keys, want_keys)
    np.testing.assert_array_equal(index.get(5), base[5])
    # bool arrays of unpacked bits are packed on the way in
    bits = np.unpackbits(queries, axis=1).astype(bool)
    np.testing.assert_array_equal(index.search(bits, 10).keys, res.keys)
    # HNSW over the same codes at a wide beam finds the same distances
    hnsw = sagitta.Index(256, metric="hamming", expansion_search=256)
    hnsw.add(np.arange(3000), base)
    hres = hnsw.search(queries, 10)
    assert (hres.distances <= want_dist[:, -1:]).mean() > 0.97


def test_nphd_variable_length_codes(rng):
    lengths = rng.integers(1, 33, size=400)
    codes = [bytes(rng.integers(0, 256, size=n, dtype=np.uint8)) for n in lengths]
    index = sagitta.Index(256, metric="nphd", kind="flat")
    index.add(np.arange(len(codes)), codes)
    query = codes[17][:8]
    res = index.search(query, 5)
    want = sorted((nphd(query, c), i) for i, c in enumerate(codes))[:5]
    np.testing.assert_allclose(res.distances, [d for d, _ in want], rtol=1e-6)
    assert res.keys[0] == 17
    assert index.get(17) == codes[17]
    assert index.get([3, 10_000]) == [codes[3], None]
