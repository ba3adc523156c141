"""Parity of sagitta.compat.iscc with iscc-usearch's ShardedIndex surface:
every method of the map in docs/ISCC_USEARCH.md is called, answers are
checked against a brute-force oracle, and the documented differences
(duplicate keys refused, keys >= 2**63, durable reset, load / view,
load / view) are asserted."""

import math

import numpy as np
import pytest

from sagitta import ReadOnlyError
from sagitta.compat.iscc import (
    BatchMatches,
    Matches,
    ShardedIndex,
    ShardedIndex128,
    ShardedNphdIndex,
    ShardedNphdIndex128,
)


def small(path, **kw):
    # ~200 rows per segment, so a few thousand rows span many segments.
    size = 200 * (16 * 4 + 16 + 132)
    return ShardedIndex(path=path, ndim=16, metric="l2sq", dtype="f32", shard_size=size, **kw)


def files_bytes(path):
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def oracle(base_keys, base, q, k):
    d = ((base - q) ** 2).sum(1)
    order = np.lexsort((base_keys, d))[:k]
    return base_keys[order]


def test_sharded_index_every_method(tmp_path, rng):
    path = tmp_path / "idx"
    idx = small(path, connectivity=12, expansion_add=64, expansion_search=48)
    assert (idx.connectivity, idx.expansion_add, idx.expansion_search) == (12, 64, 48)
    # usearch's MetricKind when usearch is installed, this package's otherwise
    assert idx.metric_kind.name == "L2sq" and str(idx.metric_kind) == "MetricKind.L2sq"
    assert idx.metric == idx.metric_kind
    idx.expansion_add = 200  # graphs built from now on
    assert idx.expansion_add == 200
    with pytest.raises(ValueError):
        idx.expansion_add = 0
    assert idx.expansion_add == 200
    idx.expansion_add = 64
    assert ShardedIndex.metadata(tmp_path / "nothing") is None
    base = rng.standard_normal((3000, 16)).astype(np.float32)
    keys = np.arange(1000, 4000, dtype=np.uint64)
    for lo in range(0, 3000, 500):
        out = idx.add(keys[lo : lo + 500], base[lo : lo + 500])
        assert out.dtype == np.uint64 and len(out) == 500
    idx._c.optimize()
    assert idx.shard_count >= 5, idx.stats()
    assert len(idx) == idx.size == 3000 and idx.dirty == 3000

    # search: single -> Matches, batch -> BatchMatches, against the oracle
    m = idx.search(base[7], 5, exact=True)
    assert isinstance(m, Matches) and len(m) == 5
    assert list(m.keys) == list(oracle(keys, base, base[7], 5))
    assert m[0].key == 1007 and m.to_list()[0][0] == 1007
    qs = rng.standard_normal((50, 16)).astype(np.float32)
    bm = idx.search(qs, 10, exact=True)
    assert isinstance(bm, BatchMatches) and bm.keys.shape == (50, 10) and len(bm) == 50
    for i in range(50):
        assert list(bm[i].keys) == list(oracle(keys, base, qs[i], 10))
    approx = idx.search(qs, 10)
    hits = sum(len(set(approx.keys[i]) & set(bm.keys[i])) for i in range(50))
    assert hits / 500 >= 0.9
    assert isinstance(idx.search(qs[:1], 3), Matches)
    near = idx.search(base[7], 10, radius=1e-6)
    assert list(near.keys) == [1007]
    with pytest.raises(ValueError):
        idx.search(base[0], 0)
    idx.expansion_search = 200
    assert idx.expansion_search == 200

    # lookups: single and batch, present and absent
    np.testing.assert_array_equal(idx.get(1005), base[5])
    got = idx.get([1005, 1, 3999])
    assert got[1] is None
    np.testing.assert_array_equal(got[2], base[2999])
    np.testing.assert_array_equal(idx[1005], base[5])
    with pytest.raises(KeyError):
        idx[1]
    assert idx.contains(1005) is True and idx.contains(1) is False
    probe = np.concatenate([keys[::7], np.arange(5000, 5100, dtype=np.uint64)])
    np.testing.assert_array_equal(idx.contains(probe), np.isin(probe, keys))
    assert 1005 in idx and 1 not in idx and "x" not in idx
    assert idx.count(1005) == 1 and list(idx.count([1005, 1])) == [1, 0]
    assert idx.get(1005, dtype=np.float64).dtype == np.float64

    # lazy views
    assert len(idx.keys) == 3000
    assert sorted(int(k) for k in idx.keys) == list(range(1000, 4000))
    ks = np.asarray(idx.keys)
    assert ks.dtype == np.uint64 and sorted(ks.tolist()) == list(range(1000, 4000))
    assert idx.keys[-1] == ks[-1] and list(idx.keys[10:13]) == list(ks[10:13])
    vs = idx.vectors[10:13]
    assert vs.shape == (3, 16)
    for k, v in zip(ks[10:13], vs):
        np.testing.assert_array_equal(v, base[int(k) - 1000])
    np.testing.assert_array_equal(idx.vectors[0], base[int(ks[0]) - 1000])

    # writes: duplicates refused whole, add_once, upsert, auto keys, removal
    with pytest.raises(ValueError, match="already exists"):
        idx.add([9000, 1005], base[:2])
    assert 9000 not in idx
    added = idx.add_once([1005, 9000, 9000], base[:3])
    assert list(added) == [9000] and idx.add_once(9000, base[0]) is None
    np.testing.assert_array_equal(idx.get(9000), base[1])
    out = idx.upsert([1005, 1005, 9001], base[:3])
    assert sorted(out.tolist()) == [1005, 9001]
    np.testing.assert_array_equal(idx.get(1005), base[1])
    auto = idx.add(None, base[:3])
    assert len(set(auto.tolist())) == 3 and not np.isin(auto, keys).any()
    big = 2**64 - 2
    idx.add(big, base[0])
    assert big in idx and idx.contains([big])[0]
    before = len(idx)
    assert idx.remove([1006, 1, 1007]) == 2
    del idx[1008]
    assert len(idx) == before - 3 and 1006 not in idx and 1008 not in idx
    assert idx.tombstone_count > 0
    assert idx.compact() > 0 and idx.tombstone_count == 0
    assert 1006 not in idx and len(idx) == before - 3
    assert idx.rebuild_bloom() == len(idx)
    assert np.isin(probe, keys).sum() - 3 <= idx.contains(probe).sum()

    # lifecycle
    assert idx.dirty > 0
    idx.save()
    assert idx.dirty == 0
    with pytest.raises(TypeError):
        idx.save(tmp_path / "elsewhere")
    idx.drain_rotations()
    st = idx.stats()
    assert st["total_vectors"] == len(idx) and st["dimensions"] == 16
    for name in ("rename", "join", "cluster", "pairwise_distance", "copy"):
        with pytest.raises(NotImplementedError):
            getattr(idx, name)()
    n = len(idx)
    idx.close()
    meta = ShardedIndex.metadata(path)
    assert meta["ndim"] == 16 and meta["sealed_vectors"] == n and meta["connectivity"] == 12
    with ShardedIndex(path=path, read_only=True) as ro:
        assert len(ro) == n and ro.read_only and ro.dirty == 0
        assert list(ro.search(base[9], 1, exact=True).keys) == [1009]
        with pytest.raises(Exception, match="read-only"):
            ro.add(77, base[0])
    with ShardedIndex(path=path) as rw:
        assert len(rw) == n
        rw.reset()
        assert len(rw) == 0
    with ShardedIndex(path=path) as again:
        assert len(again) == 0  # reset is durable
        again.add([1], base[:1])
        with pytest.raises(NotImplementedError, match="clear"):
            again.clear()  # as iscc-usearch: reset() is the call
        assert len(again) == 1


