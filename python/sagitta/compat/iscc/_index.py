"""The iscc-usearch index classes over :class:`sagitta.Collection`:
``ShardedIndex``, ``ShardedNphdIndex``, their 128-bit-key variants, and
the ``multi=True`` variants (several vectors per key); the lazy
``keys`` / ``vectors`` views of an index."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..._sagitta import LIMITS, Collection, ReadOnlyError
from ._args import (
    _dtype,
    _first_of_each,
    _is_key128,
    _is_single_key,
    _key128,
    _key128_array,
    _key_array,
    _metric,
    _v16,
    metric_kind,
    scalar_kind,
)
from ._results import BatchMatches, Matches
from ._shared import Shared, acquire, release


class _LazyView:
    """A live, lazy sequence over the collection (nothing is loaded until
    read; positions follow the collection's part order)."""

    def __init__(self, index: ShardedIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return len(self._index)

    def _iter(self) -> Iterator[Any]:
        raise NotImplementedError

    def _pack(self, items: list[Any]) -> Any:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        return self._iter()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(count={len(self)})"

    def __getitem__(self, i: int | slice) -> Any:
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step < 0:
                return self._pack(list(itertools.islice(self._iter(), n))[i])
            return self._pack(list(itertools.islice(self._iter(), start, stop, step)))
        j = int(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} items")
        return next(itertools.islice(self._iter(), j, None))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._pack(list(self._iter()))
        return np.asarray(out, dtype=dtype)


class ShardedIndexedKeys(_LazyView):
    """The live keys of an index (``ShardedIndex.keys``)."""

    def _iter(self) -> Iterator[Any]:
        if self._index._multi:
            return (k >> 64 for k in self._index._c.keys())
        if self._index._wide:
            return (k.to_bytes(16, "big") for k in self._index._c.keys())
        return iter(self._index._c.keys())

    def _pack(self, items: list[Any]) -> np.ndarray:
        if self._index._wide:
            return np.frombuffer(b"".join(items), dtype="V16").copy()
        return np.array(items, dtype=np.uint64)


class ShardedIndexedVectors(_LazyView):
    """The live vectors of an index (``ShardedIndex.vectors``)."""

    def _iter(self) -> Iterator[Any]:
        out = self._index._out
        return (out(v) for _, v in self._index._c.items())

    def _pack(self, items: list[Any]) -> Any:
        if self._index._nphd:
            return items
        if items:
            return np.stack(items)
        c = self._index._c
        if c.dtype == "b1":  # packed bits: ndim / 8 bytes a row
            return np.empty((0, c.ndim // 8), np.uint8)
        return np.empty((0, c.ndim), {"f16": np.float16, "i8": np.int8}.get(c.dtype, np.float32))


class ShardedIndex:
    """iscc-usearch's ``ShardedIndex`` on a Sagitta collection in ``path``.

    ``shard_size`` bounds merged segments (``max_segment_size``);
    ``bloom_filter``, ``background_rotation`` and ``max_pending_rotations``
    are accepted and have no effect (the bloom filter is always kept, and
    sealing and indexing always run in the background, rows searchable
    from the moment they are written).
    """

    _nphd = False
    _wide = False
    _multi = False

    def __new__(cls, *args: Any, **kw: Any) -> ShardedIndex:
        # multi=True (or an existing multi directory) picks the multi variant.
        path = kw.get("path")
        multi = bool(kw.get("multi")) or (path is not None and (Path(path) / _MULTI_MARK).is_file())
        if multi and not cls._multi and not cls._wide:
            cls = _MultiNphdIndex if cls._nphd else _MultiIndex
        return super().__new__(cls)

    def __init__(
        self,
        *,
        path: str | os.PathLike[str],
        ndim: int | None = None,
        metric: Any = "cos",
        dtype: Any = None,
        connectivity: int | None = None,
        expansion_add: int | None = None,
        expansion_search: int | None = None,
        multi: bool = False,
        shard_size: int = 1024**3,
        bloom_filter: bool = True,
        read_only: bool = False,
        background_rotation: bool = False,
        max_pending_rotations: int = 2,
    ) -> None:
        if multi and self._wide:
            raise NotImplementedError("multi=True is not supported with 128-bit keys")
        self._path = Path(path)
        self._dirty = 0
        self._ef: int | None = None
        self._shared: Shared | None = None
        if (self._path / "MANIFEST").is_file():
            self._check_dir(self._path)
            self._shared = acquire(self._path, read_only)
        elif read_only:
            raise ValueError("read_only=True requires existing shards, but none were found")
        else:
            if ndim is None:
                raise ValueError(
                    f"{self._dim_name} is required when creating a new index "
                    "(no existing shards found)"
                )
            size = max(_MIN_SEGMENT, int(shard_size))
            kw: dict[str, Any] = {"ndim": int(ndim), "metric": _metric(metric)}
            if dtype is not None:
                kw["dtype"] = _dtype(dtype)
            binary = kw["metric"] in ("hamming", "nphd") or kw.get("dtype") == "b1"
            active = _ACTIVE_BINARY if binary else _ACTIVE_FLOAT
            # below 4 KiB, _rotate_if_full seals (after a whole add, as
            # iscc-usearch rotates), not the collection mid-batch
            kw["segment_size"] = min(active, size if size > _MIN_SEGMENT else 1 << 20)
            kw["max_segment_size"] = size
            if dtype is not None:
                # usearch's dtype is the precision the graph is searched
                # in: an explicit f32 gets a plain f32 graph, not the
                # Collection default of sq8 graph codes.
                kw["codes"] = "none"
            if connectivity is not None:
                kw["connectivity"] = int(connectivity)
            if expansion_add is not None:
                kw["expansion_add"] = int(expansion_add)
            if expansion_search is not None:
                kw["expansion_search"] = int(expansion_search)
            if self._wide or self._multi:
                kw["key_bits"] = 128
            self._shared = acquire(
                self._path, False, create=lambda: Collection.create(self._path, **kw)
            )
            if self._multi:
                (self._path / _MULTI_MARK).write_bytes(b"")
        self._shard_size = int(shard_size)
        self._tombs_at_open = int(self._c.stats()["tombstones"])
        self._tombs: set[Any] = set()
        self._replaced = 0

    # The constructor's argument that gives the dimensions.
    _dim_name = "ndim"

    @property
    def _c(self) -> Collection:
        """The collection (``RuntimeError`` once :meth:`close` ran, as
        iscc-usearch raises)."""
        coll = None if self._shared is None else self._shared.coll
        if coll is None:
            raise RuntimeError("index is closed")
        return coll

    def _writable(self) -> Collection:
        """The collection, for a write (``ReadOnlyError``, a
        ``RuntimeError``, when it is open read-only)."""
        c = self._c
        if c.read_only:
            raise ReadOnlyError("index is read-only")
        return c

    def _check_dir(self, path: Path) -> None:
        """Raises ``ValueError`` unless the index in ``path`` is one this
        class reads: the same key width, ``multi`` or not, NPHD or not."""
        meta = Collection.metadata(path)
        bits = meta["key_bits"]
        want = 128 if (self._wide or self._multi) else 64
        if bits != want or (path / _MULTI_MARK).is_file() != self._multi:
            raise ValueError(
                f"Key kind mismatch: {path} holds {bits}-bit keys, "
                f"{type(self).__name__} takes {128 if self._wide else 64}-bit keys"
            )
        if (meta["metric"] == "nphd") != self._nphd:
            raise ValueError(
                f"Metric mismatch: {path} holds a {meta['metric']} index, "
                f"which {type(self).__name__} does not open"
            )

    # -- conversions (the NPHD class overrides these) ----------------------

    def _vectors_in(self, vectors: Any, n: int) -> Any:
        v = np.asarray(vectors)
        if v.ndim == 1:
            v = v.reshape(1, -1)
        if len(v) != n:
            raise ValueError(_count_mismatch(n, len(v)))
        return v

    def _queries_in(self, vectors: Any) -> tuple[Any, bool]:
        q = np.asarray(vectors)
        return (q.reshape(1, -1), True) if q.ndim == 1 else (q, len(q) == 1)

    # Whether rows from the collection need `_out` before they are returned.
    _decodes = False

    def _out(self, v: Any) -> Any:
        return v

    def _single_key(self, keys: Any) -> bool:
        return _is_key128(keys) if self._wide else _is_single_key(keys)

    def _keys(self, keys: Any) -> np.ndarray:
        return _key128_array(keys) if self._wide else _key_array(keys)

    def _result_keys(self, keys: np.ndarray) -> np.ndarray:
        return _v16(keys) if self._wide else keys

    def _no_keys(self) -> np.ndarray:
        return np.empty(0, "V16" if self._wide else np.uint64)

    # -- writes --------------------------------------------------------------

    def _absent(self, keys: np.ndarray) -> np.ndarray:
        """Whether each of ``keys`` (as :meth:`_keys` gives them) is unused."""
        return ~self._c.contains(keys)

    def _fresh_keys(self, n: int) -> np.ndarray:
        """``n`` keys not in use, from the live count up."""
        out: list[np.ndarray] = []
        start, need = len(self._c), n
        while need:
            cand = np.arange(start, start + need, dtype=np.uint64)
            free = cand[self._absent(cand)]
            out.append(free)
            need -= len(free)
            start += len(cand)
        return np.concatenate(out) if out else np.empty(0, np.uint64)

    def add(
        self,
        keys: Any,
        vectors: Any,
        *,
        copy: bool = True,
        threads: int = 0,
        log: Any = False,
        progress: Any = None,
    ) -> np.ndarray:
        """Adds new keys (``None``: fresh keys, returned). A key already
        present raises ``ValueError`` and nothing is written."""
        if keys is None:
            if self._wide:
                raise ValueError("Auto-key generation not supported for 128-bit keys")
            n = 1 if self._single_vector(vectors) else len(vectors)
            k = self._fresh_keys(n)
        else:
            k = self._keys(keys)
        self._c.add(k, self._vectors_in(vectors, len(k)))
        self._readded(k)
        self._dirty += len(k)
        self._rotate_if_full()
        return k

    def _readded(self, k: np.ndarray) -> None:
        """Keys written again after a remove no longer count as
        tombstones; their old rows wait for :meth:`compact` still."""
        if not self._tombs:
            return
        for key in k.tolist():
            key = bytes(key) if isinstance(key, (bytes, np.void)) else key
            if key in self._tombs:
                self._tombs.discard(key)
                self._replaced += 1

    def _rotate_if_full(self) -> None:
        """Seals the rows written since the last seal into a segment once
        they would pass ``shard_size``, as iscc-usearch rotates its active
        shard after an add. Only for a ``shard_size`` below the smallest
        segment a collection rolls over at by itself (4 KiB): above it,
        ``segment_size`` does the same job."""
        if self._shard_size >= _MIN_SEGMENT:
            return
        active = int(self._c.stats()["active_vectors"])
        if active and _SHARD_HEADER + active * self._row_bytes() > self._shard_size:
            self._c.seal()

    def _row_bytes(self) -> int:
        """A row's bytes in a shard: its key and its vector."""
        width = {"f32": 4, "f16": 2, "i8": 1}.get(self._c.dtype, 0)
        vec = self._c.ndim * width if width else (self._c.ndim + 7) // 8 + 1
        return (16 if (self._wide or self._multi) else 8) + vec

    def _single_vector(self, vectors: Any) -> bool:
        return np.asarray(vectors).ndim == 1

    def add_once(self, keys: Any, vectors: Any, **kw: Any) -> np.ndarray | None:
        """Adds the keys not present yet (first occurrence in the batch
        wins); returns them (``None`` for a single key already present)."""
        if keys is None:
            raise ValueError("add_once() requires explicit keys")
        single = self._single_key(keys)
        k = self._keys(keys)
        v = self._vectors_in(vectors, len(k))
        pick = np.zeros(len(k), bool)
        pick[_first_of_each(k)] = True
        pick &= self._absent(k)
        if not pick.any():
            return None if single else self._no_keys()
        idx = np.flatnonzero(pick)
        return self.add(k[idx], self._take(v, idx))

    def _take(self, v: Any, idx: np.ndarray) -> Any:
        return v[idx]

    def upsert(self, keys: Any, vectors: Any, **kw: Any) -> np.ndarray:
        """Inserts or replaces (last occurrence in the batch wins)."""
        if keys is None:
            raise ValueError("upsert() requires explicit keys")
        k = self._keys(keys)
        v = self._vectors_in(vectors, len(k))
        idx = np.sort(len(k) - 1 - _first_of_each(k[::-1]))
        if len(idx) < len(k):
            k, v = k[idx], self._take(v, idx)
        c = self._c
        before = int(c.stats()["tombstones"])
        c.upsert(k, v)
        # the replaced rows that sealed segments still hold
        self._replaced += max(0, int(c.stats()["tombstones"]) - before)
        self._readded(k)
        self._dirty += len(k)
        self._rotate_if_full()
        return k

    def remove(self, keys: Any, *, compact: bool = False, **kw: Any) -> int:
        """Deletes keys (missing ones are ignored); returns how many."""
        c = self._c
        k = self._keys(keys)
        present = k[c.contains(k)] if len(k) else k
        before = int(c.stats()["tombstones"])
        n = c.remove(k)
        # Rows of sealed segments leave a tombstone (rows not sealed yet
        # are dropped at once), as iscc-usearch's view shards do; counted
        # here because the optimizer may reclaim them before compact().
        sealed = max(0, int(c.stats()["tombstones"]) - before)
        for key in present[: min(sealed, len(present))].tolist():
            self._tombs.add(bytes(key) if isinstance(key, (bytes, np.void)) else key)
        self._dirty += n
        if compact:
            self.compact()
        return n

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def compact(self) -> int:
        """Rewrites segments holding deleted or replaced rows; returns how
        many such rows there were since the index was opened or last
        compacted (the background optimizer may have dropped some of them
        already: they count, as iscc-usearch would have dropped them here)."""
        c = self._writable()
        dead = max(int(c.stats()["tombstones"]), self.tombstone_count + self._replaced)
        c.compact()
        self._tombs.clear()
        self._replaced = 0
        self._tombs_at_open = 0
        return dead

    def reset(self) -> None:
        """Deletes every vector (durably: unlike iscc-usearch, the rows do
        not come back when the directory is opened again)."""
        keys: Any = list(self._c.keys())
        if not self._wide:
            keys = np.array(keys, dtype=np.uint64)
        if len(keys):
            self._dirty += self._c.remove(keys)

    # -- reads ---------------------------------------------------------------

    def search(
        self,
        vectors: Any,
        count: int = 10,
        *,
        radius: float = math.inf,
        threads: int = 0,
        exact: bool = False,
        log: Any = False,
        progress: Any = None,
    ) -> Matches | BatchMatches:
        """The ``count`` nearest: ``Matches`` for one query (1-D, or 2-D
        with one row), else ``BatchMatches``."""
        if count < 1:
            raise ValueError("count must be at least 1")
        q, single = self._queries_in(vectors)
        r = self._c.search(
            q,
            int(count),
            radius=None if math.isinf(radius) else float(radius),
            exact=exact,
            expansion=self._ef,
            threads=threads or None,
        )
        keys = np.atleast_2d(self._result_keys(np.asarray(r.keys)))
        dist = np.atleast_2d(np.asarray(r.distances, dtype=np.float32))
        counts = np.atleast_1d(np.asarray(r.counts, dtype=np.int64))
        if single:
            n = int(counts[0])
            return Matches(keys[0, :n].copy(), dist[0, :n].copy())
        nq = len(counts)
        out_k = np.zeros((nq, count), keys.dtype)
        out_d = np.full((nq, count), np.inf, np.float32)
        w = min(count, keys.shape[1]) if keys.ndim == 2 else 0
        valid = np.arange(w)[None, :] < counts[:, None]
        out_k[:, :w][valid] = keys[:, :w][valid]
        out_d[:, :w] = np.where(valid, dist[:, :w], np.inf)
        return BatchMatches(out_k, out_d, counts)

    def get(self, keys: Any, dtype: Any = None) -> Any:
        """A vector (or ``None``) for one key; a list for many."""
        if self._single_key(keys):
            if self._wide:
                v = self._c.get(_key128(keys))
            elif not 0 <= int(keys) < 2**64:
                return None
            else:
                v = self._c.get(int(keys))
            return None if v is None else self._cast(self._out(v), dtype)
        got = self._c.get(self._keys(keys))
        if dtype is None and not self._decodes:
            return got  # already a list of rows (None where missing)
        return [None if v is None else self._cast(self._out(v), dtype) for v in got]

    @staticmethod
    def _cast(v: Any, dtype: Any) -> Any:
        return v if dtype is None else np.asarray(v).astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def contains(self, keys: Any) -> Any:
        """A bool for one key; a bool array for many."""
        if type(keys) is int and not self._wide:  # the common case, fast
            return keys in self._c
        if self._single_key(keys):
            return self.__contains__(keys)
        return self._c.contains(self._keys(keys))

    def __contains__(self, key: Any) -> bool:
        if not self._single_key(key):
            return False
        return (_key128(key) if self._wide else int(key)) in self._c

    def count(self, keys: Any) -> Any:
        """Vectors stored under each key (0 or 1)."""
        if self._single_key(keys):
            return int(self.__contains__(keys))
        return self._c.contains(self._keys(keys)).astype(np.uint64)

    @property
    def keys(self) -> ShardedIndexedKeys:
        """Live keys, a lazy view (``len``, iteration, indexing, slicing,
        ``np.asarray``)."""
        return ShardedIndexedKeys(self)

    @property
    def vectors(self) -> ShardedIndexedVectors:
        """Live vectors in the order of :attr:`keys`, a lazy view."""
        return ShardedIndexedVectors(self)

    def __len__(self) -> int:
        return len(self._c)

    @property
    def size(self) -> int:
        return len(self._c)

    # -- lifecycle -------------------------------------------------------------

    @property
    def dirty(self) -> int:
        """Keys added or removed since the last :meth:`save`."""
        return 0 if self._c.read_only else self._dirty

    def save(self, path_or_buffer: Any = None, progress: Any = None) -> None:
        """Makes every write durable now (fsync); ``path_or_buffer`` is
        refused as in iscc-usearch (the directory is the index).
        ``progress(done, total)`` is called with the rows made durable."""
        if path_or_buffer is not None:
            raise TypeError(
                f"{type(self).__name__}.save() does not accept a path argument. "
                "Files are saved to the directory specified at construction time."
            )
        c = self._writable()
        c.flush()
        self._dirty = 0
        if progress is not None:
            n = len(c)
            progress(n, n)

    def load(self, path_or_buffer: Any = None, progress: Any = None) -> None:
        """Reopens this object, writable, on the index in the directory
        ``path_or_buffer`` (default: its own). Every acknowledged write is
        there (a writer of the same directory is closed first, sealing its
        tail); settings come from that directory's manifest and ``dirty``
        is 0. ``FileNotFoundError`` when the directory holds no index,
        ``ValueError`` when it holds one of another kind (key width,
        ``multi``, NPHD), ``TypeError`` for a buffer."""
        self._reopen(path_or_buffer, read_only=False)

    def view(self, path_or_buffer: Any = None, progress: Any = None) -> None:
        """As :meth:`load`, read-only: segments memory-mapped, writes raise
        :class:`sagitta.ReadOnlyError` (a ``RuntimeError``); other
        readers and one writer may have the directory open meanwhile."""
        self._reopen(path_or_buffer, read_only=True)

    def _reopen(self, path_or_buffer: Any, read_only: bool) -> None:
        if path_or_buffer is None:
            path = self._path
        elif isinstance(path_or_buffer, (str, os.PathLike)):
            path = Path(path_or_buffer)
        else:
            raise TypeError("load() and view() take a directory: the index is not a buffer")
        if not (path / "MANIFEST").is_file():
            raise FileNotFoundError(f"no index in {path}")
        self._check_dir(path)
        old, self._shared = self._shared, None
        writer_here = old is not None and old.coll is not None and not old.coll.read_only
        if writer_here and path.resolve() == self._path.resolve():
            release(old)  # the last user closes it, sealing its tail
            old = None
        try:
            self._shared = acquire(path, read_only)
        except BaseException:
            self._shared = old
            raise
        if old is not None:
            release(old)
        new = self._c
        self._path = path
        self._dirty = 0
        self._ef = None
        self._tombs_at_open = int(new.stats()["tombstones"])
        self._tombs.clear()
        self._replaced = 0

    def rebuild_bloom(self, save: bool = True, log_progress: bool = True) -> int:
        """Rebuilds the bloom filter over every live key; returns their
        number."""
        return self._writable().rebuild_bloom()

    def drain_rotations(self, timeout: float | None = None) -> None:
        """Nothing to wait for: rows are searchable once written, sealing
        and indexing go on in the background."""

    def close(self) -> None:
        """Seals the tail (nothing to replay at the next open) and releases
        the directory; later calls raise ``RuntimeError``. Closing twice
        is allowed."""
        if self._shared is not None:
            release(self._shared)
            self._shared = None

    def __enter__(self) -> ShardedIndex:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    @staticmethod
    def metadata(path: str | os.PathLike[str]) -> dict[str, Any] | None:
        """The index's settings and sealed row count, read from its
        manifest without opening it; ``None`` when ``path`` holds none."""
        if not (Path(path) / "MANIFEST").is_file():
            return None
        meta = dict(Collection.metadata(path))
        meta["dimensions"] = meta["ndim"]
        return meta

    def stats(self) -> dict[str, Any]:
        s = self._c.stats()
        return {
            "total_vectors": len(self._c),
            "dimensions": self.ndim,
            "metric": self.metric,
            "dtype": self.dtype,
            "connectivity": self.connectivity,
            "view_shards": s["segments"],
            "active_shard_vectors": s["active_vectors"],
            "shard_size": self._shard_size,
            "dirty": self.dirty,
            "tombstones": s["tombstones"],
            "bloom_filter": True,
            "memory_usage": s["bytes_in_memory"],
            "path": str(self._path),
            "read_only": self.read_only,
        }

    # -- properties ------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return self._c.ndim

    @property
    def metric(self) -> Any:
        """The metric as usearch's ``MetricKind`` (this package's
        :class:`MetricKind` without usearch installed)."""
        return metric_kind(self._c.metric)

    @property
    def metric_kind(self) -> Any:
        """As :attr:`metric`."""
        return metric_kind(self._c.metric)

    @property
    def dtype(self) -> Any:
        """The stored scalar kind as usearch's ``ScalarKind`` (this
        package's :class:`ScalarKind` without usearch installed)."""
        return scalar_kind(self._c.dtype)

    @property
    def multi(self) -> bool:
        return self._multi

    @property
    def connectivity(self) -> int:
        return self._c.connectivity

    @property
    def expansion_add(self) -> int:
        return self._c.expansion_add

    @expansion_add.setter
    def expansion_add(self, value: int) -> None:
        # As in iscc-usearch, later graphs are built with it (segments
        # already built keep theirs); not kept across a reopen.
        if self.read_only:
            raise ReadOnlyError("expansion_add: the index is open read-only")
        self._c.expansion_add = int(value)

    @property
    def expansion_search(self) -> int:
        return self._ef if self._ef is not None else self._c.expansion_search

    @expansion_search.setter
    def expansion_search(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError("expansion_search must be at least 1")
        self._ef = int(value)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def read_only(self) -> bool:
        return self._c.read_only

    @property
    def shard_count(self) -> int:
        """Sealed segments, and the rows not sealed yet as one more (as
        iscc-usearch counts its active shard)."""
        s = self._c.stats()
        return int(s["segments"]) + (1 if int(s["active_vectors"]) else 0)

    @property
    def tombstone_count(self) -> int:
        """Keys removed from sealed segments and not written again since
        the index was opened or compacted (iscc-usearch's tombstones;
        removing a row not sealed yet leaves none)."""
        self._c  # noqa: B018 - RuntimeError once closed
        return self._tombs_at_open + len(self._tombs)

    @property
    def memory_usage(self) -> int:
        return int(self._c.stats()["bytes_in_memory"])

    @property
    def serialized_length(self) -> int:
        """Bytes of the rows not sealed yet (iscc-usearch's active shard):
        0 when read-only. ``stats()["bytes_on_disk"]`` has the whole."""
        s = self._c.stats()
        if self._c.read_only:
            return 0
        return _SHARD_HEADER + int(s["active_vectors"]) * self._row_bytes()

    @property
    def capacity(self) -> int:
        """Rows not sealed yet (iscc-usearch's active shard's capacity):
        0 when read-only."""
        if self._c.read_only:
            return 0
        return int(self._c.stats()["active_vectors"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} vectors in {self.shard_count} segments, "
            f"ndim={self.ndim}, path={self._path})"
        )

    def _unsupported(name: str) -> Any:
        def refuse(self: ShardedIndex, *args: Any, **kw: Any) -> Any:
            raise NotImplementedError(f"{name}() not supported for {type(self).__name__}")

        refuse.__name__ = name
        refuse.__doc__ = "Not supported (as in iscc-usearch): raises ``NotImplementedError``."
        return refuse

    clear = _unsupported("clear")
    rename = _unsupported("rename")
    join = _unsupported("join")
    cluster = _unsupported("cluster")
    pairwise_distance = _unsupported("pairwise_distance")
    copy = _unsupported("copy")
    del _unsupported


def _code_bytes(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    a = np.asarray(v)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise TypeError("a code is bytes or a 1-D uint8 array")
    return a.tobytes()


class ShardedNphdIndexedVectors(ShardedIndexedVectors):
    """The live codes of an NPHD index (``ShardedNphdIndex.vectors``):
    each a uint8 array of its own length. ``np.asarray`` of the view
    needs codes of one length (``ValueError`` otherwise)."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        items = list(self._iter())
        lengths = sorted({len(v) for v in items})
        if len(lengths) > 1:
            raise ValueError(
                f"Cannot convert to array: vectors have different lengths {lengths}. "
                "Use list(idx.vectors) instead."
            )
        if not items:
            return np.empty(0, dtype=dtype or np.uint8)
        return np.stack(items).astype(dtype or np.uint8, copy=False)


class ShardedNphdIndex(ShardedIndex):
    """iscc-usearch's ``ShardedNphdIndex``: variable-length binary codes
    (packed uint8 arrays or ``bytes``, up to ``max_dim`` bits) under the
    normalized prefix Hamming distance. A code longer than ``max_dim``
    bits raises ``ValueError`` (iscc-usearch truncates it silently)."""

    _nphd = True
    _dim_name = "max_dim"

    def __init__(
        self,
        *,
        max_dim: int | None = None,
        path: str | os.PathLike[str],
        shard_size: int = 1024**3,
        connectivity: int | None = None,
        expansion_add: int | None = None,
        expansion_search: int | None = None,
        **kwargs: Any,
    ) -> None:
        for ignored in ("ndim", "metric", "dtype"):
            kwargs.pop(ignored, None)
        super().__init__(
            path=path,
            ndim=max_dim,
            metric="nphd",
            shard_size=shard_size,
            connectivity=connectivity,
            expansion_add=expansion_add,
            expansion_search=expansion_search,
            **kwargs,
        )

    def _single_vector(self, vectors: Any) -> bool:
        if isinstance(vectors, (bytes, bytearray, memoryview)):
            return True
        return isinstance(vectors, np.ndarray) and vectors.ndim == 1

    def _codes(self, vectors: Any) -> list[bytes]:
        if self._single_vector(vectors):
            return [_code_bytes(vectors)]
        if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
            return [r.tobytes() for r in np.ascontiguousarray(vectors, dtype=np.uint8)]
        return [_code_bytes(v) for v in vectors]

    def _vectors_in(self, vectors: Any, n: int) -> Any:
        codes = self._codes(vectors)
        if len(codes) != n:
            raise ValueError(_count_mismatch(n, len(codes)))
        return codes

    def _take(self, v: Any, idx: np.ndarray) -> Any:
        return [v[i] for i in idx]

    def _queries_in(self, vectors: Any) -> tuple[Any, bool]:
        codes = self._codes(vectors)
        single = self._single_vector(vectors) or len(codes) == 1
        return codes, single

    _decodes = True

    def _out(self, v: Any) -> Any:
        return np.frombuffer(v, dtype=np.uint8).copy()

    @property
    def vectors(self) -> ShardedNphdIndexedVectors:
        """Live codes in the order of :attr:`keys`, a lazy view."""
        return ShardedNphdIndexedVectors(self)

    @property
    def max_dim(self) -> int:
        """Longest code, in bits."""
        return self._c.ndim

    @property
    def max_bytes(self) -> int:
        return self._c.ndim // 8

    @property
    def ndim(self) -> int:
        """``max_dim + 8``, as iscc-usearch reports it (its rows carry a
        length byte)."""
        return self._c.ndim + 8

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self)} vectors in {self.shard_count} segments, "
            f"max_dim={self.max_dim}, path={self._path})"
        )


class ShardedIndex128(ShardedIndex):
    """``ShardedIndex`` with 128-bit keys: ``bytes(16)`` or ``V16`` arrays
    in, the same bytes out (``V16`` arrays; ``bytes`` for single keys)."""

    _wide = True

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("key_kind", None)
        super().__init__(**kwargs)


class ShardedNphdIndex128(ShardedNphdIndex):
    """``ShardedNphdIndex`` with 128-bit keys (the ISCC-ID case)."""

    _wide = True

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("key_kind", None)
        super().__init__(**kwargs)


# The most bytes of rows (as a built segment counts them) not sealed yet:
# iscc-usearch keeps its active shard in memory up to shard_size, Sagitta
# its mutable part, which a search scans row by row. 64 MiB of float rows
# (32k of 384-d f32 with their graph share) is some 50 MB to scan; the
# same 64 MiB of 256-bit codes is 370k rows (their graph share is most of
# a built row's bytes) and only 12 MB of codes, so at 100M codes the
# flushes left 260+ segments for every open and key lookup to walk.
# Codes get 256 MiB: 1.49M 256-bit codes, 48 MB to scan.
_ACTIVE_FLOAT = 64 << 20
_ACTIVE_BINARY = 256 << 20

# The smallest segment_size a collection takes (the store's rule); a
# smaller shard_size seals after the write that passes it
# (ShardedIndex._rotate_if_full).
_MIN_SEGMENT = LIMITS["min_segment_size"]
# A shard's bytes before its rows, as the rotation rule counts them.
_SHARD_HEADER = 64


def _count_mismatch(keys: int, vectors: int) -> str:
    return f"Number of keys ({keys}) must match number of vectors ({vectors})"


# An empty file marking a multi=True directory (its collection has 128-bit
# ids: key << 64 | ordinal).
_MULTI_MARK = "ISCC_MULTI"


class _Multi:
    """``multi=True``: several vectors per key. Vector ``j`` of key ``k`` is
    stored under the 128-bit id ``k << 64 | j``; ordinals run 0, 1, ... per
    key (vectors of a key are never removed one by one: ``remove`` and
    ``upsert`` raise ``ValueError``, as in iscc-usearch)."""

    _multi = True
    _c: Collection

    @staticmethod
    def _ids(keys: np.ndarray, ords: Any) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.uint64)
        return np.stack([keys, np.broadcast_to(np.asarray(ords, np.uint64), keys.shape)], 1)

    def _counts(self, keys: np.ndarray) -> np.ndarray:
        """Vectors stored under each of ``keys`` (uint64 1-D)."""
        uk, inv = np.unique(keys, return_inverse=True)
        counts = np.zeros(len(uk), np.uint64)
        alive = np.arange(len(uk))
        j = 0
        while len(alive):
            alive = alive[self._c.contains(self._ids(uk[alive], j))]
            counts[alive] += np.uint64(1)
            j += 1
        return counts[inv.reshape(-1)]

    def _absent(self, keys: np.ndarray) -> np.ndarray:
        return self._counts(keys) == 0

    def add(self, keys: Any, vectors: Any, **kw: Any) -> np.ndarray:
        """Adds vectors; a key already present gets one more."""
        if keys is None:
            n = 1 if self._single_vector(vectors) else len(vectors)  # type: ignore[attr-defined]
            k = self._fresh_keys(n)
        else:
            k = _key_array(keys)
        v = self._vectors_in(vectors, len(k))  # type: ignore[attr-defined]
        # ordinal = vectors stored so far + earlier rows of the key in this batch
        _, inv = np.unique(k, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.argsort(inv, kind="stable")
        sorted_inv = inv[order]
        earlier = np.empty(len(k), np.uint64)
        earlier[order] = np.arange(len(k)) - np.searchsorted(sorted_inv, sorted_inv)
        self._c.add(self._ids(k, self._counts(k) + earlier), v)
        self._dirty += len(k)  # type: ignore[attr-defined]
        self._rotate_if_full()  # type: ignore[attr-defined]
        return k

    def upsert(self, keys: Any, vectors: Any, **kw: Any) -> np.ndarray:
        raise ValueError("upsert() requires multi=False")

    def remove(self, keys: Any, *, compact: bool = False, **kw: Any) -> int:
        raise ValueError("remove() requires multi=False")

    def reset(self) -> None:
        keys = list(self._c.keys())
        if keys:
            self._dirty += self._c.remove(keys)  # type: ignore[attr-defined]

    def _result_keys(self, keys: np.ndarray) -> np.ndarray:
        return keys[..., 0]

    def get(self, keys: Any, dtype: Any = None) -> Any:
        """All vectors of a key as a 2-D array (``None`` if it has none);
        a list of those for many keys."""
        single = _is_single_key(keys)
        if single and not 0 <= int(keys) < 2**64:
            return None
        k = _key_array(keys)
        counts = self._counts(k)
        out = []
        for key, n in zip(k, counts):
            if n == 0:
                out.append(None)
                continue
            rows = self._c.get(self._ids(np.full(int(n), key, np.uint64), np.arange(int(n))))
            rows = [self._cast(self._out(r), dtype) for r in rows]  # type: ignore[attr-defined]
            out.append(rows if self._nphd else np.stack(rows))  # type: ignore[attr-defined]
        return out[0] if single else out

    def contains(self, keys: Any) -> Any:
        if _is_single_key(keys):
            return self.__contains__(keys)
        return self._c.contains(self._ids(_key_array(keys), 0))

    def __contains__(self, key: Any) -> bool:
        return _is_single_key(key) and 0 <= int(key) < 2**64 and (int(key) << 64) in self._c

    def count(self, keys: Any) -> Any:
        if _is_single_key(keys):
            return int(self._counts(_key_array(keys))[0]) if 0 <= int(keys) < 2**64 else 0
        return self._counts(_key_array(keys))


class _MultiIndex(_Multi, ShardedIndex):
    """``ShardedIndex(multi=True)``."""


class _MultiNphdIndex(_Multi, ShardedNphdIndex):
    """``ShardedNphdIndex(multi=True)``."""
