"""Type stubs for the native module ``sagitta._sagitta``."""

import os
from collections.abc import Iterator, Sequence
from typing import Any, Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt

__version__: str

NO_KEY: int
"""Key of empty result slots (``2**64 - 1``); refused as a user key."""

# The store's search limits: k, beam (ef / nprobe / refine), depth (text
# search candidates per leg) and batch_queries (per server request).
LIMITS: dict[str, int]

Metric = Literal["cos", "cosine", "l2", "l2sq", "euclidean", "ip", "dot", "hamming", "nphd"]
DType = Literal[
    "f32", "float32", "f16", "float16", "i8", "int8", "b1", "bits", "binary", "sq8", "sq16"
]
Kind = Literal["hnsw", "flat", "ivf_rq"]
KeyLike: TypeAlias = int | np.integer[Any]
KeysLike: TypeAlias = Sequence[int] | npt.NDArray[np.integer[Any]]
VectorsLike: TypeAlias = npt.ArrayLike | bytes | bytearray | memoryview | Sequence[bytes]
PathLike: TypeAlias = str | os.PathLike[str]
Payload: TypeAlias = Any
"""A dict of columns (numpy arrays or lists), a pandas DataFrame or a
pyarrow Table / RecordBatch, one row per key."""
Where: TypeAlias = dict[str, Any] | list[Any] | str
"""A filter expression (docs/API.md): a dict, a list of conditions (ANDed)
or its JSON text."""

class CorruptFileError(OSError):
    """A file is truncated, damaged, not a Sagitta file, or written by a
    format version this build cannot read."""

class ReadOnlyError(RuntimeError):
    """A mutation was attempted on an index opened from a file, or on a
    collection opened read-only."""

class PayloadError(ValueError):
    """Bad payload columns or filter expression; the message names the field."""

class LockedError(OSError):
    """Another process has the collection open for writing."""

class RemoteStoreError(OSError):
    """The object store refused an operation, or another writer published
    to the same location."""

def publish(
    collection: Collection, location: str, meta: str | None = None, seal: bool = True, keep: int = 2
) -> dict[str, Any]:
    """Publishes the collection to object storage (see sagitta.remote)."""

def fetch(location: str, path: str) -> dict[str, Any]:
    """Fetches the latest published version into ``path``."""

def published(location: str) -> dict[str, Any] | None:
    """The latest published version at ``location``."""

def string_key(s: str) -> int:
    """The 64-bit key of a string id (the store's one definition)."""
    ...

def isa() -> Literal["avx512", "avx2", "neon", "scalar"]:
    """The instruction set the distance kernels use on this machine."""

class SearchResult:
    """Results of :meth:`Index.search` (see its docs for shapes)."""

    keys: npt.NDArray[np.uint64]
    """Matched keys, nearest first; ``NO_KEY`` in empty slots (past
    ``counts``: a collection stores the key ``NO_KEY`` too, so read the
    counts rather than compare with it)."""
    distances: npt.NDArray[np.float32]
    """Distances of the matches; ``inf`` in empty slots."""
    counts: int | npt.NDArray[np.int64]
    """Valid matches per query (an int for a single 1-D query)."""
    payload: Any
    """Payload columns of the matches (a pyarrow Table, one row per entry of
    ``keys`` in row-major order) when the search asked for ``columns``;
    else None."""
    def __iter__(self) -> Iterator[npt.NDArray[Any]]:
        """Unpacks as ``keys, distances``."""

