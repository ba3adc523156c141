"""sagitta.LowDimIndex: exact kNN for low-dimensional data, checked
against a NumPy brute-force oracle (float64, ties by the lower row)."""

import numpy as np
import pytest

import sagitta


def oracle(rows, q, k):
    """Brute force: float64 for float rows; exact integers for grid codes."""
    d = ((rows - q) ** 2).sum(axis=1)
    order = np.lexsort((np.arange(len(rows)), d))
    return order[:k], d[order[:k]]


@pytest.fixture(scope="module")
def grid_data():
    rng = np.random.default_rng(7)
    # Rounded to 4 decimals with many repeated values: stored as exact codes.
    rows = np.round(rng.random((3000, 6)), 2).astype(np.float32)
    rows[:, 3] = rng.integers(0, 2, 3000)
    labels = rng.integers(0, 3, 3000)
    return rows, labels


def test_grid_search_is_exact(grid_data):
    rows, labels = grid_data
    index = sagitta.LowDimIndex(rows, labels)
    assert index.grid_scale == 100.0
    assert len(index) == 3000 and index.dim == 6 and index.has_labels
    rng = np.random.default_rng(1)
    queries = np.round(rng.random((200, 6)), 2).astype(np.float32)
    ids, dists = index.search(queries, 7)
    assert ids.shape == (200, 7)
    # Exact arithmetic on the grid: equal distances are real ties, which
    # go to the lower row.
    codes = np.rint(rows.astype(np.float64) * 100).astype(np.int64)
    for q, got, dist in zip(queries, ids, dists):
        want, wd = oracle(codes, np.rint(q.astype(np.float64) * 100).astype(np.int64), 7)
        assert list(got) == list(want)
        np.testing.assert_allclose(dist, wd / 1e4, rtol=1e-12)


def test_float_rows_and_off_grid_queries():
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((2000, 3)).astype(np.float32)
    index = sagitta.LowDimIndex(rows)
    assert index.grid_scale is None
    for q in rng.standard_normal((50, 3)).astype(np.float32):
        got, _ = index.search(q, 5)
        want, _ = oracle(rows.astype(np.float64), q.astype(np.float64), 5)
        assert list(got) == list(want)


def test_classify_is_the_vote_of_the_exact_neighbours(grid_data):
    rows, labels = grid_data
    index = sagitta.LowDimIndex(rows, labels)
    codes = np.rint(rows.astype(np.float64) * 100).astype(np.int64)
    q = rows[10]
    want, _ = oracle(codes, codes[10], 5)
    counts = np.bincount(labels[want], minlength=3)
    vote = index.classify(q, 5)
    assert sum(c for _, c, _ in vote) == 5
    for label, count, share in vote:
        assert counts[label] == count and share == count / 5
    assert [c for _, c, _ in vote] == sorted((c for _, c, _ in vote), reverse=True)
    assert len(index.classify(rows[:3], 5)) == 3


def test_save_open_memory_mapped(tmp_path, grid_data):
    rows, labels = grid_data
    index = sagitta.LowDimIndex(rows, labels)
    path = tmp_path / "refs.sgld"
    index.save(path)
    opened = sagitta.LowDimIndex.open(path)
    assert opened.nbytes == index.nbytes == path.stat().st_size
    assert opened.format_version == index.format_version == 2
    a = index.search(rows[:20], 4)
    b = opened.search(rows[:20], 4)
    np.testing.assert_array_equal(a[0], b[0])


def test_damaged_files_raise_corrupt_file_error(tmp_path, grid_data):
    rows, _ = grid_data
    path = tmp_path / "refs.sgld"
    sagitta.LowDimIndex(rows).save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(sagitta.CorruptFileError, match="checksum"):
        sagitta.LowDimIndex.open(path)
    path.write_bytes(bytes(data[:100]))
    with pytest.raises(sagitta.CorruptFileError):
        sagitta.LowDimIndex.open(path)
    with pytest.raises(FileNotFoundError):
        sagitta.LowDimIndex.open(tmp_path / "missing.sgld")


def test_bad_input_gives_clear_errors(grid_data):
    rows, labels = grid_data
    index = sagitta.LowDimIndex(rows, labels)
    with pytest.raises(ValueError, match="k: must be at least 1"):
        index.search(rows[0], 0)
    with pytest.raises(ValueError, match="exceeds"):
        index.search(rows[0], 3001)
    with pytest.raises(ValueError, match="expected 6 dimensions"):
        index.search(rows[0, :5], 1)
    with pytest.raises(ValueError, match="not finite"):
        index.search(np.full(6, np.nan, dtype=np.float32), 1)
    with pytest.raises(ValueError, match="32 dimensions"):
        sagitta.LowDimIndex(np.zeros((4, 33), dtype=np.float32))
    with pytest.raises(ValueError, match="not finite"):
        sagitta.LowDimIndex(np.array([[1.0, np.inf]], dtype=np.float32))
    with pytest.raises(ValueError, match="labels"):
        sagitta.LowDimIndex(rows, labels[:5])
    with pytest.raises(ValueError, match="65535"):
        sagitta.LowDimIndex(rows[:2], [0, 70000])
    with pytest.raises(ValueError, match="without labels"):
        sagitta.LowDimIndex(rows).classify(rows[0], 3)
