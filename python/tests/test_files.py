"""save → open round trips, and damaged files raise CorruptFileError."""

import os

import numpy as np
import pytest

import sagitta


@pytest.mark.parametrize(
    ("metric", "dtype", "kind"),
    [
        ("cos", "f32", "hnsw"),
        ("l2", "f16", "flat"),
        ("ip", "i8", "hnsw"),
        ("hamming", "b1", "hnsw"),
    ],
)
def test_round_trip(tmp_path, rng, metric, dtype, kind):
    n, d = 3000, 64
    if metric == "hamming":
        base = rng.integers(0, 256, size=(n, d // 8), dtype=np.uint8)
    elif dtype == "i8":
        base = rng.integers(-20, 20, size=(n, d)).astype(np.int8)
    else:
        base = rng.standard_normal((n, d)).astype(np.float32)
    index = sagitta.Index(d, metric=metric, dtype=dtype, kind=kind, expansion_search=48)
    keys = rng.permutation(10 * n)[:n].astype(np.uint64)
    index.add(keys, base)
    index.remove(keys[:10])
    path = tmp_path / "index.sgt"
    index.save(path)
    assert not (tmp_path / "index.sgt.tmp").exists()
    opened = sagitta.Index.open(str(path))
    assert opened.read_only and os.fspath(opened.path) == str(path)
    assert len(opened) == len(index) == n - 10
    assert (opened.ndim, opened.metric, opened.dtype, opened.kind) == (d, metric, dtype, kind)
    assert opened.expansion_search == 48 and opened.connectivity == index.connectivity
    assert opened.memory_usage == path.stat().st_size
    queries = base[10:60]
    # A mapped file this small is scanned exactly (cheaper than walking its
    # graph), so it answers as the in-memory index's exact search.
    np.testing.assert_array_equal(
        opened.search(queries, 10).keys, index.search(queries, 10, exact=True).keys
    )
    np.testing.assert_array_equal(
        opened.search(queries, 10, exact=True).distances,
        index.search(queries, 10, exact=True).distances,
    )
    assert opened.get(int(keys[0])) is None
    np.testing.assert_array_equal(opened.get(int(keys[20])), index.get(int(keys[20])))
    np.testing.assert_array_equal(opened.contains(keys[:20]), index.contains(keys[:20]))
    # an opened file can be saved elsewhere (a durable copy) and reopened
    copy = tmp_path / "copy.sgt"
    opened.save(copy)
    assert copy.read_bytes() == path.read_bytes()
    opened.expansion_search = 100
    assert opened.expansion_search == 100


def test_missing_file():
    with pytest.raises(FileNotFoundError) as e:
        sagitta.Index.open("/nonexistent/dir/index.sgt")
    assert e.value.filename == "/nonexistent/dir/index.sgt"


def test_save_into_missing_directory(rng):
    index = sagitta.Index(4)
    index.add(1, np.ones(4))
    with pytest.raises(FileNotFoundError):
        index.save("/nonexistent/dir/index.sgt")


def _saved(tmp_path, rng) -> bytes:
    index = sagitta.Index(16, metric="l2")
    index.add(np.arange(500), rng.standard_normal((500, 16)))
    path = tmp_path / "good.sgt"
    index.save(path)
    return path.read_bytes()


def test_corrupt_files(tmp_path, rng):
    good = _saved(tmp_path, rng)
    cases = {
        "empty": b"",
        "garbage": b"this is not an index file" * 10,
        "truncated-header": good[:100],
        "truncated-body": good[: len(good) // 2],
        "bad-magic": b"XXXXXXXX" + good[8:],
        "future-version": good[:8] + (999).to_bytes(4, "little") + good[12:],
    }
    for name, data in cases.items():
        p = tmp_path / f"{name}.sgt"
        p.write_bytes(data)
        with pytest.raises(sagitta.CorruptFileError) as e:
            sagitta.Index.open(p)
        assert isinstance(e.value, OSError)
        assert str(p) in str(e.value), name


def test_flipped_bytes_never_crash(tmp_path, rng):
    """Any single flipped byte gives CorruptFileError at open or a working index."""
    good = _saved(tmp_path, rng)
    query = np.zeros(16, dtype=np.float32)
    opened_ok = 0
    for pos in rng.choice(len(good), size=150, replace=False):
        data = bytearray(good)
        data[pos] ^= 0xFF
        p = tmp_path / "flip.sgt"
        p.write_bytes(bytes(data))
        try:
            index = sagitta.Index.open(p)
        except sagitta.CorruptFileError:
            continue
        opened_ok += 1
        res = index.search(query, 5)
        assert res.keys.shape == (5,)
        del index
    # the header and section table are checked at open; payload bytes are
    # checked lazily (Segment verify), so many flips still open
    assert opened_ok > 0