class Index:
    """A Flat, HNSW or IVF-RaBitQ vector index, in memory or opened
    read-only from a file."""

    def __init__(
        self,
        ndim: int,
        metric: Metric = "cos",
        dtype: DType | None = None,
        kind: Kind = "hnsw",
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 64,
        seed: int | None = None,
        bits: int = 1,
        partitions: int | None = None,
        nprobe: int = 8,
        refine: int | None = None,
        keep_full: bool | None = None,
    ) -> None:
        """Creates an empty in-memory index (``kind="ivf_rq"``: IVF-RaBitQ
        with ``bits`` per dimension; trained by :meth:`train` or the first
        :meth:`add`). Without ``dtype``, a float HNSW index stores sq8 codes
        for the graph and keeps float32 rows for an exact rerank."""
    def train(
        self, sample: VectorsLike, *, progress: bool = False, threads: int | None = None
    ) -> None:
        """Trains an ``ivf_rq`` index on ``sample`` and re-encodes what is stored."""
    @staticmethod
    def open(path: PathLike) -> Index:
        """Opens a file written by :meth:`save`, memory-mapped and read-only."""
    def save(self, path: PathLike) -> None:
        """Writes the index to ``path`` durably (tmp, fsync, rename, fsync dir)."""
    def add(
        self, keys: KeyLike | KeysLike, vectors: VectorsLike, *, threads: int | None = None
    ) -> None:
        """Adds vectors under new keys; the batch is validated before anything is added."""
    def upsert(
        self, keys: KeyLike | KeysLike, vectors: VectorsLike, *, threads: int | None = None
    ) -> None:
        """Inserts or replaces vectors (last row of a key wins); validated first."""
    def search(
        self,
        queries: VectorsLike,
        k: int,
        *,
        filter: KeysLike | None = None,
        radius: float | None = None,
        exact: bool = False,
        expansion: int | None = None,
        nprobe: int | None = None,
        refine: int | None = None,
        threads: int | None = None,
    ) -> SearchResult:
        """The ``k`` nearest neighbours of each query."""
    @overload
    def get(self, keys: KeyLike) -> npt.NDArray[Any] | bytes | None: ...
    @overload
    def get(self, keys: KeysLike) -> list[npt.NDArray[Any] | bytes | None]: ...
    @overload
    def contains(self, keys: KeyLike) -> bool: ...
    @overload
    def contains(self, keys: KeysLike) -> npt.NDArray[np.bool_]: ...
    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is in the index."""
    def remove(self, keys: KeyLike | KeysLike) -> int:
        """Removes keys; returns how many were present."""
    def __len__(self) -> int:
        """Live vectors in the index."""
    @property
    def ndim(self) -> int:
        """Dimensions (bits for binary metrics)."""
    @property
    def metric(self) -> Literal["cos", "l2", "ip", "hamming", "nphd"]:
        """Metric name."""
    @property
    def dtype(self) -> Literal["f32", "f16", "i8", "b1", "sq8", "sq16"]:
        """Storage type."""
    @property
    def keep_full(self) -> bool:
        """Whether float32 rows are kept beside the codes for an exact rerank."""
    @property
    def kind(self) -> Kind:
        """``"hnsw"`` or ``"flat"``."""
    @property
    def connectivity(self) -> int:
        """HNSW links per node (M); 0 for a flat index."""
    @property
    def expansion_add(self) -> int:
        """Beam width used while adding."""
    @property
    def expansion_search(self) -> int:
        """Default beam width of searches (settable)."""
    @expansion_search.setter
    def expansion_search(self, value: int) -> None: ...
    @property
    def is_trained(self) -> bool:
        """False only for an ``ivf_rq`` index neither trained nor added to."""
    @property
    def bits(self) -> int | None:
        """RaBitQ bits per dimension (``ivf_rq``)."""
    @property
    def partitions(self) -> int | None:
        """IVF partitions once trained (``ivf_rq``)."""
    @property
    def nprobe(self) -> int | None:
        """Default partitions probed (``ivf_rq``)."""
    @nprobe.setter
    def nprobe(self, value: int) -> None: ...
    @property
    def memory_usage(self) -> int:
        """Heap bytes (in memory) or mapped file bytes (opened file)."""
    @property
    def read_only(self) -> bool:
        """Whether the index was opened from a file."""
    @property
    def path(self) -> os.PathLike[str] | None:
        """The file an opened index maps, or ``None``."""

class LowDimIndex:
    """Exact kNN over low-dimensional vectors (1 to 32 dims, squared L2), with a kNN label vote."""

    def __init__(self, vectors: Any, labels: Any | None = None) -> None: ...
    @staticmethod
    def open(path: str | os.PathLike[str]) -> LowDimIndex: ...
    def save(self, path: str | os.PathLike[str]) -> None: ...
    def search(
        self, queries: Any, k: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64]]: ...
    def classify(self, queries: Any, k: int) -> Any: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def has_labels(self) -> bool: ...
    @property
    def grid_scale(self) -> float | None: ...
    @property
    def format_version(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

class CollectionIterator(Iterator[Any]):
    """Lazy iterator over a collection's keys or (key, vector) pairs."""

    def __iter__(self) -> CollectionIterator: ...
    def __next__(self) -> Any: ...