def test_nphd_variable_length_codes(tmp_path):
    ShardedIndex(path=tmp_path / "plain", ndim=8, metric="hamming", dtype="b1").close()
    idx = ShardedNphdIndex(path=tmp_path / "n", max_dim=256, ndim=999, metric="cos")
    assert (idx.max_dim, idx.max_bytes, idx.ndim) == (256, 32, 264)
    assert idx.metric_kind.name == "NPHD" and idx.metric == idx.metric_kind
    a = np.full(8, 0xAA, np.uint8)
    b = np.array([0xAB] * 8 + [0xFF] * 8, np.uint8)
    c = bytes([0xAA] * 32)
    assert list(idx.add(1, a)) == [1]
    assert list(idx.add([2, 3], [b, c])) == [2, 3]
    assert list(idx.add([4, 5], np.full((2, 16), 0x55, np.uint8))) == [4, 5]
    m = idx.search(a, 3, exact=True)
    assert sorted(m.keys[:2].tolist()) == [1, 3] and m.distances[0] == 0.0
    assert math.isclose(m.distances[2], 0.125)
    bm = idx.search([a, b], 2, exact=True)
    assert bm.keys.shape == (2, 2) and bm.keys[1, 0] == 2
    np.testing.assert_array_equal(idx.get(2), b)
    got = idx.get([1, 99])
    np.testing.assert_array_equal(got[0], a)
    assert got[1] is None
    assert sorted(len(v) for v in idx.vectors) == [8, 16, 16, 16, 32]
    idx.upsert([1], [np.zeros(4, np.uint8)])
    np.testing.assert_array_equal(idx.get(1), np.zeros(4, np.uint8))
    with pytest.raises(ValueError):
        idx.add(6, np.zeros(40, np.uint8))  # longer than max_dim bits
    assert 6 not in idx
    idx.close()
    with ShardedNphdIndex(path=tmp_path / "n") as again:
        assert again.max_dim == 256 and len(again) == 5
        again.view()
        assert again.read_only and again.max_dim == 256
        assert sorted(m.key for m in again.search(a, 5, exact=True)) == [1, 2, 3, 4, 5]
        with pytest.raises(ValueError, match="Metric mismatch"):
            again.load(tmp_path / "plain")  # not an NPHD index
    with pytest.raises(ValueError, match="Metric mismatch"):
        ShardedIndex(path=tmp_path / "n")


