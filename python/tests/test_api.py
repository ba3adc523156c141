"""Input forms, result shapes and the mapping-like methods."""

import numpy as np
import pytest
from conftest import brute_force

import sagitta


def test_module_surface():
    assert sagitta.isa() in {"avx512", "avx2", "neon", "scalar"}
    assert sagitta.NO_KEY == 2**64 - 1
    assert issubclass(sagitta.CorruptFileError, OSError)
    assert sagitta.__version__
    for name in sagitta.__all__:
        obj = getattr(sagitta, name)
        if callable(obj):
            assert obj.__doc__, name
    for name in dir(sagitta.Index):
        if not name.startswith("_"):
            assert getattr(sagitta.Index, name).__doc__, name


def test_limits_are_the_ones_the_store_enforces(tmp_path, rng):
    lim = sagitta.LIMITS
    assert set(lim) == {"k", "beam", "depth", "batch_queries", "min_segment_size"}
    small = lim["min_segment_size"]
    with pytest.raises(ValueError, match=f"at least {small}"):
        sagitta.Collection.create(tmp_path / "s", ndim=4, segment_size=small - 1)
    sagitta.Collection.create(tmp_path / "s", ndim=4, segment_size=small).close()
    c = sagitta.Collection.create(tmp_path / "c", ndim=4)
    c.upsert(np.arange(3), rng.random((3, 4), dtype=np.float32))
    q = np.ones(4, np.float32)
    assert (c.search(q, lim["k"]).keys != sagitta.NO_KEY).sum() == 3
    with pytest.raises(ValueError, match="k"):
        c.search(q, lim["k"] + 1)
    c.search(q, 2, expansion=lim["beam"])
    with pytest.raises(ValueError, match="ef"):
        c.search(q, 2, expansion=lim["beam"] + 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int8])
def test_any_numeric_dtype_is_converted(rng, dtype):
    base = (rng.standard_normal((300, 12)) * 10).astype(dtype)
    index = sagitta.Index(12, metric="l2", kind="flat")
    index.add(np.arange(300), base)
    want, _ = brute_force(base.astype(np.float32), base[:5].astype(np.float32), "l2", 1)
    np.testing.assert_array_equal(index.search(base[:5], 1).keys[:, 0], want[:, 0])


def test_lists_and_non_contiguous_arrays(rng):
    big = rng.standard_normal((200, 24)).astype(np.float32)
    strided = big[::2, ::2]  # (100, 12), not contiguous
    index = sagitta.Index(12, metric="l2", kind="flat")
    index.add(list(range(100)), strided)
    np.testing.assert_array_equal(index.get(10), strided[10])
    res = index.search(strided[3].tolist(), 1)
    assert res.keys[0] == 3 and res.distances[0] == 0.0
    # keys in many integer forms
    index.add(np.uint32(500), strided[0] + 1)
    index.add(np.array([501, 502], dtype=np.int16), strided[:2] + 2)
    assert index.contains([500, 501, 502]).all()


def test_single_and_batch_shapes(rng):
    base = rng.standard_normal((50, 4)).astype(np.float32)
    index = sagitta.Index(4, metric="l2", kind="flat")
    index.add(np.arange(50), base)
    one = index.search(base[0], 3)
    assert one.keys.shape == (3,) and one.distances.shape == (3,)
    assert one.counts == 3
    batch = index.search(base[:1], 3)
    assert batch.keys.shape == (1, 3) and batch.counts.shape == (1,)
    keys, distances = index.search(base[:7], 2)
    assert keys.shape == (7, 2) and distances.shape == (7, 2)
    np.testing.assert_array_equal(keys[:, 0], np.arange(7))
    empty = index.search(np.zeros((0, 4), dtype=np.float32), 3)
    assert empty.keys.shape == (0, 3)
    assert "SearchResult" in repr(one) and "Index(" in repr(index)


