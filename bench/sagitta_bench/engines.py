"""One small adapter per engine, all with the same interface.

Every adapter indexes unit-norm float32 vectors for cosine similarity
(inner product on normalised vectors where the engine has no cosine), with
row numbers as ids, and exposes one search-time knob (HNSW ``ef``).

``opened`` says how ``open`` brings a saved index back, which is what the
search process's resident memory means: memory-mapped indexes hold only
the pages the searches touched, loaded ones hold all of it.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import numpy as np

MEMORY_MAPPED = "memory-mapped from disk (pages are read in as searches touch them)"
LOADED = "loaded into memory (the whole file is read at open)"


class Engine:
    """The adapter interface."""

    name = "?"
    knob = "ef"
    family = "hnsw"
    metrics = frozenset({"cos"})
    # How `open` brings the saved index back (the report prints it).
    opened = "?"

    def __init__(self, m: int, ef_construction: int) -> None:
        self.m = m
        self.ef_construction = ef_construction

    def version(self) -> str:
        raise NotImplementedError

    def build(self, base: np.ndarray, threads: int) -> None:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        raise NotImplementedError

    def open(self, path: Path) -> None:
        """Replaces the in-memory index by the one saved at ``path``."""
        raise NotImplementedError

    def set_knob(self, value: int) -> None:
        raise NotImplementedError

    def search_one(self, q: np.ndarray, k: int) -> np.ndarray:
        """One query on the calling thread; returns ids (k,)."""
        raise NotImplementedError

    def search_batch(self, queries: np.ndarray, k: int, threads: int) -> np.ndarray:
        """All queries on ``threads`` threads; returns ids (n, k)."""
        raise NotImplementedError


class Sagitta(Engine):
    name = "sagitta-hnsw"
    opened = MEMORY_MAPPED  # sagitta.Index.open
    dtype: str | None = None  # None: the library's default storage

    def version(self) -> str:
        import sagitta

        ix = getattr(self, "index", None)
        if ix is None or not hasattr(ix, "keep_full"):
            return f"{sagitta.__version__} ({sagitta.isa()})"
        storage = ix.dtype + (" + f32 rerank" if ix.keep_full else "")
        return f"{sagitta.__version__} ({sagitta.isa()}, {storage})"

    def build(self, base, threads):
        import sagitta

        self.index = sagitta.Index(
            base.shape[1],
            metric="cos",
            connectivity=self.m,
            expansion_add=self.ef_construction,
            **({"dtype": self.dtype} if self.dtype else {}),
        )
        self.index.add(np.arange(len(base), dtype=np.uint64), base, threads=threads)

    def save(self, path):
        self.index.save(path / "index.sgt")

    def open(self, path):
        import sagitta

        self.index = sagitta.Index.open(path / "index.sgt")

    def set_knob(self, value):
        self.index.expansion_search = value

    def search_one(self, q, k):
        return self.index.search(q, k, threads=1).keys

    def search_batch(self, queries, k, threads):
        return self.index.search(queries, k, threads=threads).keys


class SagittaF32(Sagitta):
    """Sagitta with float32 vectors traversed as they are (``dtype="f32"``):
    the storage before sq8 graph codes became the default, for reference."""

    name = "sagitta-hnsw-f32"
    dtype = "f32"


class SagittaF16(SagittaF32):
    """Sagitta with float16 vectors traversed as they are (``dtype="f16"``)."""

    name = "sagitta-hnsw-f16"
    dtype = "f16"


class SagittaCollection(Engine):
    """A default ``sagitta.Collection`` (f32 vectors, sq8 graph codes):
    loaded by ``add`` in batches of 10,000, then ``optimize()`` (the
    background optimizer builds and merges), closed, and reopened
    read-only for the searches."""

    name = "sagitta-collection"
    opened = MEMORY_MAPPED  # sagitta.Collection.open(read_only=True)

    def version(self) -> str:
        import sagitta

        return f"{sagitta.__version__} ({sagitta.isa()}, collection)"

    def build(self, base, threads):
        import sagitta

        self.path = Path(os.environ["SAGITTA_BENCH_WORKDIR"]) / "collection"
        c = sagitta.Collection.create(
            self.path,
            ndim=base.shape[1],
            metric="cos",
            connectivity=self.m,
            expansion_add=self.ef_construction,
        )
        # Each add's wall time: how long the load ever made a writer wait
        # (a stall behind the flush or the optimizer shows as a slow batch).
        batches = []
        t0 = time.perf_counter()
        for at in range(0, len(base), 10_000):
            rows = base[at : at + 10_000]
            t = time.perf_counter()
            c.add(np.arange(at, at + len(rows), dtype=np.uint64), rows)
            batches.append(time.perf_counter() - t)
        loaded = time.perf_counter() - t0
        segments_loaded = c.stats()["segments"]
        c.optimize()
        b = np.array(batches)
        self.build_extra = {
            "load_s": loaded,
            "optimize_s": time.perf_counter() - t0 - loaded,
            "batch_rows": 10_000,
            "batch_median_s": float(np.median(b)),
            "batch_p99_s": float(np.percentile(b, 99)),
            "batch_max_s": float(b.max()),
            "batch_max_over_median": float(b.max() / np.median(b)),
            "segments_after_load": segments_loaded,
            "segments": c.stats()["segments"],
        }
        c.close()

    def save(self, path):
        pass  # the collection is on disk as it is built

    def open(self, path):
        import sagitta

        self.coll = sagitta.Collection.open(Path(path) / "collection", read_only=True)

    def set_knob(self, value):
        self.ef = value

    def search_one(self, q, k):
        return self.coll.search(q, k, expansion=self.ef, threads=1).keys

    def search_batch(self, queries, k, threads):
        return self.coll.search(queries, k, expansion=self.ef, threads=threads).keys


class FaissHNSW(Engine):
    name = "faiss-hnsw"
    opened = LOADED  # faiss.read_index without IO_FLAG_MMAP

    def version(self) -> str:
        import faiss

        return faiss.__version__

    def build(self, base, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexHNSWFlat(base.shape[1], self.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = self.ef_construction
        self.index.add(np.ascontiguousarray(base))

    def save(self, path):
        import faiss

        faiss.write_index(self.index, str(path / "index.faiss"))

    def open(self, path):
        import faiss

        self.index = faiss.read_index(str(path / "index.faiss"))

    def set_knob(self, value):
        self.index.hnsw.efSearch = value

    def search_one(self, q, k):
        import faiss

        faiss.omp_set_num_threads(1)
        return self.index.search(q[None, :], k)[1][0]

    def search_batch(self, queries, k, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        return self.index.search(queries, k)[1]


class Hnswlib(Engine):
    name = "hnswlib"
    opened = LOADED  # Index.load_index

    def version(self) -> str:
        import importlib.metadata

        import hnswlib  # noqa: F401 - the search process imports before it measures

        return importlib.metadata.version("hnswlib")

    def build(self, base, threads):
        import hnswlib

        self.dim, self.n = base.shape[1], len(base)
        self.index = hnswlib.Index(space="ip", dim=self.dim)
        self.index.init_index(max_elements=self.n, ef_construction=self.ef_construction, M=self.m)
        self.index.set_num_threads(threads)
        self.index.add_items(np.ascontiguousarray(base), np.arange(self.n))

    def save(self, path):
        self.index.save_index(str(path / "index.hnswlib"))
        # hnswlib's loader needs the shape; the search process reads it here.
        (path / "shape.txt").write_text(f"{self.dim} {self.n}")

    def open(self, path):
        import hnswlib

        self.dim, self.n = map(int, (path / "shape.txt").read_text().split())
        self.index = hnswlib.Index(space="ip", dim=self.dim)
        self.index.load_index(str(path / "index.hnswlib"), max_elements=self.n)

    def set_knob(self, value):
        self.index.set_ef(value)

    def search_one(self, q, k):
        return self.index.knn_query(q, k=k, num_threads=1)[0][0]

    def search_batch(self, queries, k, threads):
        return self.index.knn_query(queries, k=k, num_threads=threads)[0]


class USearch(Engine):
    name = "usearch-hnsw"
    opened = MEMORY_MAPPED  # Index.restore(view=True)

    def version(self) -> str:
        import usearch

        return usearch.__version__

    def build(self, base, threads):
        from usearch.index import Index

        self.index = Index(
            ndim=base.shape[1],
            metric="cos",
            dtype="f32",
            connectivity=self.m,
            expansion_add=self.ef_construction,
        )
        self.index.add(np.arange(len(base)), np.ascontiguousarray(base), threads=threads)

    def save(self, path):
        self.index.save(str(path / "index.usearch"))

    def open(self, path):
        from usearch.index import Index

        self.index = Index.restore(str(path / "index.usearch"), view=True)

    def set_knob(self, value):
        self.index.expansion_search = value

    def search_one(self, q, k):
        return self.index.search(q, k, threads=1).keys

    def search_batch(self, queries, k, threads):
        return self.index.search(queries, k, threads=threads).keys


class LanceHNSW(Engine):
    """LanceDB's IVF_HNSW_FLAT with one partition: plain HNSW over the data."""

    name = "lancedb-hnsw"
    # Lance reads local files with pread (not mmap) and keeps the index in
    # its own in-process cache once a search has needed it.
    opened = "read from disk on demand (pread, not mmap) into LanceDB's in-process caches"

    def version(self) -> str:
        import lancedb

        return lancedb.__version__

    def _create_table(self, base, threads):
        """Writes ids and vectors as a LanceDB table in the work dir."""
        import lancedb
        import pyarrow as pa

        os.environ.setdefault("LANCE_CPU_THREADS", str(threads))
        self.path = Path(os.environ["SAGITTA_BENCH_WORKDIR"]) / "lancedb"
        db = lancedb.connect(str(self.path))
        dims = base.shape[1]
        vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(base).ravel()), dims)
        table = pa.table({"id": pa.array(np.arange(len(base), dtype=np.int64)), "vector": vec})
        self.table = db.create_table("bench", table, mode="overwrite")

    def build(self, base, threads):
        self._create_table(base, threads)
        self.table.create_index(
            metric="cosine",
            index_type="IVF_HNSW_FLAT",
            num_partitions=1,
            m=self.m,
            ef_construction=self.ef_construction,
        )

    def save(self, path):
        pass  # LanceDB writes as it builds; its directory is measured

    def open(self, path):
        import lancedb

        self.path = Path(path) / "lancedb"
        self.table = lancedb.connect(str(self.path)).open_table("bench")

    def set_knob(self, value):
        self.ef = value

    def search_one(self, q, k):
        res = self.table.search(q).limit(k).nprobes(1).ef(self.ef).select(["id"]).to_arrow()
        return res.column("id").to_numpy()

    def search_batch(self, queries, k, threads):
        with ThreadPoolExecutor(threads) as pool:
            rows = list(pool.map(lambda q: self.search_one(q, k), queries))
        out = np.full((len(queries), k), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out


def nlist_for(n: int) -> int:
    """IVF partitions: about 400 vectors each (250 for 100k)."""
    return max(16, n // 400)


class FaissIVFRaBitQ(Engine):
    """faiss IndexIVFRaBitQ (1-bit RaBitQ codes) with an exact refine of
    5 x k candidates (IndexRefineFlat)."""

    name = "faiss-ivf-rabitq"
    opened = LOADED
    knob = "nprobe"
    family = "ivf"

    def version(self) -> str:
        import faiss

        return faiss.__version__

    def build(self, base, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        d = base.shape[1]
        self.quantizer = faiss.IndexFlatIP(d)
        ivf = faiss.IndexIVFRaBitQ(
            self.quantizer, d, nlist_for(len(base)), faiss.METRIC_INNER_PRODUCT
        )
        ivf.train(np.ascontiguousarray(base))
        self.index = faiss.IndexRefineFlat(ivf)
        self.index.k_factor = 5
        self.index.add(np.ascontiguousarray(base))

    def save(self, path):
        import faiss

        faiss.write_index(self.index, str(path / "index.faiss"))

    def open(self, path):
        import faiss

        self.index = faiss.read_index(str(path / "index.faiss"))
        self.index.k_factor = 5

    def set_knob(self, value):
        import faiss

        faiss.extract_index_ivf(self.index).nprobe = value

    def search_one(self, q, k):
        import faiss

        faiss.omp_set_num_threads(1)
        return self.index.search(q[None, :], k)[1][0]

    def search_batch(self, queries, k, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        return self.index.search(queries, k)[1]


class LanceIVF(LanceHNSW):
    """LanceDB IVF index (set by subclasses); knob: nprobes."""

    knob = "nprobe"
    family = "ivf"
    index_type = "IVF_PQ"
    extra: ClassVar[dict] = {}

    def build(self, base, threads):
        self._create_table(base, threads)
        dims = base.shape[1]
        self.table.create_index(
            metric="cosine",
            index_type=self.index_type,
            num_partitions=nlist_for(len(base)),
            **{k: (v(dims) if callable(v) else v) for k, v in self.extra.items()},
        )

    def set_knob(self, value):
        self.nprobes = value

    refine = 5  # exact rerank of refine x k candidates; 0: none
    # ~10-30 ms per query here: the first 200 queries, one pass.
    max_queries = 200
    max_passes = 1

    def search_one(self, q, k):
        s = self.table.search(q).limit(k).nprobes(self.nprobes)
        if self.refine:
            s = s.refine_factor(self.refine)
        res = s.select(["id"]).to_arrow()
        return res.column("id").to_numpy()


class LanceIVFPQ(LanceIVF):
    name = "lancedb-ivf-pq"
    index_type = "IVF_PQ"
    # 8 dimensions per sub-vector (48 for 384-d), 8-bit codes
    extra: ClassVar[dict] = {"num_sub_vectors": lambda d: max(1, d // 8), "num_bits": 8}


class LanceIVFRQ(LanceIVF):
    name = "lancedb-ivf-rq"
    index_type = "IVF_RQ"
    extra: ClassVar[dict] = {"num_bits": 1}  # explicit: the legacy default is 8


class SagittaBits(Sagitta):
    name = "sagitta-hnsw-hamming"
    metrics = frozenset({"hamming"})

    def build(self, base, threads):
        import sagitta

        self.index = sagitta.Index(
            base.shape[1] * 8,
            metric="hamming",
            connectivity=self.m,
            expansion_add=self.ef_construction,
        )
        self.index.add(np.arange(len(base), dtype=np.uint64), base, threads=threads)


class SagittaNPHD(Sagitta):
    """NPHD over variable-length codes: no peer engine has this metric."""

    name = "sagitta-hnsw-nphd"
    metrics = frozenset({"nphd"})

    def build(self, base, threads):
        import sagitta

        self.index = sagitta.Index(
            256, metric="nphd", connectivity=self.m, expansion_add=self.ef_construction
        )
        self.index.add(np.arange(len(base), dtype=np.uint64), base, threads=threads)

    def search_batch(self, queries, k, threads):
        return self.index.search(list(queries), k, threads=threads).keys


class FaissBinaryHNSW(FaissHNSW):
    name = "faiss-binary-hnsw"
    metrics = frozenset({"hamming"})

    def build(self, base, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        self.index = faiss.IndexBinaryHNSW(base.shape[1] * 8, self.m)
        self.index.hnsw.efConstruction = self.ef_construction
        self.index.add(np.ascontiguousarray(base))

    def save(self, path):
        import faiss

        faiss.write_index_binary(self.index, str(path / "index.faiss"))

    def open(self, path):
        import faiss

        self.index = faiss.read_index_binary(str(path / "index.faiss"))


class USearchBits(USearch):
    name = "usearch-hnsw-hamming"
    metrics = frozenset({"hamming"})

    def build(self, base, threads):
        from usearch.index import Index

        self.index = Index(
            ndim=base.shape[1] * 8,
            metric="hamming",
            dtype="b1",
            connectivity=self.m,
            expansion_add=self.ef_construction,
        )
        self.index.add(np.arange(len(base)), np.ascontiguousarray(base), threads=threads)


class SagittaIVFRQ(Sagitta):
    """Sagitta IVF-RaBitQ at ``bits`` per dimension, reranking
    ``refine`` x k candidates exactly (0: estimated distances)."""

    name = "sagitta-ivf-rq"
    knob = "nprobe"
    family = "ivf"
    bits = 1
    refine = 5

    def build(self, base, threads):
        import sagitta

        self.index = sagitta.Index(
            base.shape[1],
            metric="cos",
            kind="ivf_rq",
            bits=self.bits,
            partitions=nlist_for(len(base)),
        )
        self.index.add(np.arange(len(base), dtype=np.uint64), base, threads=threads)

    def set_knob(self, value):
        self.nprobe = value

    def search_one(self, q, k):
        return self.index.search(q, k, nprobe=self.nprobe, refine=self.refine * k, threads=1).keys

    def search_batch(self, queries, k, threads):
        return self.index.search(
            queries, k, nprobe=self.nprobe, refine=self.refine * k, threads=threads
        ).keys


class FaissIVFRaBitQBits(FaissIVFRaBitQ):
    """faiss IndexIVFRaBitQ with ``nb_bits`` = bits (faiss's default query
    quantization, qb = 4), wrapped in IndexRefineFlat when refine > 0."""

    bits = 1
    refine = 5

    def build(self, base, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        d = base.shape[1]
        self.quantizer = faiss.IndexFlatIP(d)
        ivf = faiss.IndexIVFRaBitQ(
            self.quantizer, d, nlist_for(len(base)), faiss.METRIC_INNER_PRODUCT, True, self.bits
        )
        ivf.train(np.ascontiguousarray(base))
        if self.refine:
            self.index = faiss.IndexRefineFlat(ivf)
            self.index.k_factor = self.refine
        else:
            self.index = ivf
        self.index.add(np.ascontiguousarray(base))

    def open(self, path):
        import faiss

        self.index = faiss.read_index(str(path / "index.faiss"))
        if self.refine:
            self.index.k_factor = self.refine


def _variants() -> list[type]:
    """The IVF-RaBitQ grid of the issue: bits {1, 4, 8} x refine
    {0, 2k, 5k}, for Sagitta, faiss and LanceDB, at the same partition
    count (``nlist_for``)."""
    out = []
    for bits in (1, 4, 8):
        for refine in (0, 2, 5):
            tag = f"b{bits}-r{refine}k"
            for base, prefix in (
                (SagittaIVFRQ, "sagitta-ivf-rq"),
                (FaissIVFRaBitQBits, "faiss-ivf-rabitq"),
                (LanceIVFRQ, "lancedb-ivf-rq"),
            ):
                extra = {"num_bits": bits} if base is LanceIVFRQ else {}
                attrs = {
                    "name": f"{prefix}-{tag}",
                    "family": "ivf-rq",
                    "bits": bits,
                    "refine": refine,
                    "__doc__": f"{prefix} at {bits} bits, refine {refine} x k.",
                }
                if extra:
                    attrs["extra"] = extra
                out.append(type(f"{base.__name__}_{bits}_{refine}", (base,), attrs))
    return out


ENGINES = {
    e.name: e
    for e in (
        Sagitta,
        SagittaF32,
        SagittaF16,
        SagittaCollection,
        FaissHNSW,
        Hnswlib,
        USearch,
        LanceHNSW,
        FaissIVFRaBitQ,
        LanceIVFPQ,
        LanceIVFRQ,
        SagittaBits,
        SagittaNPHD,
        FaissBinaryHNSW,
        USearchBits,
        SagittaIVFRQ,
        *_variants(),
    )
}


def select(spec: str, metric: str) -> list[str]:
    """Engine names for ``--engines``: a comma list, or a group (``hnsw``,
    ``ivf``, ``all``) filtered to the dataset's metric."""
    if spec in ("hnsw", "ivf", "ivf-rq", "all"):
        return [
            n
            for n, e in ENGINES.items()
            if metric in e.metrics and (spec == "all" or e.family == spec)
        ]
    return spec.split(",")