def test_sharded_index128_keys_are_bytes_in_and_out(tmp_path, rng):
    n = 1500
    base = rng.standard_normal((n, 16)).astype(np.float32)
    raw = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    raw[:, 0] |= 0x80  # every key above 2**127
    keys = raw.view("V16").ravel()
    size = 200 * (16 * 4 + 16 + 132)
    idx = ShardedIndex128(path=tmp_path / "w", ndim=16, metric="l2sq", shard_size=size)
    out = idx.add(keys[:1000], base[:1000])
    assert out.dtype == np.dtype("V16") and (out == keys[:1000]).all()
    for i in range(1000, n):
        idx.add(bytes(keys[i]), base[i])
    assert len(idx) == n
    with pytest.raises(ValueError):
        idx.add(None, base[0])  # no auto keys for 128-bit (as iscc-usearch)
    with pytest.raises(ValueError):
        idx.add(5, base[0])  # an int is not a 128-bit key here (as iscc-usearch)
    q = base[[3, 700, 1400]] + 0.01
    bm = idx.search(q, 5, exact=True)
    assert bm.keys.dtype == np.dtype("V16")
    for i in range(3):
        want = np.argsort(((base - q[i]) ** 2).sum(1), kind="stable")[:5]
        assert bm.keys[i].tobytes() == keys[want].tobytes()
    m = idx.search(base[9], 1)
    assert m.to_list()[0][0] == bytes(keys[9]) and m[0].key == bytes(keys[9])
    other = bytes(16)
    assert idx.contains(bytes(keys[4])) and bytes(keys[4]) in idx
    assert not idx.contains(other) and idx.count(other) == 0
    np.testing.assert_array_equal(idx.contains(keys[:3]), [True, True, True])
    np.testing.assert_array_equal(idx.get(bytes(keys[4])), base[4])
    assert idx.get([bytes(keys[4]), other])[1] is None
    assert idx.add_once([bytes(keys[4]), other], base[:2]).tolist() == [other]
    idx.upsert(other, base[1])
    np.testing.assert_array_equal(idx[other], base[1])
    del idx[other]
    assert other not in idx and idx.remove(keys[:2]) == 2
    assert idx.keys[0].__class__ is bytes and len(idx.keys) == n - 2
    assert np.asarray(idx.keys).dtype == np.dtype("V16")
    assert sorted(bytes(k) for k in idx.keys) == sorted(bytes(k) for k in keys[2:])
    idx.close()
    ShardedIndex(path=tmp_path / "m64", ndim=4).close()
    with pytest.raises(ValueError):
        ShardedIndex(path=tmp_path / "w")  # key kind mismatch (as iscc-usearch)
    with ShardedIndex128(path=tmp_path / "w", read_only=True) as again:
        assert len(again) == n - 2 and bytes(keys[1400]) in again
        again.load()  # the reader reopens as the writer
        assert not again.read_only and again.add(other, base[0]).tolist() == [other]
        with pytest.raises(ValueError, match="Key kind mismatch"):
            again.view(tmp_path / "m64")  # 64-bit keys
        assert again.path == tmp_path / "w" and other in again

    nphd = ShardedNphdIndex128(path=tmp_path / "n", max_dim=128)
    ka, kb = b"A" * 16, b"B" * 16
    out = nphd.add([ka, kb], [np.full(8, 0xAA, np.uint8), np.full(16, 0xAB, np.uint8)])
    assert out.dtype == np.dtype("V16")
    assert nphd.search(np.full(8, 0xAA, np.uint8), 2, exact=True).to_list()[0] == (ka, 0.0)


