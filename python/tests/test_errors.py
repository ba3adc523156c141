"""Every bad input gets a clear, typed error that names the argument, and
loses nothing: a refused batch adds nothing."""

import numpy as np
import pytest

import sagitta


@pytest.fixture
def index(rng):
    idx = sagitta.Index(8, metric="l2")
    idx.add(np.arange(100), rng.standard_normal((100, 8)).astype(np.float32))
    return idx


def test_constructor_rejects_bad_parameters():
    with pytest.raises(ValueError, match='metric: unknown metric "manhattan"'):
        sagitta.Index(8, metric="manhattan")
    with pytest.raises(ValueError, match='dtype: unknown dtype "f64"'):
        sagitta.Index(8, dtype="f64")
    with pytest.raises(ValueError, match='kind: unknown index kind "ivf"'):
        sagitta.Index(8, kind="ivf")
    with pytest.raises(ValueError, match="ndim"):
        sagitta.Index(0)
    with pytest.raises(ValueError, match="ndim"):
        sagitta.Index(-3)
    with pytest.raises(ValueError, match="connectivity = 1"):
        sagitta.Index(8, connectivity=1)
    with pytest.raises(ValueError, match="expansion_add = 0"):
        sagitta.Index(8, expansion_add=0)
    with pytest.raises(ValueError, match="ndim"):
        sagitta.Index(12, metric="hamming")  # not a multiple of 8 bits
    with pytest.raises(ValueError):
        sagitta.Index(8, metric="hamming", dtype="f32")


def test_wrong_dimensions(index, rng):
    with pytest.raises(ValueError, match=r"vectors: expected 8 dimensions, got 7"):
        index.add(np.arange(200, 210), rng.standard_normal((10, 7)))
    with pytest.raises(ValueError, match=r"queries: expected 8 dimensions, got 9"):
        index.search(rng.standard_normal(9), 3)
    with pytest.raises(ValueError, match=r"vectors: expected a 1-D vector or a 2-D array"):
        index.add(np.arange(2), np.zeros((2, 2, 8)))
    assert len(index) == 100


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_rejected_and_batch_not_applied(index, rng, bad):
    vectors = rng.standard_normal((10, 8))
    vectors[6, 3] = bad
    with pytest.raises(ValueError, match=r"vectors: row 6: component 3 is not finite"):
        index.add(np.arange(200, 210), vectors)
    assert len(index) == 100
    assert not index.contains(np.arange(200, 210)).any()
    query = rng.standard_normal((4, 8))
    query[2, 0] = bad
    with pytest.raises(ValueError, match=r"queries: row 2: component 0 is not finite"):
        index.search(query, 3)


def test_duplicate_keys(index, rng):
    v = rng.standard_normal((3, 8))
    with pytest.raises(ValueError, match=r"keys: row 1: key 5 already exists"):
        index.add([300, 5, 301], v)
    with pytest.raises(ValueError, match=r"keys: row 2: key 300 already exists"):
        index.add([300, 301, 300], v)
    with pytest.raises(ValueError, match=r"keys: key 7 already exists"):
        index.add(7, v[0])
    assert len(index) == 100 and 300 not in index


def test_bad_keys(index, rng):
    v = rng.standard_normal((2, 8))
    with pytest.raises(ValueError, match=r"keys: key -1 is negative"):
        index.add(np.array([1000, -1]), v)
    with pytest.raises(ValueError, match=r"keys: key -4 is outside"):
        index.add(-4, v[0])
    with pytest.raises(TypeError, match=r"keys: keys must be integers, got dtype float64"):
        index.add(np.array([1.0, 2.0]), v)
    with pytest.raises(ValueError, match=r"keys: got 3 keys for 2 vectors"):
        index.add([500, 501, 502], v)
    with pytest.raises(ValueError, match=r"reserved"):
        index.add(sagitta.NO_KEY, v[0])
    with pytest.raises(ValueError, match=r"keys: expected one key or a 1-D array"):
        index.add(np.zeros((2, 1), dtype=np.int64), v)
    with pytest.raises(TypeError, match=r"bool"):
        index.add(True, v[0])
    assert len(index) == 100


@pytest.mark.parametrize("k", [0, -1])
def test_k_too_small(index, k):
    with pytest.raises(ValueError, match=rf"k: must be at least 1, got {k}"):
        index.search(np.zeros(8), k)


def test_k_larger_than_index_returns_every_vector(index):
    # The one k rule (index, segment and collection alike): past the rows
    # there are, every row; past 10000, refused.
    r = index.search(np.zeros(8), 101)
    assert r.counts == 100
    assert sorted(r.keys[:100].tolist()) == list(range(100))
    assert r.keys.shape == (101,) and r.keys[100] == sagitta.NO_KEY
    with pytest.raises(ValueError, match=r"k.*10000"):
        index.search(np.zeros(8), 10**12)
    with pytest.raises(ValueError, match=r"k.*10000"):
        index.search(np.zeros(8), 10_001)


def test_empty_index_search_answers_no_rows():
    r = sagitta.Index(4).search(np.ones(4), 1)
    assert r.counts == 0 and r.keys[0] == sagitta.NO_KEY


def test_other_bad_arguments(index):
    with pytest.raises(ValueError, match=r"threads: must be at least 1"):
        index.search(np.zeros((2, 8)), 1, threads=0)
    with pytest.raises(ValueError, match=r"expansion: must be at least 1"):
        index.search(np.zeros(8), 1, expansion=0)
    with pytest.raises(ValueError, match=r"radius"):
        index.search(np.zeros(8), 1, radius=float("nan"))
    with pytest.raises(ValueError, match=r"expansion_search: must be at least 1"):
        index.expansion_search = 0
    with pytest.raises(TypeError, match=r"queries: expected an array of numbers"):
        index.search("hello", 1)
    with pytest.raises(TypeError, match=r"queries"):
        index.search([["a"] * 8], 1)


def test_binary_inputs(rng):
    idx = sagitta.Index(64, metric="hamming")
    with pytest.raises(ValueError, match=r"vectors: expected 8 bytes of packed bits"):
        idx.add([1, 2], np.zeros((2, 7), dtype=np.uint8))
    with pytest.raises(TypeError, match=r"vectors: binary vectors are uint8 arrays"):
        idx.add([1, 2], np.zeros((2, 8), dtype=np.int64))
    with pytest.raises(ValueError, match=r"expected 8 bytes"):
        idx.add(1, b"\x00" * 9)
    assert len(idx) == 0

    nphd = sagitta.Index(64, metric="nphd")
    with pytest.raises(ValueError, match=r"vectors: row 1"):
        nphd.add([1, 2], [b"\x01\x02", b"\x00" * 9])  # 72 bits > 64
    with pytest.raises(ValueError, match=r"vectors: row 0"):
        nphd.add([1], [b""])
    assert len(nphd) == 0


def test_read_only_index(tmp_path, index):
    path = tmp_path / "i.sgt"
    index.save(path)
    opened = sagitta.Index.open(path)
    with pytest.raises(sagitta.ReadOnlyError, match="add"):
        opened.add(1000, np.zeros(8))
    with pytest.raises(sagitta.ReadOnlyError, match="remove"):
        opened.remove(1)
    assert len(opened) == 100