def test_filter_radius_and_missing_slots(rng):
    base = rng.standard_normal((1000, 8)).astype(np.float32)
    index = sagitta.Index(8, metric="l2")
    index.add(np.arange(1000), base)
    allowed = np.array([5, 17, 900, 123456])  # one key that does not exist
    res = index.search(base[:4], 5, filter=allowed)
    assert (res.counts == 3).all()
    assert set(res.keys[0, :3]) == {5, 17, 900}
    assert (res.keys[:, 3:] == sagitta.NO_KEY).all()
    assert np.isinf(res.distances[:, 3:]).all()
    assert (res.keys.astype(np.int64)[:, 3:] == -1).all()
    # filtered results are the exact filtered top-k
    sub = np.arange(0, 1000, 10)
    res = index.search(base[:20], 5, filter=sub)
    want, _ = brute_force(base[sub], base[:20], "l2", 5)
    np.testing.assert_array_equal(res.keys, sub[want])

    res = index.search(base[:3], 10, radius=0.0)
    np.testing.assert_array_equal(res.counts, [1, 1, 1])
    np.testing.assert_array_equal(res.keys[:, 0], [0, 1, 2])
    full = index.search(base[:3], 10)
    r = float(full.distances[0, 4])
    within = index.search(base[0], 10, radius=r)
    assert within.counts == 5
    assert (within.distances[:5] <= r).all()


def test_get_contains_remove_len(rng):
    base = rng.standard_normal((20, 6)).astype(np.float32)
    index = sagitta.Index(6, metric="cos")
    index.add(np.arange(20) * 3, base)
    assert len(index) == 20
    got = index.get(9)
    # As given, not its unit vector (cosine included).
    np.testing.assert_array_equal(got, base[3])
    assert index.get(10) is None
    rows = index.get(np.array([0, 1, 3]))
    assert rows[1] is None and rows[0].shape == (6,)
    assert 3 in index and 4 not in index and "x" not in index
    np.testing.assert_array_equal(index.contains([0, 1, 3]), [True, False, True])
    assert index.contains(3) is True
    assert index.remove([3, 4, 6]) == 2
    assert index.remove(3) == 0
    assert len(index) == 18 and index.get(3) is None
    res = index.search(base, 18)
    assert not np.isin(res.keys, [3, 6]).any()


def test_index_upsert_replaces_and_validates_first(rng):
    base = rng.standard_normal((50, 6)).astype(np.float32)
    index = sagitta.Index(6, metric="l2")
    index.add(np.arange(50), base)
    new = rng.standard_normal((3, 6)).astype(np.float32)
    index.upsert([4, 60, 4], new)  # replaces 4 (last row wins), adds 60
    assert len(index) == 51
    np.testing.assert_array_equal(index.get(4), new[2])
    np.testing.assert_array_equal(index.get(60), new[1])
    assert index.search(new[2], 1).keys[0] == 4
    bad = new.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="row 1"):
        index.upsert([5, 6, 7], bad)
    np.testing.assert_array_equal(index.get(5), base[5])  # nothing changed
    assert len(index) == 51


def test_properties_and_expansion(rng):
    index = sagitta.Index(
        16, metric="ip", dtype="f16", connectivity=8, expansion_add=40, expansion_search=20
    )
    assert (index.ndim, index.metric, index.dtype, index.kind) == (16, "ip", "f16", "hnsw")
    assert (index.connectivity, index.expansion_add, index.expansion_search) == (8, 40, 20)
    index.expansion_search = 77
    assert index.expansion_search == 77
    before = index.memory_usage
    index.add(np.arange(5000), rng.standard_normal((5000, 16)))
    assert index.memory_usage > before + 5000 * 16 * 2
    assert not index.read_only and index.path is None


def test_single_thread_and_explicit_threads_agree(rng):
    base = rng.standard_normal((3000, 16)).astype(np.float32)
    index = sagitta.Index(16, metric="l2")
    index.add(np.arange(3000), base, threads=1)
    q = rng.standard_normal((100, 16)).astype(np.float32)
    a = index.search(q, 10, threads=1)
    b = index.search(q, 10, threads=2)
    c = index.search(q, 10)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_array_equal(a.keys, c.keys)