def test_multi_several_vectors_per_key(tmp_path, rng):
    base = rng.standard_normal((600, 16)).astype(np.float32)
    keys = np.arange(600, dtype=np.uint64) // 3  # three vectors per key
    idx = small(tmp_path / "m", multi=True)
    assert idx.multi
    out = idx.add(keys[:400], base[:400])
    assert out.dtype == np.uint64 and (out == keys[:400]).all()
    idx.add(keys[400:], base[400:])  # key 133 gets its third vector here
    assert len(idx) == 600
    assert idx.count(133) == 3 and idx.count(999) == 0
    np.testing.assert_array_equal(idx.count(np.array([0, 199, 500], np.uint64)), [3, 3, 0])
    got = idx.get(133)
    assert got.shape == (3, 16)
    np.testing.assert_array_equal(got, base[399:402])
    assert idx.get(999) is None and idx.get([5, 999])[1] is None
    assert 7 in idx and idx.contains(7) and 999 not in idx
    q = base[[10, 450]] + 0.01
    bm = idx.search(q, 6, exact=True)
    for i in range(2):
        want = np.argsort(((base - q[i]) ** 2).sum(1), kind="stable")[:6]
        assert sorted(bm.keys[i].tolist()) == sorted(keys[want].tolist())
    assert idx.add_once([7, 1000], base[:2]).tolist() == [1000]
    for op in (lambda: idx.remove(7), lambda: idx.upsert(7, base[0])):
        with pytest.raises(ValueError):
            op()
    assert sorted(idx.keys).count(7) == 3
    idx.close()
    with ShardedIndex(path=tmp_path / "m") as again:  # multi read from the directory
        assert again.multi and again.count(133) == 3
        again.view()
        assert again.read_only and again.count(133) == 3 and len(again) == 601
    with pytest.raises(ValueError):
        ShardedIndex128(path=tmp_path / "m")


def test_refused_options(tmp_path):
    with pytest.raises(NotImplementedError):
        ShardedIndex128(path=tmp_path / "m", ndim=4, multi=True)
    with pytest.raises(ValueError):
        ShardedIndex(path=tmp_path / "none", read_only=True)
    with pytest.raises(ValueError):
        ShardedIndex(path=tmp_path / "noddim")
    with pytest.raises(ValueError):
        ShardedIndex(path=tmp_path / "badmetric", ndim=4, metric="manhattan")