class TextSearchResult:
    """A text or hybrid search's rows, best first (1-D arrays)."""

    keys: npt.NDArray[np.uint64]
    scores: npt.NDArray[np.float32]
    dense_distances: npt.NDArray[np.float32]
    dense_ranks: npt.NDArray[np.int32]
    text_scores: npt.NDArray[np.float32]
    text_ranks: npt.NDArray[np.int32]
    payload: Any
    def __iter__(self) -> Iterator[Any]: ...
    def __len__(self) -> int: ...

class Collection:
    """A durable collection on a directory: an active segment, sealed
    memory-mapped segments and a write-ahead log."""

    @staticmethod
    def create(
        path: PathLike,
        *,
        ndim: int,
        metric: Metric = "cos",
        dtype: DType | None = None,
        kind: Kind = "hnsw",
        segment_size: int = 64 << 20,
        max_segment_size: int | None = None,
        durability: str = "batch",
        key_bits: int = 64,
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 64,
        bits: int = 1,
        partitions: int | None = None,
        nprobe: int = 8,
        refine: int | None = None,
        codes: Literal["sq8", "f16", "sq16", "none"] | None = None,
        text_fields: list[str] | dict[str, Literal["en", "simple"]] | None = None,
        embed_model: str | None = None,
        bm25_k1: float | None = None,
        bm25_b: float | None = None,
        index_threshold: int | None = None,
    ) -> Collection:
        """Creates a collection in ``path`` and opens it for writing (float32
        vectors by default, with sq8 codes for graph traversal unless
        ``codes="none"``).
        ``text_fields``: payload string columns with a BM25 index;
        ``embed_model``: a built-in model embedding the first text field.
        ``key_bits=128``: 128-bit keys (ints, ``bytes(16)``, V16 arrays or
        (n, 2) uint64 (high, low) halves; arrays of keys come back as
        (..., 2) uint64 halves)."""
    @staticmethod
    def open(path: PathLike, *, read_only: bool = False) -> Collection:
        """Opens a collection (one writer, any number of readers)."""
    @staticmethod
    def metadata(path: PathLike) -> dict[str, Any]:
        """The manifest's config and segment figures, without opening."""
    def rebuild_bloom(self) -> int:
        """Rebuilds the bloom filter over every live key; returns their number."""
    def add(self, keys: KeyLike | KeysLike, vectors: VectorsLike) -> None:
        """Adds new keys; the batch is validated whole first."""
    def add_once(self, keys: KeyLike | KeysLike, vectors: VectorsLike) -> int:
        """Adds the keys not already present; returns how many were added."""
    def upsert(
        self, keys: KeyLike | KeysLike, vectors: VectorsLike | None, payload: Payload | None = None
    ) -> None:
        """Inserts or replaces vectors, with optional payload columns
        (``vectors=None``: embedded from the text by the collection's model)."""
    def remove(self, keys: KeyLike | KeysLike | None = None, *, where: Where | None = None) -> int:
        """Deletes keys, or the vectors whose payload passes ``where``."""
    def set_payload(
        self,
        keys: KeyLike | KeysLike | None = None,
        payload: Payload | None = None,
        *,
        where: Where | None = None,
        values: dict[str, Any] | None = None,
    ) -> int:
        """Sets payload columns of stored rows (vectors and other columns
        kept): ``payload`` one row per key, or ``values`` one value per column
        for every key or every row passing ``where``; returns the rows updated."""
    @property
    def schema(self) -> dict[str, str]:
        """Payload columns and their types, in order."""
    def scan(self, where: Where | None = None, columns: list[str] | None = None) -> Any:
        """Keys (first column ``key``) and payload of the live vectors that
        pass ``where``, as a pyarrow Table."""
    @overload
    def search(
        self,
        queries: VectorsLike,
        k: int,
        *,
        filter: KeysLike | None = None,
        where: Where | None = None,
        columns: bool | list[str] | None = None,
        radius: float | None = None,
        exact: bool = False,
        expansion: int | None = None,
        nprobe: int | None = None,
        refine: int | None = None,
        threads: int | None = None,
    ) -> SearchResult: ...
    @overload
    def search(
        self,
        queries: VectorsLike | None,
        k: int,
        *,
        filter: KeysLike | None = None,
        where: Where | None = None,
        columns: bool | list[str] | None = None,
        exact: bool = False,
        expansion: int | None = None,
        nprobe: int | None = None,
        refine: int | None = None,
        text: str,
        fusion: Literal["rrf", "alpha", "dbsf"] | None = None,
        alpha: float | None = None,
        rrf_k: float | None = None,
        depth: int | None = None,
    ) -> TextSearchResult:
        """The ``k`` nearest neighbours over every segment; with ``text``,
        a BM25 or hybrid (dense + BM25, fused) search."""
    def get(
        self,
        keys: KeyLike | KeysLike,
        *,
        payload: bool = False,
        columns: list[str] | None = None,
    ) -> Any:
        """Stored vectors (as :meth:`Index.get`); with ``payload=True`` or
        ``columns``, ``(vectors, pyarrow Table)``."""
    @overload
    def contains(self, keys: KeyLike) -> bool: ...
    @overload
    def contains(self, keys: KeysLike) -> npt.NDArray[np.bool_]: ...
    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is present."""
    def count(self, where: Where | None = None) -> int:
        """Live vectors, or those whose payload passes ``where``."""
    def __len__(self) -> int:
        """Live vectors."""
    def keys(self) -> CollectionIterator:
        """Lazy iterator over every live key."""
    def items(self) -> CollectionIterator:
        """Lazy iterator over every live (key, vector)."""
    def compact(self) -> None:
        """Like ``optimize()``, and rewrites every segment holding deleted vectors."""
    def optimize(self, wait: bool = True) -> None:
        """Hands the mutable part to the background optimizer; with ``wait``,
        waits until everything written before the call is indexed and merged."""
    def flush(self) -> None:
        """Makes every acknowledged write durable now."""
    def seal(self) -> None:
        """Writes the mutable part as a segment file now (indexed in the background)."""
    def stats(self) -> dict[str, Any]:
        """Segments, vectors, unindexed vectors, tombstones, bytes, bloom fill, optimizer."""
    def close(self) -> None:
        """Writes the mutable part to a segment (nothing to replay at the next
        open), stops background work, releases the writer lock."""
    def __enter__(self) -> Collection: ...
    def __exit__(self, *args: object) -> bool: ...
    @property
    def ndim(self) -> int:
        """Dimensions."""
    @property
    def metric(self) -> str:
        """Metric name."""
    @property
    def dtype(self) -> str:
        """Storage type."""
    @property
    def index_threshold(self) -> int:
        """Rows under which a segment is kept without a graph and searched
        by exact scan (0: every segment gets one)."""
    @property
    def codes(self) -> str | None:
        """Compact codes of the built graph segments, or None."""
    @property
    def connectivity(self) -> int:
        """HNSW graph degree."""
    @property
    def expansion_add(self) -> int:
        """HNSW build beam width of the graphs built from now on."""
    @expansion_add.setter
    def expansion_add(self, value: int) -> None:
        """Graphs built afterwards by this handle use ``value`` (1..=65536);
        not persisted. ``ReadOnlyError`` on a read-only handle."""
    @property
    def expansion_search(self) -> int:
        """Default HNSW search beam width."""
    @property
    def read_only(self) -> bool:
        """Whether opened read-only."""
    @property
    def path(self) -> os.PathLike[str]:
        """The collection's directory."""