def test_load_view_and_storage_figures(tmp_path, rng):
    """load() / view() reopen the object in place (writable / read-only)
    on its own directory or another; serialized_length and capacity
    describe the rows not sealed yet (iscc-usearch's active shard), 0 for
    a reader."""
    a, b = tmp_path / "a", tmp_path / "b"
    base = rng.standard_normal((1200, 16)).astype(np.float32)
    keys = np.arange(1200, dtype=np.uint64)
    w = small(a, expansion_search=40)
    w.add(keys[:1100], base[:1100])
    w._c.optimize()
    w.add(keys[1100:], base[1100:])  # an unsealed tail
    assert w.shard_count >= 3 and w.stats()["active_shard_vectors"] > 0
    assert w.capacity == w.stats()["active_shard_vectors"] > 0
    qs = rng.standard_normal((20, 16)).astype(np.float32)
    before = w.search(qs, 10, exact=True)

    # view() on another object: a reader beside the writer, same answers
    r = small(tmp_path / "scratch")
    r.view(a)
    assert r.read_only and r.path == a and r.dirty == 0 and len(r) == 1200
    got = r.search(qs, 10, exact=True)
    np.testing.assert_array_equal(got.keys, before.keys)
    np.testing.assert_array_equal(got.distances, before.distances)
    np.testing.assert_array_equal(r.get(1150), base[1150])  # a tail row
    with pytest.raises(ReadOnlyError):
        r.add(5000, base[0])
    with pytest.raises(ReadOnlyError):
        r.expansion_add = 10
    assert 5000 not in r and 5000 not in w
    r.close()

    # view() in place: the writer becomes a reader, nothing written is lost
    w.expansion_search = 200
    assert w.dirty == 1200
    w.view()
    assert w.read_only and w.dirty == 0 and len(w) == 1200
    assert w.expansion_search == 40  # settings from the manifest again
    got = w.search(qs, 10, exact=True)
    np.testing.assert_array_equal(got.keys, before.keys)
    np.testing.assert_array_equal(got.distances, before.distances)
    approx_w = w.search(qs, 10)
    for name, op in [
        ("add", lambda: w.add(5000, base[0])),
        ("upsert", lambda: w.upsert(3, base[0])),
        ("remove", lambda: w.remove([3])),
    ]:
        with pytest.raises(ReadOnlyError):
            op()
        assert len(w) == 1200 and 3 in w, name
    # a reader has no active part (as iscc-usearch's readers)
    assert w.serialized_length == w.capacity == 0
    assert w.stats()["memory_usage"] > 0 and files_bytes(a) > 1200 * 16 * 4
    # ... and a plain reader of the same directory agrees
    with ShardedIndex(path=a, read_only=True) as ro:
        np.testing.assert_array_equal(ro.search(qs, 10).keys, approx_w.keys)
        assert ro.serialized_length == 0

    # load() in place: writable again
    w.load()
    assert not w.read_only and w.path == a and w.dirty == 0
    w.remove(keys[:100])  # rows of sealed segments: kept until compacted
    assert len(w) == 1100 and w.tombstone_count == 100
    assert w.compact() == 100
    assert len(w) == 1100 and w.tombstone_count == 0
    w.add(keys[:10], base[:10])  # re-added: no tombstone
    assert w.dirty == 110 and w.tombstone_count == 0 and len(w) == 1110

    # load() of another directory: its rows and settings; ``a`` is released
    other = small(b, expansion_search=33)
    okeys = np.arange(7000, 7300, dtype=np.uint64)
    other.add(okeys, base[:300])
    other.close()
    w.load(str(b))
    assert w.path == b and not w.read_only and w.expansion_search == 33
    assert sorted(np.asarray(w.keys).tolist()) == okeys.tolist()
    np.testing.assert_array_equal(w.get(okeys[::37]), base[:300][::37])
    assert w.search(base[5], 1, exact=True).keys.tolist() == [7005]
    with ShardedIndex(path=a) as again:  # a writer of ``a``: the lock was let go
        assert len(again) == 1110 and 50 not in again and 5 in again

    # refusals leave the object as it was
    with pytest.raises(TypeError):
        w.load(b"bytes")
    with pytest.raises(FileNotFoundError):
        w.view(tmp_path / "nothing")
    ShardedIndex(path=tmp_path / "multi", ndim=16, multi=True).close()
    with pytest.raises(ValueError, match="Key kind mismatch"):
        w.load(tmp_path / "multi")
    assert w.path == b and not w.read_only and len(w) == 300
    w.add(1, base[0])
    assert w.dirty == 1
    w.close()


def test_one_directory_shared_by_objects_of_a_process(tmp_path, rng):
    """Two objects opened writable on one directory share its collection
    (as iscc-usearch lets two objects open it): each sees the other's
    writes, the directory stays open until the last one closes, a closed
    object raises RuntimeError, and another process is still kept out."""
    import subprocess
    import sys

    base = rng.standard_normal((6, 16)).astype(np.float32)
    a = small(tmp_path / "d")
    a.add([1, 2], base[:2])
    b = ShardedIndex(path=tmp_path / "d")
    assert len(b) == 2 and 2 in b
    b.add(3, base[2])
    assert 3 in a and len(a) == 3
    np.testing.assert_array_equal(a.get(3), base[2])
    probe = (
        "import sys, sagitta\n"
        "try:\n"
        "    sagitta.Collection.open(sys.argv[1])\n"
        "except sagitta.LockedError:\n"
        "    sys.exit(7)\n"
    )
    run = [sys.executable, "-c", probe, str(tmp_path / "d")]
    assert subprocess.run(run).returncode == 7  # another process: locked
    a.close()
    with pytest.raises(RuntimeError, match="index is closed"):
        a.add(4, base[3])
    with pytest.raises(RuntimeError, match="index is closed"):
        len(a.keys)
    b.add(4, base[3])  # b still holds the directory
    assert subprocess.run(run).returncode == 7
    b.close()
    b.close()  # closing twice is allowed
    assert subprocess.run(run).returncode == 0  # released with the last one
    with ShardedIndex(path=tmp_path / "d") as c:
        assert sorted(c.keys) == [1, 2, 3, 4]


def test_binary_codes_stay_unsealed_up_to_a_larger_share_of_the_shard(tmp_path, rng):
    """400,000 256-bit codes are past the 64 MiB a float index keeps
    unsealed (at a built code row's bytes, graph links included: ~370k)
    but well under the 256 MiB codes get: one add leaves one shard (the
    unsealed rows, or the one segment an idle seal makes of them), not a
    sealed segment and a tail."""
    n = 400_000
    codes = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    idx = ShardedIndex(path=tmp_path / "b", ndim=256, metric="hamming", dtype="b1")
    idx.add(np.arange(n, dtype=np.uint64), codes)
    assert idx.shard_count == 1
    assert len(idx) == n
    assert idx.search(codes[123], 1).keys[0] == 123


def test_tiny_shard_size_rotates_after_each_add(tmp_path, rng):
    """A shard_size under the smallest segment (4 KiB) seals the unsealed
    rows after the add that passes it, as iscc-usearch rotates: one
    segment per add at shard_size=1, and every row still found."""
    base = rng.standard_normal((5, 16)).astype(np.float32)
    idx = ShardedIndex(path=tmp_path / "t", ndim=16, metric="l2sq", shard_size=1)
    assert idx.shard_count == 0
    for i in range(5):
        idx.add(i, base[i])
        assert idx.stats()["active_shard_vectors"] == 0
    assert idx.shard_count >= 2  # the optimizer may merge some
    for i in range(5):
        assert idx.search(base[i], 1).keys[0] == i
    big = ShardedIndex(path=tmp_path / "b", ndim=16, metric="l2sq", shard_size=1 << 20)
    big.add(np.arange(5), base)
    assert big.shard_count == 1  # unsealed rows, or (idle-sealed) one segment
